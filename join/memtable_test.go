package join

import (
	"context"
	"testing"

	"github.com/joiner-dev/joiner/group"
	"github.com/joiner-dev/joiner/record"
	"github.com/joiner-dev/joiner/statestore"
)

// TestAssignedSizesMemtablesForTheTasks (issue 22): the stores an
// assignment opens size their memtables for every store the worker then
// holds, active and standby (statestore.Options.MemTableBudget): 30
// active tasks and 10 standbys share the 64 MiB default, 1.6 MiB each.
func TestAssignedSizesMemtablesForTheTasks(t *testing.T) {
	r := newFakeRig(t)
	var active, standby []int
	for p := range 40 {
		if p < 30 {
			active = append(active, p)
		} else {
			standby = append(standby, p)
		}
	}
	a := group.Assignment{Generation: 1, Partitions: 40, Standby: standby,
		Topics: map[string][]int{record.DefaultMarketTopic: active, record.DefaultNotificationsTopic: active}}
	r.w.Assigned(context.Background(), a)
	want := uint64(statestore.DefaultMemTableBudget / 40)
	states, _ := r.tasks()
	if len(states) != 30 {
		t.Fatalf("%d state tasks, want 30", len(states))
	}
	for p, st := range states {
		if got := st.store.MemTableSize(); got != want {
			t.Errorf("task %d: memtable of %d bytes, want %d (the budget over 40 stores)", p, got, want)
		}
	}
}
