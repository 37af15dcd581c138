package join

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/group"
)

// fakeMember records commits; it is always active.
type fakeMember struct {
	mu      sync.Mutex
	commits []map[string]map[int]int64
}

func (f *fakeMember) Run(ctx context.Context) error { <-ctx.Done(); return nil }
func (f *fakeMember) Commit(_ context.Context, o map[string]map[int]int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.commits = append(f.commits, o)
	return nil
}
func (f *fakeMember) FetchOffsets(context.Context, string, []int) (map[int]int64, error) {
	return map[int]int64{}, nil
}
func (f *fakeMember) Active() bool { return true }

// The market offset committed for a task never goes below the group's
// committed offset, and is committed only once the task is restored: a
// store restored from scratch starts below it.
func TestMarketCommitNeverGoesBack(t *testing.T) {
	w, pt, _ := newTestWorker(t)
	fm := &fakeMember{}
	w.member = fm
	st := pt.st
	st.dlqFrom = 100 // the group's committed market offset
	if err := st.applyRetrying(context.Background(), []fetchedRecord{recAt(5, 1, `{"symbol":"X","price":1}`)}, st.dlqFrom); err != nil {
		t.Fatal(err)
	}
	restoring, err := w.cfg.Stores.OpenTask(1)
	if err != nil {
		t.Fatal(err)
	}
	w.states[1] = newStateTask(&w.taskEnv, 1, restoring, false) // restored is still open
	if err := w.commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(fm.commits) != 1 {
		t.Fatalf("%d commits, want 1", len(fm.commits))
	}
	market := fm.commits[0]["market"]
	if got, ok := market[0]; !ok || got != 100 {
		t.Errorf("market offset committed for task 0 (applied 5, group at 100) = %d (%v), want 100", got, ok)
	}
	if got, ok := market[1]; ok {
		t.Errorf("market offset %d committed for task 1, which is still restoring", got)
	}
	// Past the group's offset, the applied offset leads.
	if err := st.applyRetrying(context.Background(), []fetchedRecord{recAt(150, 2, `{"symbol":"X","price":2}`)}, st.dlqFrom); err != nil {
		t.Fatal(err)
	}
	if err := w.commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := fm.commits[len(fm.commits)-1]["market"][0]; got != 151 {
		t.Errorf("market offset committed after applying 150 = %d, want 151", got)
	}
}

// A lost membership stops every task; tasks assigned again afterwards are
// new ones, which start from the group's committed offsets rather than
// from where the lost ones were.
func TestLostTasksRestartFromCommittedOffsets(t *testing.T) {
	w, _, _ := newTestWorker(t)
	// newTestWorker pre-installs task 0's state; start from nothing.
	if err := w.states[0].close(); err != nil {
		t.Fatal(err)
	}
	w.states = map[int]*stateTask{}
	w.member = &fakeMember{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w.ctx, w.done = ctx, ctx.Done()
	a := group.Assignment{Generation: 1, Partitions: 1, Topics: map[string][]int{"market": {0}, "notifications": {0}},
		Owners: []group.Owner{{InstanceID: "w"}}}
	w.Assigned(ctx, a)
	first := w.procs[0]
	if first == nil {
		t.Fatal("task 0 not started")
	}
	w.Lost(ctx, errors.New("injected"))
	if len(w.procs)+len(w.states) != 0 {
		t.Fatalf("after Lost: %d process and %d state tasks still held", len(w.procs), len(w.states))
	}
	select {
	case <-first.stopped:
	default:
		t.Fatal("the lost task is still running")
	}
	if ok, why := w.Ready(); ok {
		t.Errorf("ready after Lost: %s", why)
	}
	a.Generation = 2
	w.Assigned(ctx, a)
	if w.procs[0] == nil || w.procs[0] == first {
		t.Fatal("task 0 assigned again after Lost was not restarted")
	}
	w.stopAll()
}

// A stopped state task answers errTaskStopped to readers and appliers
// (the store's own ErrClosed guarantee), closes idempotently, and keeps its
// applied offset for the final commit.
func TestStoppedStateTask(t *testing.T) {
	_, pt, _ := newTestWorker(t)
	st := pt.st
	if err := st.applyRetrying(context.Background(), []fetchedRecord{recAt(7, 1, `{"symbol":"X","price":1}`)}, -1); err != nil {
		t.Fatal(err)
	}
	if err := st.close(); err != nil {
		t.Fatal(err)
	}
	if err := st.close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if _, _, err := st.getAsOf("X", 10); !errors.Is(err, errTaskStopped) {
		t.Errorf("getAsOf after close: %v, want errTaskStopped", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := st.applyRetrying(ctx, []fetchedRecord{recAt(8, 2, `{"symbol":"X","price":2}`)}, -1); !errors.Is(err, errTaskStopped) {
		t.Errorf("apply after close: %v, want errTaskStopped at once", err)
	}
	if got := st.appliedOffset(); got != 7 {
		t.Errorf("applied offset after close = %d, want 7", got)
	}
}
