package join

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/group"
	"github.com/joiner-dev/joiner/record"
)

// TestMisroutedNotificationsDoNotDeadlock: each of two merged tasks holds a
// notification of the other's symbol (a producer that did not partition by
// murmur2). Each lookup waits for the other task's market to be read past
// the notification's time, and each market was advancing only in its own
// merge loop, behind that very notification: the two waited on each other
// for ever. Both must be joined, exactly (the as-of price, not the newer
// tick), and counted as misrouted.
func TestMisroutedNotificationsDoNotDeadlock(t *testing.T) {
	r := newFakeRig(t)
	s0, s1 := symbolOf(t, 0, 2), symbolOf(t, 1, 2)
	r.f.produce("market", 0, 1000, s0, tickJSON(s0, 1))
	r.f.produce("market", 1, 1000, s1, tickJSON(s1, 10))
	r.w.Assigned(context.Background(), assignment(1, []int{0, 1}, []int{0, 1}))
	waitFor(t, "both tasks restored", func() bool {
		s, _ := r.tasks()
		return s[0] != nil && s[1] != nil && s[0].isRestored() && s[1].isRestored()
	})
	// The market is unreadable while the notifications are taken, so that
	// each merge holds its notifications when the newer ticks come.
	r.f.setDown("market", true)
	r.f.produce("market", 0, 3000, s0, tickJSON(s0, 3))
	r.f.produce("market", 1, 3000, s1, tickJSON(s1, 30))
	// a is in notifications-0 but its symbol is task 1's, b the reverse;
	// own ones follow them.
	r.f.produce("notifications", 0, 2000, s1, noteJSON("a", s1))
	r.f.produce("notifications", 0, 2500, s0, noteJSON("own0", s0))
	r.f.produce("notifications", 1, 2000, s0, noteJSON("b", s0))
	r.f.produce("notifications", 1, 2500, s1, noteJSON("own1", s1))
	time.Sleep(100 * time.Millisecond)
	r.f.setDown("market", false)

	waitFor(t, "4 alerts", func() bool { return len(r.out.byTopic("alerts")) == 4 })
	want := map[string]float64{"a": 10, "b": 1, "own0": 1, "own1": 10}
	for _, m := range r.out.byTopic("alerts") {
		var a record.Alert
		if err := json.Unmarshal(m.Value, &a); err != nil {
			t.Fatal(err)
		}
		if a.Result != record.ResultLocal || a.Price == nil || *a.Price != want[a.ID] || a.PriceTsMs != 1000 {
			t.Errorf("alert %s: want local price %v from 1000", m.Value, want[a.ID])
		}
	}
	if n := float64(counterValue(r.w.metrics.Misrouted)); n != 2 {
		t.Errorf("joiner_notifications_misrouted_total = %v, want 2", n)
	}
}

// TestStalledTaskFailsReadiness: a task whose market cannot be read keeps
// its notifications (it must not join them before the market is read),
// and says so: joiner_task_lag_records is the real lag although nothing is
// taken, joiner_task_stalled is 1 and /readyz fails after StallTimeout;
// all clear once the market is back and the task moves.
func TestStalledTaskFailsReadiness(t *testing.T) {
	r := newFakeRig(t, func(c *Config) { c.StallTimeout = 200 * time.Millisecond })
	s := symbolOf(t, 0, 1)
	r.f.produce("market", 0, 1000, s, tickJSON(s, 1))
	r.w.Assigned(context.Background(), group1(0))
	waitFor(t, "task 0 restored", func() bool { st := r.w.stateTask(0); return st != nil && st.isRestored() })
	if ok, why := r.w.Ready(); !ok {
		t.Fatalf("not ready before the stall: %s", why)
	}
	r.f.setDown("market", true)
	for i := range 5 {
		r.f.produce("notifications", 0, int64(2000+i), s, noteJSON("n"+string(rune('a'+i)), s))
	}
	lag := r.w.metrics.TaskLag.WithLabelValues("0")
	stalled := r.w.metrics.TaskStalled.WithLabelValues("0")
	defer func() {
		_, procs := r.tasks()
		t.Logf("lag %v stalled %v acked %d start %d alerts %d", gaugeValue(t, lag), gaugeValue(t, stalled), procs[0].acked.Load(), procs[0].prog.start.Load(), len(r.out.byTopic("alerts")))
	}()
	waitFor(t, "the task stalled", func() bool { return gaugeValue(t, stalled) == 1 })
	if got := gaugeValue(t, lag); got != 5 {
		t.Errorf("joiner_task_lag_records = %v while stalled, want 5", got)
	}
	ok, why := r.w.Ready()
	if ok || !strings.Contains(why, "no progress") {
		t.Errorf("Ready() = %v, %q while stalled", ok, why)
	}
	if n := len(r.out.byTopic("alerts")); n != 0 {
		t.Fatalf("%d alerts joined while the market could not be read", n)
	}
	r.f.setDown("market", false)
	waitFor(t, "5 alerts", func() bool { return len(r.out.byTopic("alerts")) == 5 })
	waitFor(t, "the stall cleared", func() bool {
		ok, _ := r.w.Ready()
		return ok && gaugeValue(t, stalled) == 0 && gaugeValue(t, lag) == 0
	})
}

// group1 is a generation-1 assignment of task p of a single partition,
// merged.
func group1(p int) group.Assignment {
	a := assignment(1, []int{p}, []int{p})
	a.Partitions = 1
	return a
}
