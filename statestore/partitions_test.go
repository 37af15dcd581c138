package statestore

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The partition counts a worker planned with survive a reopen of its
// state dirs; with several dirs the longest list wins (a dir added
// later knows fewer); a damaged file is an error, not a guess.
func TestPartitionCounts(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	m, err := Open(Options{Dirs: []string{a}, Group: "g", CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := m.PartitionCounts(); err != nil || got != nil {
		t.Fatalf("new state dir: %v, %v; want none", got, err)
	}
	if err := m.RecordPartitionCounts([]int{6, 8}); err != nil {
		t.Fatal(err)
	}
	m.Close()
	m, err = Open(Options{Dirs: []string{b, a}, Group: "g", CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if got, err := m.PartitionCounts(); err != nil || !slices.Equal(got, []int{6, 8}) {
		t.Fatalf("after a reopen with a new dir: %v, %v; want [6 8]", got, err)
	}
	if err := m.RecordPartitionCounts([]int{6, 8, 12}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{a, b} {
		data, err := os.ReadFile(filepath.Join(d, "g", partitionCountsFile))
		if err != nil || string(data) != "6\n8\n12\n" {
			t.Errorf("%s: %q, %v; want the three counts", d, data, err)
		}
	}
	if err := os.WriteFile(filepath.Join(b, "g", partitionCountsFile), []byte("6\nx\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := m.PartitionCounts(); err == nil {
		t.Error("a damaged file read without an error")
	}
}
