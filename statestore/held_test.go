package statestore

import (
	"maps"
	"slices"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func applyTo(t *testing.T, s *Store, offset int64) {
	t.Helper()
	if err := s.Apply([]Tick{{Symbol: "X", Price: float64(offset), TimestampMs: offset, Offset: offset}}, offset); err != nil {
		t.Fatal(err)
	}
}

func mustHeld(t *testing.T, m *Manager, want map[int]int64) {
	t.Helper()
	got, err := m.Held()
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got, want) {
		t.Fatalf("Held() = %v, want %v", got, want)
	}
}

func sidecarExists(fs vfs.FS, s *Store) bool {
	_, err := fs.Stat(fs.PathJoin(s.Dir(), appliedSidecar))
	return err == nil
}

// TestHeld: Held reports open stores live, closed ones from the sidecar
// their Close wrote, and stores closed uncleanly (no sidecar) by reading
// them; an empty store lacks offset 0; a removed one is gone. A store
// being used has no sidecar on disk, so a kill cannot leave a stale one.
func TestHeld(t *testing.T) {
	fsCases(t, func(t *testing.T, fs vfs.FS, dir string) {
		opts := Options{Dirs: []string{dir}, FS: fs}
		m := openManager(t, opts)
		s0 := openTask(t, m, 0)
		applyTo(t, s0, 5)
		s1 := openTask(t, m, 1)
		applyTo(t, s1, 9)
		s2 := openTask(t, m, 2)
		applyTo(t, s2, 3)
		s3 := openTask(t, m, 3) // empty
		mustHeld(t, m, map[int]int64{0: 6, 1: 10, 2: 4, 3: 0})
		applyTo(t, s0, 7)
		if err := s1.Close(); err != nil {
			t.Fatal(err)
		}
		mustHeld(t, m, map[int]int64{0: 8, 1: 10, 2: 4, 3: 0})
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
		// Task 2 "was killed": its sidecar never written.
		if err := fs.Remove(fs.PathJoin(s2.Dir(), appliedSidecar)); err != nil {
			t.Fatal(err)
		}
		if err := fs.Remove(fs.PathJoin(s3.Dir(), appliedSidecar)); err != nil {
			t.Fatal(err)
		}

		m2 := openManager(t, opts)
		mustHeld(t, m2, map[int]int64{0: 8, 1: 10, 2: 4, 3: 0})
		// Open again: the sidecar goes, the offset is live.
		s1 = openTask(t, m2, 1)
		if sidecarExists(fs, s1) {
			t.Error("an open store still has its sidecar: a kill would leave it stale")
		}
		applyTo(t, s1, 12)
		mustHeld(t, m2, map[int]int64{0: 8, 1: 13, 2: 4, 3: 0})
		if err := s1.Close(); err != nil {
			t.Fatal(err)
		}
		mustHeld(t, m2, map[int]int64{0: 8, 1: 13, 2: 4, 3: 0})
		if err := m2.RemoveTask(0); err != nil {
			t.Fatal(err)
		}
		mustHeld(t, m2, map[int]int64{1: 13, 2: 4, 3: 0})
		if err := m2.Close(); err != nil {
			t.Fatal(err)
		}
		m3 := openManager(t, opts)
		mustHeld(t, m3, map[int]int64{1: 13, 2: 4, 3: 0})
	})
}

// TestHeldConcurrentWithOpenClose: Held may run while tasks are opened,
// applied and closed (go test -race); what it reports for a task is
// always an offset the task's store had.
func TestHeldConcurrentWithOpenClose(t *testing.T) {
	m := openManager(t, Options{Dirs: []string{"/state"}, FS: vfs.NewMem()})
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			got, err := m.Held()
			if err != nil {
				t.Error(err)
				return
			}
			for p, next := range got {
				if next < 0 || next > 21 || p < 0 || p > 2 {
					t.Errorf("Held reported task %d at %d", p, next)
					return
				}
			}
		}
	}()
	for round := range 20 {
		for p := range 3 {
			s := openTask(t, m, p)
			applyTo(t, s, int64(round+1))
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(done)
	wg.Wait()
	mustHeld(t, m, map[int]int64{0: 21, 1: 21, 2: 21})
}

// TestActiveTasks: a store marked as a standby copy is left out of
// ActiveTasks (but not of Tasks or Held), across a restart, until it is
// marked active again.
func TestActiveTasks(t *testing.T) {
	fs := vfs.NewMem()
	opts := Options{Dirs: []string{"/state"}, FS: fs}
	m := openManager(t, opts)
	for p := range 3 {
		s := openTask(t, m, p)
		if err := s.SetStandby(p == 1); err != nil {
			t.Fatal(err)
		}
		if err := s.SetStandby(p == 1); err != nil { // idempotent
			t.Fatal(err)
		}
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m2 := openManager(t, opts)
	active, err := m2.ActiveTasks()
	if err != nil {
		t.Fatal(err)
	}
	all, err := m2.Tasks()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(active, []int{0, 2}) || !slices.Equal(all, []int{0, 1, 2}) {
		t.Fatalf("ActiveTasks %v, Tasks %v; want [0 2] and [0 1 2]", active, all)
	}
	mustHeld(t, m2, map[int]int64{0: 0, 1: 0, 2: 0})
	s1 := openTask(t, m2, 1)
	if !s1.Standby() {
		t.Error("task 1's store does not say it was a standby copy after a restart")
	}
	if err := s1.SetStandby(false); err != nil {
		t.Fatal(err)
	}
	if active, _ := m2.ActiveTasks(); !slices.Equal(active, []int{0, 1, 2}) {
		t.Fatalf("ActiveTasks %v after task 1 became active, want [0 1 2]", active)
	}
	if s1.Standby() {
		t.Error("task 1's store still says it is a standby copy")
	}
}
