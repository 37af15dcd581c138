package statestore

import (
	"os"
	"runtime"
	"testing"
)

// fdLinks lists this process's open files (/proc/self/fd).
func fdLinks(t *testing.T) map[string]string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	out := map[string]string{}
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil {
			out[e.Name()] = l
		}
	}
	return out
}

// TestStoreOpenFiles: an open, idle task store holds at most
// OpenFilesPerStore files (its LOCK, WAL and MANIFEST: Pebble's
// directories are opened only to be synced, lazydir.go), after writes
// and a flush too.
func TestStoreOpenFiles(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/fd")
	}
	m, err := Open(Options{Dirs: []string{t.TempDir()}, Group: "g", InstanceID: "i"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	before := fdLinks(t)
	var stores []*Store
	for p := range 4 {
		s, err := m.OpenTask(p)
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, s)
	}
	for i, s := range stores {
		if err := s.Apply([]Tick{{Symbol: "BBCA", Price: float64(1 + i), TimestampMs: 1000, Offset: 0}}, 0); err != nil {
			t.Fatal(err)
		}
		if err := s.db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	var added []string
	for fd, l := range fdLinks(t) {
		if before[fd] != l {
			added = append(added, l)
		}
	}
	if len(added) > 4*OpenFilesPerStore {
		t.Fatalf("4 open stores hold %d files, want at most %d each: %v", len(added), OpenFilesPerStore, added)
	}
	t.Logf("4 open stores hold %d files: %v", len(added), added)
}
