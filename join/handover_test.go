package join

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/group"
	"github.com/joiner-dev/joiner/record"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// alertIDs returns the ids of the alerts written so far.
func (r *fakeRig) alertIDs(t *testing.T) []string {
	t.Helper()
	var ids []string
	for _, m := range r.out.byTopic(record.DefaultAlertsTopic) {
		var a record.Alert
		if err := json.Unmarshal(m.Value, &a); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, a.ID)
	}
	return ids
}

// waitAlert waits until the alert of notification id is written.
func (r *fakeRig) waitAlert(t *testing.T, id string) {
	t.Helper()
	waitFor(t, "the alert of "+id, func() bool { return slices.Contains(r.alertIDs(t), id) })
}

// commitsSince returns the commits the member received from the n-th on.
func (r *fakeRig) commitsSince(n int) []map[string]map[int]int64 {
	r.member.mu.Lock()
	defer r.member.mu.Unlock()
	return slices.Clone(r.member.commits[n:])
}

func (r *fakeRig) commitCount() int {
	r.member.mu.Lock()
	defer r.member.mu.Unlock()
	return len(r.member.commits)
}

// histogramCount reads the observation count of h.
func histogramCount(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// gaugeValue reads g.
func gaugeValue(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// TestKeptTaskRunsThroughRebalance: between Rebalancing and the next
// Assigned, a task that stays goes on producing alerts, and so does one
// that is about to be revoked (the group withholds it first, so nobody
// else runs it). The Assigned that revokes a task pauses that task alone:
// its final offsets are committed inside Assigned, it writes nothing
// after, and the pause histogram observes it once; the kept task is the
// same task object throughout.
func TestKeptTaskRunsThroughRebalance(t *testing.T) { keptTaskRunsThroughRebalance(t, "") }

// keptTaskRunsThroughRebalance is TestKeptTaskRunsThroughRebalance with
// the restores of mode (restoreMode; "": the default).
func keptTaskRunsThroughRebalance(t *testing.T, mode string) {
	r := newFakeRig(t)
	if mode != "" {
		restoreMode(t, &r.w.taskEnv, mode)
	}
	ctx := context.Background()
	s0, s1 := symbolOf(t, 0, 2), symbolOf(t, 1, 2)
	r.f.produce("market", 0, 1000, s0, tickJSON(s0, 1))
	r.f.produce("market", 1, 1000, s1, tickJSON(s1, 2))
	r.w.Assigned(ctx, assignment(1, []int{0, 1}, []int{0, 1}))
	_, procs1 := r.tasks()
	r.f.produce("notifications", 0, 2000, s0, noteJSON("a0", s0))
	r.f.produce("notifications", 1, 2000, s1, noteJSON("a1", s1))
	r.waitAlert(t, "a0")
	r.waitAlert(t, "a1")

	r.w.Rebalancing(ctx)
	r.f.produce("notifications", 0, 3000, s0, noteJSON("b0", s0))
	r.f.produce("market", 1, 2500, s1, tickJSON(s1, 3))
	r.f.produce("notifications", 1, 3000, s1, noteJSON("b1", s1))
	r.waitAlert(t, "b0") // not paused by the rebalance
	r.waitAlert(t, "b1")
	waitFor(t, "b1 acknowledged", func() bool { _, p := r.tasks(); return p[1].acked.Load() == 2 })
	waitFor(t, "the tick of task 1 applied", func() bool { return r.w.stateTask(1).appliedOffset() == 1 })

	before := r.commitCount()
	r.w.Assigned(ctx, assignment(2, []int{0}, []int{0}))
	var final map[string]map[int]int64
	for _, c := range r.commitsSince(before) {
		if _, ok := c["notifications"][1]; ok {
			final = c
		}
	}
	if final == nil || final["notifications"][1] != 2 || final["market"][1] != 2 {
		t.Fatalf("commits inside the Assigned that revoked task 1: %v, want notifications-1 at 2 and market-1 at 2", r.commitsSince(before))
	}
	if _, procs2 := r.tasks(); procs2[0] != procs1[0] || procs2[1] != nil {
		t.Fatalf("after revoking task 1: process tasks %v, want task 0 untouched (%p) and task 1 gone", procs2, procs1[0])
	}
	select {
	case <-procs1[1].stopped:
	default:
		t.Error("the revoked task 1 is still running after Assigned returned")
	}
	if n := histogramCount(t, r.w.metrics.RebalancePause); n != 1 {
		t.Errorf("joiner_rebalance_pause_seconds observed %d tasks, want 1 (the revoked one)", n)
	}
	if got := counterValue(r.w.metrics.TasksRevoked); got != 1 {
		t.Errorf("tasks revoked = %d, want 1", got)
	}
	if got := counterValue(r.w.metrics.TasksAssigned); got != 2 {
		t.Errorf("tasks assigned = %d, want 2 (both, in generation 1)", got)
	}

	r.f.produce("notifications", 1, 4000, s1, noteJSON("c1", s1))
	r.f.produce("notifications", 0, 4000, s0, noteJSON("c0", s0))
	r.waitAlert(t, "c0")
	time.Sleep(100 * time.Millisecond)
	if slices.Contains(r.alertIDs(t), "c1") {
		t.Fatal("the revoked task 1 wrote an alert after Assigned returned")
	}
	onDisk, err := r.w.cfg.Stores.Tasks()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(onDisk, []int{0}) {
		t.Errorf("stores on disk %v, want task 0 only", onDisk)
	}
}

// withStandby is assignment plus standby and warm-up tasks.
// standby returns the rig's standby task of p, failing the test when it
// has none.
func (r *fakeRig) standby(t *testing.T, p int) *stateTask {
	t.Helper()
	r.w.mu.RLock()
	sb := r.w.standbys[p]
	r.w.mu.RUnlock()
	if sb == nil {
		t.Fatalf("no standby task for task %d", p)
	}
	return sb
}

func withStandby(a group.Assignment, standby, warmup []int) group.Assignment {
	a.Standby, a.Warmup = standby, warmup
	return a
}

// TestStandbyTask: a standby tails market-p into its store, dead-letters
// nothing, is never committed and serves no lookup; its records count as
// standby (then warmup) restores and its lag gauge reaches 0. When it
// becomes active, the same store goes on (the active task restores only
// what the standby lacked: nothing counts as a move) and it processes
// notifications; when it goes back to standby, its store is kept, its
// process task stops and its last offsets are committed.
func TestStandbyTask(t *testing.T) {
	r := newFakeRig(t)
	ctx := context.Background()
	s1 := symbolOf(t, 1, 2)
	for i := range 4 {
		r.f.produce("market", 1, int64(1000+i), s1, tickJSON(s1, float64(i)+0.5)) // a price is greater than zero
	}
	r.f.produce("market", 1, 1004, s1, `{"not a tick"`)
	r.f.produce("notifications", 1, 5000, s1, noteJSON("n1", s1))

	r.w.Assigned(ctx, withStandby(assignment(1, []int{0}, []int{0}), []int{1}, nil))
	sb := r.standby(t, 1)
	waitFor(t, "the standby caught up", func() bool { return sb.appliedOffset() == 4 })
	if st := r.w.stateTask(1); st != nil {
		t.Error("the standby of task 1 serves lookups as if it were active")
	}
	if _, procs := r.tasks(); procs[1] != nil {
		t.Error("a process task runs for the standby task 1")
	}
	reasons := func() map[string]int64 {
		out := map[string]int64{}
		for _, why := range RestoreReasons {
			out[why] = counterValue(r.w.metrics.RestoreRecords.WithLabelValues(why))
		}
		return out
	}
	waitFor(t, "5 standby records counted", func() bool { return reasons()[ReasonStandby] == 5 })
	waitFor(t, "the standby lag at 0", func() bool {
		return gaugeValue(t, r.w.metrics.StandbyLag.WithLabelValues("1")) == 0
	})
	if got := gaugeValue(t, r.w.metrics.Tasks.WithLabelValues(roleStandby)); got != 1 {
		t.Errorf("joiner_tasks{role=standby} = %v, want 1", got)
	}
	r.f.produce("market", 1, 1005, s1, tickJSON(s1, 5))
	waitFor(t, "the standby tailing", func() bool { return sb.appliedOffset() == 5 && reasons()[ReasonStandby] == 6 })
	if err := r.w.commit(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range r.commitsSince(0) {
		for topic, ps := range c {
			if _, ok := ps[1]; ok {
				t.Errorf("committed %s-1 for a standby task: %v", topic, c)
			}
		}
	}
	if n := len(r.out.byTopic(record.DefaultDeadLetterTopic)); n != 0 {
		t.Errorf("the standby wrote %d dead letters; only the active owner does", n)
	}
	if n := len(r.alertIDs(t)); n != 0 {
		t.Errorf("%d alerts written for a standby task", n)
	}

	// A warm-up: the same task, counted apart.
	r.w.Assigned(ctx, withStandby(assignment(2, []int{0}, []int{0}), []int{1}, []int{1}))
	r.w.mu.RLock()
	same := r.w.standbys[1] == sb
	r.w.mu.RUnlock()
	if !same || sb.roleName() != roleWarmup {
		t.Fatalf("standby → warm-up restarted the task (%v) or left its role %s", !same, sb.roleName())
	}
	if got := gaugeValue(t, r.w.metrics.Tasks.WithLabelValues(roleWarmup)); got != 1 {
		t.Errorf("joiner_tasks{role=warmup} = %v, want 1", got)
	}
	r.f.produce("market", 1, 1006, s1, tickJSON(s1, 6))
	waitFor(t, "the warm-up tailing", func() bool { return reasons()[ReasonWarmup] == 1 })

	// Standby → active: the same store, only the tail restored.
	r.f.produce("market", 1, 1007, s1, tickJSON(s1, 7))
	r.w.Assigned(ctx, assignment(3, []int{0, 1}, []int{0, 1}))
	st := r.w.stateTask(1)
	if st == nil || st.store != sb.store || !st.fromCopy {
		t.Fatalf("task 1 active: state %+v, want a task on the standby's store marked as a failover", st)
	}
	r.waitAlert(t, "n1")
	waitFor(t, "task 1 restored", st.isRestored)
	// The malformed tick the standby applied without routing (offset 4,
	// after the group's committed market offset: none) is dead-lettered
	// once the task is active here, once.
	waitFor(t, "the skipped malformed tick dead-lettered", func() bool {
		return len(r.out.byTopic(record.DefaultDeadLetterTopic)) == 1
	})
	got := reasons()
	if got[ReasonMove] != 0 || got[ReasonStandby]+got[ReasonWarmup]+got[ReasonFailover] != 8 || got[ReasonFailover] > 1 {
		t.Errorf("restored records by reason %v: want the 8 market records counted once, at most the last one as failover, none as move", got)
	}
	if s := r.w.Stats(); s.RestoredFailover != got[ReasonFailover] || s.RestoredStandby != got[ReasonStandby] || s.RestoredMove != 0 {
		t.Errorf("Stats %+v does not match the counters %v", s, got)
	}

	// Active → standby: the process task stops and is committed, the store
	// stays.
	waitFor(t, "n1 acknowledged", func() bool { _, p := r.tasks(); return p[1] != nil && p[1].acked.Load() == 1 })
	before := r.commitCount()
	pauses := histogramCount(t, r.w.metrics.RebalancePause)
	r.w.Assigned(ctx, withStandby(assignment(4, []int{0}, []int{0}), []int{1}, nil))
	committed := false
	for _, c := range r.commitsSince(before) {
		committed = committed || c["notifications"][1] == 1
	}
	if !committed {
		t.Errorf("active → standby did not commit notifications-1 at 1: %v", r.commitsSince(before))
	}
	r.w.mu.RLock()
	sb2 := r.w.standbys[1]
	r.w.mu.RUnlock()
	if sb2 == nil || sb2.store != st.store || r.w.stateTask(1) != nil {
		t.Fatalf("active → standby: standby %+v, want one on the active task's store", sb2)
	}
	if n := histogramCount(t, r.w.metrics.RebalancePause) - pauses; n != 1 {
		t.Errorf("active → standby paused %d tasks, want 1", n)
	}
	r.f.produce("market", 1, 1008, s1, tickJSON(s1, 8))
	waitFor(t, "the standby tailing again", func() bool { return sb2.appliedOffset() == 8 })

	// Dropped: the copy goes.
	r.w.Assigned(ctx, assignment(5, []int{0}, []int{0}))
	onDisk, err := r.w.cfg.Stores.Tasks()
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(onDisk, 1) {
		t.Errorf("stores on disk %v after the standby of task 1 was dropped", onDisk)
	}
	if got := gaugeValue(t, r.w.metrics.Tasks.WithLabelValues(roleStandby)); got != 0 {
		t.Errorf("joiner_tasks{role=standby} = %v after dropping it, want 0", got)
	}
}

// TestProcessorHeld: Held reports the active and standby stores with the
// next offset they lack, and a store left on disk; a store dropped with
// its task is not reported.
func TestProcessorHeld(t *testing.T) {
	r := newFakeRig(t)
	ctx := context.Background()
	s0, s1 := symbolOf(t, 0, 2), symbolOf(t, 1, 2)
	for i := range 3 {
		r.f.produce("market", 0, int64(1000+i), s0, tickJSON(s0, 1))
	}
	r.f.produce("market", 1, 1000, s1, tickJSON(s1, 2))
	left, err := r.w.cfg.Stores.OpenTask(5)
	if err != nil {
		t.Fatal(err)
	}
	if err := left.Apply(nil, 41); err != nil {
		t.Fatal(err)
	}
	if err := left.Close(); err != nil {
		t.Fatal(err)
	}
	r.w.Assigned(ctx, withStandby(assignment(1, []int{0}, []int{0}), []int{1}, nil))
	want := map[int]int64{0: 3, 1: 1, 5: 42}
	waitFor(t, "Held to report both copies", func() bool {
		h := r.w.Held()
		return len(h) == len(want) && h[0] == want[0] && h[1] == want[1] && h[5] == want[5]
	})
	if owned := r.w.Owned(); !slices.Equal(owned, []int{0, 5}) {
		t.Errorf("Owned = %v with task 1 a standby here, want [0 5]", owned)
	}
	r.w.Assigned(ctx, assignment(2, []int{0}, []int{0}))
	if h := r.w.Held(); len(h) != 2 || h[0] != 3 || h[5] != 42 {
		t.Errorf("Held after dropping the standby of task 1 = %v, want tasks 0 and 5 only", h)
	}
}
