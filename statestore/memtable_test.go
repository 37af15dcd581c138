package statestore

import (
	"runtime"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestMemTableSizeFor(t *testing.T) {
	for _, c := range []struct {
		budget, n int64
		want      uint64
	}{
		{DefaultMemTableBudget, 0, MaxMemTableBytes}, // nothing expected yet
		{DefaultMemTableBudget, 1, MaxMemTableBytes},
		{DefaultMemTableBudget, 16, MaxMemTableBytes},
		{DefaultMemTableBudget, 17, 64 << 20 / 17},
		{DefaultMemTableBudget, 256, 256 << 10},
		{DefaultMemTableBudget, 1024, MinMemTableBytes},
		{DefaultMemTableBudget, 4096, MinMemTableBytes},
		{1 << 30, 1024, 1 << 20},
		{1, 1, MinMemTableBytes},
	} {
		if got := memTableSizeFor(c.budget, c.n); got != c.want {
			t.Errorf("memTableSizeFor(%d, %d) = %d, want %d", c.budget, c.n, got, c.want)
		}
	}
}

// TestIdleStoreHeap (issue 22): in a worker that expects a thousand
// stores, an idle store's memtable is 64 KiB, not the 256 KiB Pebble
// starts a 4 MiB one at (without cgo, as joiner is built, the arena is Go
// heap, and the collector's target grows by twice it under GOGC=200);
// with a few stores each keeps the 4 MiB memtable.
func TestIdleStoreHeap(t *testing.T) {
	for _, c := range []struct {
		expect          int
		size, allocated uint64
	}{
		{1024, MinMemTableBytes, MinMemTableBytes},
		{6, MaxMemTableBytes, 256 << 10},
	} {
		m := openManager(t, Options{Dirs: []string{"/state"}, FS: vfs.NewMem(), MinFreeBytes: NoMinFreeBytes})
		m.Expect(c.expect)
		for task := range 4 {
			s := openTask(t, m, task)
			if err := s.Apply([]Tick{{Symbol: "S", Price: 1, TimestampMs: 1, Offset: 0}}, 0); err != nil {
				t.Fatal(err)
			}
			if got := s.popts.MemTableSize; got != c.size {
				t.Errorf("expecting %d stores: MemTableSize %d, want %d", c.expect, got, c.size)
			}
			if got := s.db.Metrics().MemTable.Size; got != c.allocated {
				t.Errorf("expecting %d stores: the memtable holds %d bytes, want %d", c.expect, got, c.allocated)
			}
		}
	}
}

// TestHeldHeapBytes: HeldHeapBytes is within half and one and a half
// times the heap that 256 idle stores hold in fact, measured (with cgo,
// as go test builds here, the memtable arenas are C memory and the
// measure falls short of it by them; joiner is built without).
func TestHeldHeapBytes(t *testing.T) {
	m := openManager(t, Options{Dirs: []string{t.TempDir()}, MinFreeBytes: NoMinFreeBytes})
	m.Expect(1024)
	const n = 256
	before := heapInUse()
	for task := range n {
		s := openTask(t, m, task)
		if err := s.Apply([]Tick{{Symbol: "S", Price: 1, TimestampMs: 1, Offset: 0}}, 0); err != nil {
			t.Fatal(err)
		}
	}
	measured := float64(heapInUse()-before) / n
	est := float64(m.HeldHeapBytes()) / n
	t.Logf("per idle store: %.0f KiB of heap in use, HeldHeapBytes %.0f KiB", measured/1024, est/1024)
	if measured < est/2 || measured > est*1.5 {
		t.Errorf("an idle store holds %.0f KiB of heap; HeldHeapBytes counts %.0f KiB (update storeHeapBytes)", measured/1024, est/1024)
	}
}

func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}
