package join

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/group"
)

func taskStatus(t *testing.T, w *Processor, p int) TaskStatus {
	t.Helper()
	for _, ts := range w.TaskStatuses() {
		if ts.Task == p {
			return ts
		}
	}
	t.Fatalf("task %d is not in TaskStatuses: %+v", p, w.TaskStatuses())
	return TaskStatus{}
}

// TestTaskStatusesOnFakes: a merged task reports its joins by result,
// dead letters of both topics and lags; a standby copy its role and tail;
// a task whose gate is shut (a handover) is paused.
func TestTaskStatusesOnFakes(t *testing.T) {
	r := newFakeRig(t)
	s0, s1 := symbolOf(t, 0, 2), symbolOf(t, 1, 2)
	r.f.produce("market", 0, 1000, s0, tickJSON(s0, 1))
	r.f.produce("market", 0, 1001, s0, `{"bad tick"`)
	r.f.produce("market", 1, 1000, s1, tickJSON(s1, 7))
	r.f.produce("notifications", 0, 500, s0, noteJSON("early", s0))
	r.f.produce("notifications", 0, 1500, s0, noteJSON("a", s0))
	r.f.produce("notifications", 0, 1600, s0, noteJSON("b", s0))
	r.f.produce("notifications", 0, 1700, s0, `{"id":"bad"}`)
	r.w.Assigned(context.Background(), withStandby(assignment(1, []int{0}, []int{0}), []int{1}, nil))
	waitFor(t, "3 alerts", func() bool { return len(r.out.byTopic("alerts")) == 3 })
	// The lags are those of the last fetches: 0 once they read nothing.
	waitFor(t, "the counts of task 0, its lags at 0", func() bool {
		ts := taskStatus(t, r.w, 0)
		return ts.Joins.Total() == 3 && ts.DeadLetters == 2 && ts.NotificationLag == 0 && ts.MarketLag == 0
	})
	ts := taskStatus(t, r.w, 0)
	if ts.Role != RoleActive || ts.State != StateRunning || !ts.Merged || !ts.Processes {
		t.Errorf("task 0: %+v, want active, running, merged", ts)
	}
	if ts.Joins != (JoinCounts{Local: 2, Miss: 1}) {
		t.Errorf("task 0 joins %+v, want 2 local and 1 miss", ts.Joins)
	}
	if ts.NotificationLag != 0 || ts.MarketLag != 0 {
		t.Errorf("task 0 lags: notifications %d market %d, want 0 and 0", ts.NotificationLag, ts.MarketLag)
	}
	if !strings.Contains(ts.Reason, "merged with market-0") {
		t.Errorf("task 0 reason %q", ts.Reason)
	}
	waitFor(t, "the standby caught up", func() bool { return taskStatus(t, r.w, 1).State == StateRunning })
	sb := taskStatus(t, r.w, 1)
	if sb.Role != RoleStandby || sb.Processes || sb.MarketLag != 0 || sb.Reason != "tailing market-1 into its standby copy" {
		t.Errorf("task 1: %+v, want a standby tailing market-1, lag 0", sb)
	}

	_, procs := r.tasks()
	procs[0].gate.shut()
	if ts := taskStatus(t, r.w, 0); ts.State != StatePaused || !strings.Contains(ts.Reason, "handover") {
		t.Errorf("task 0 with its gate shut: %s (%s), want paused at a handover", ts.State, ts.Reason)
	}
	procs[0].gate.reopen()
}

// TestRestoreProgress: a restore in flight reports records done of total,
// the rate since it began and the time left at that rate.
func TestRestoreProgress(t *testing.T) {
	s := &stateTask{p: 3, restored: make(chan struct{})}
	s.rc.init()
	var ts TaskStatus
	s.describe(&ts, time.Now(), "market")
	if ts.State != StateStarting || ts.Restore != nil {
		t.Errorf("before its bounds are read: %+v, want starting", ts)
	}
	now := time.Now()
	s.rc.from.Store(100)
	s.rc.end.Store(1100)
	s.rc.done.Store(250)
	s.rc.began.Store(now.Add(-5 * time.Second).UnixNano())
	ts = TaskStatus{}
	s.describe(&ts, now, "market")
	r := ts.Restore
	if ts.State != StateRestoring || r == nil {
		t.Fatalf("restoring: %+v", ts)
	}
	if r.Done != 250 || r.Total != 1000 || r.RatePerSecond != 50 || r.ETASeconds != 15 {
		t.Errorf("progress %+v, want 250 of 1000 at 50/s, 15 s left", *r)
	}
	if ts.Reason != "restoring market-3: 250 of 1000 records" {
		t.Errorf("reason %q", ts.Reason)
	}
	close(s.restored)
}

func owners(ids ...string) []group.Owner {
	out := make([]group.Owner, len(ids))
	for i, id := range ids {
		out[i] = group.Owner{InstanceID: id}
	}
	return out
}

// TestRebalanceHistory: each assignment records which tasks moved from
// whom to whom and why; Status lists the last ones, newest first.
func TestRebalanceHistory(t *testing.T) {
	w := &Processor{}
	g1 := group.Assignment{Generation: 1, Owners: owners("w1", "w1", "w1")}
	w.recordRebalance(group.Assignment{}, g1, []int{2, 0, 1}, nil)
	g2 := group.Assignment{Generation: 2, Owners: owners("w1", "", "w1")} // task 1 withheld for w2
	w.recordRebalance(g1, g2, nil, []int{1})
	g3 := group.Assignment{Generation: 3, Owners: owners("w1", "w2", "w1")}
	w.recordRebalance(g2, g3, nil, nil)
	w.recordRebalance(g3, group.Assignment{Generation: 4, Error: "topic market is missing"}, nil, []int{0, 2})

	w.histMu.Lock()
	h := slices.Clone(w.history)
	w.histMu.Unlock()
	if len(h) != 4 {
		t.Fatalf("%d events, want 4", len(h))
	}
	want := []struct {
		moved    []TaskMove
		reason   string
		assigned []int
	}{
		{[]TaskMove{{0, "", "w1"}, {1, "", "w1"}, {2, "", "w1"}}, "this member joined the group", []int{0, 1, 2}},
		{[]TaskMove{{1, "w1", ""}}, "tasks [1] withheld until their owners give them up (cooperative handover)", nil},
		{[]TaskMove{{1, "", "w2"}}, "members now owning tasks: w2; handover completed: tasks [1] have their new owners", nil},
		{[]TaskMove{{0, "w1", ""}, {1, "w2", ""}, {2, "w1", ""}}, "the leader could not plan: topic market is missing", nil},
	}
	for i, ev := range h {
		if !slices.Equal(ev.Moved, want[i].moved) || ev.Reason != want[i].reason || !slices.Equal(ev.Assigned, want[i].assigned) {
			t.Errorf("event %d: moved %v reason %q assigned %v, want %v %q %v", i, ev.Moved, ev.Reason, ev.Assigned, want[i].moved, want[i].reason, want[i].assigned)
		}
	}
	for range 30 {
		w.recordRebalance(g3, g3, nil, nil)
	}
	w.histMu.Lock()
	n, last := len(w.history), w.history[len(w.history)-1]
	w.histMu.Unlock()
	if n != rebalanceHistory || last.Reason != "no owner changed (a member rejoined, or a probing rebalance)" || len(last.Moved) != 0 {
		t.Errorf("after 34 events: %d kept, last %+v", n, last)
	}
}
