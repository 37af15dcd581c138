// Package integration runs joiner workers as separate OS processes (the
// `joiner run` binary built by scripts/build) against a real Apache Kafka
// broker, drives them with the loadgen package and checks what they write
// to Kafka, what they report on /v1/assignment and what their Pebble
// stores hold after they stop.
//
// The suite runs only when JOINER_KAFKA_BROKERS is set:
//
//	scripts/kafka start && JOINER_KAFKA_BROKERS=127.0.0.1:9092 go test -race -count=1 ./integration/
//
// See docs/integration.md.
package integration

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/copartition"
	"github.com/joiner-dev/joiner/join"
	"github.com/joiner-dev/joiner/loadgen"
	"github.com/joiner-dev/joiner/record"
)

const partitions = 6

// TestIntegrationFourWorkers is the four-worker experiment (`joiner demo`'s
// defaults) on a real broker: 4 workers, 6 partitions, 10 symbols × 1 tick
// × 3 notifications give 30 alerts, all 30 joins local.
func TestIntegrationFourWorkers(t *testing.T) {
	c := newCluster(t, partitions)
	var ws []*worker
	for i := range 4 {
		ws = append(ws, c.start(fmt.Sprintf("w%d", i+1)))
	}
	st := c.waitStable(ws, 0, 60*time.Second)
	c.checkMoved("start 4 workers", stable{}, st)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sum := c.produce(ctx, loadgen.Config{Symbols: 10, TicksPerSymbol: 1, NotificationsPerSymbol: 3, RunID: "four-workers-"})
	if sum.Notifications != 30 || sum.Ticks != 10 {
		t.Fatalf("loadgen produced %d ticks and %d notifications, want 10 and 30", sum.Ticks, sum.Notifications)
	}
	dups := c.waitAlerts(sum.NotificationIDs, time.Minute)
	res := c.checkAlertResults()
	c.checkPrices(sum.NotificationIDs, sum.LastPrice)
	c.waitCaughtUp(30 * time.Second)

	var final stable
	c.poll("the members' join counts to reach 30", 15*time.Second, func() (bool, string) {
		final = c.waitStable(ws, 0, 15*time.Second)
		n := final.sum(func(v join.AssignmentView) int64 { return v.Local + v.Remote + v.Miss })
		return n >= 30, fmt.Sprintf("%d joins counted", n)
	})
	if final.gen != st.gen {
		t.Errorf("generation changed from %d to %d while the load ran", st.gen, final.gen)
	}
	local := final.sum(func(v join.AssignmentView) int64 { return v.Local })
	remote := final.sum(func(v join.AssignmentView) int64 { return v.Remote })
	miss := final.sum(func(v join.AssignmentView) int64 { return v.Miss })
	for _, id := range final.members() {
		v := final.views[id]
		t.Logf("  %s tasks %v: local %d remote %d miss %d", id, v.Tasks, v.Local, v.Remote, v.Miss)
	}
	t.Logf("four workers: 30 notifications, %d alerts (%d duplicates), joins local %d remote %d miss %d",
		c.alerts.records(), dups, local, remote, miss)
	if local != 30 || remote != 0 || miss != 0 {
		t.Errorf("joins: local %d, remote %d, miss %d; want 30, 0, 0", local, remote, miss)
	}
	if res[record.ResultLocal] != 30+dups {
		t.Errorf("%d local alerts on the topic, want %d", res[record.ResultLocal], 30+dups)
	}

	c.stopAll(ws)
	c.checkFinalState(final.owners(partitions), sum.LastPrice)
}

// TestIntegrationScaleOutAndIn grows the group 1→2→3→4 and shrinks it back
// to 1 while a producer runs, checking each step's moves against the
// planner, then that no notification was lost and the stores hold the last
// prices.
func TestIntegrationScaleOutAndIn(t *testing.T) {
	t.Setenv("JOINER_LEAVE_ON_SHUTDOWN", "true") // scale-in leaves at once
	c := newCluster(t, partitions)
	running := []*worker{c.start("w1")}
	st := c.waitStable(running, 0, 60*time.Second)
	c.checkMoved("start w1", stable{}, st)

	l := c.startLoad("scale", 20, 3, 1, 300)
	c.waitRuns(l, 2, 30*time.Second)
	steps := 0
	next := func(step string) {
		t.Helper()
		began := time.Now()
		cur := c.waitStable(running, st.gen, 90*time.Second)
		t.Logf("%s: stable at generation %d after %s", step, cur.gen, time.Since(began).Round(time.Millisecond))
		c.checkMoved(step, st, cur)
		c.checkJoinCounts(step, cur)
		st = cur
		steps++
		// Let the load flow through every configuration.
		c.waitRuns(l, l.completed()+2, 30*time.Second)
	}
	for i := 2; i <= 4; i++ {
		running = append(running, c.start(fmt.Sprintf("w%d", i)))
		next(fmt.Sprintf("scale out to %d", i))
	}
	for len(running) > 1 {
		last := running[len(running)-1]
		c.stop(last)
		running = running[:len(running)-1]
		next(fmt.Sprintf("scale in to %d", len(running)))
	}

	t.Logf("scale 1→4→1: %d steps", steps)
	c.drain("scale 1→4→1", l, running, st.gen)
}

// TestIntegrationKill9Takeover kills one of 3 workers with SIGKILL under
// load: the survivors take its tasks over once the session timeout
// expires, and every notification still gets an alert.
func TestIntegrationKill9Takeover(t *testing.T) {
	c := newCluster(t, partitions)
	ws := []*worker{c.start("w1"), c.start("w2"), c.start("w3")}
	st := c.waitStable(ws, 0, 60*time.Second)
	c.checkMoved("start 3 workers", stable{}, st)

	l := c.startLoad("kill", 20, 3, 1, 300)
	c.waitRuns(l, 3, 30*time.Second)
	victim := ws[1]
	survivors := []*worker{ws[0], ws[2]}
	lost := st.views[victim.id].Tasks
	killedAt := time.Now()
	c.kill9(victim)
	t.Logf("kill -9 %s (tasks %v) at generation %d", victim.id, lost, st.gen)

	cur := c.waitStable(survivors, st.gen, 40*time.Second)
	takeover := cur.at.Sub(killedAt)
	t.Logf("takeover: survivors %v stable at generation %d, %s after the kill (session timeout 6s)",
		ids(survivors), cur.gen, takeover.Round(time.Millisecond))
	if takeover > 30*time.Second {
		t.Errorf("takeover took %s, want at most 30s", takeover)
	}
	moved := c.checkMoved("kill -9 "+victim.id, st, cur)
	if moved != len(lost) {
		t.Errorf("the planner moved %d tasks, the victim held %d", moved, len(lost))
	}
	c.checkJoinCounts("after the kill", cur)
	c.waitRuns(l, l.completed()+3, 30*time.Second)

	c.drain("kill -9", l, survivors, cur.gen)
}

// TestIntegrationRestartSameInstance stops the only worker with SIGTERM
// and --leave-on-shutdown (so its restart goes through a rebalance),
// produces K ticks, restarts it with the same instance id and state dir,
// and checks that it restores exactly those K records and keeps its tasks.
func TestIntegrationRestartSameInstance(t *testing.T) {
	t.Setenv("JOINER_LEAVE_ON_SHUTDOWN", "true") // a restart through a rebalance
	c := newCluster(t, partitions)
	w := c.start("w1")
	st := c.waitStable([]*worker{w}, 0, 60*time.Second)
	c.checkMoved("start w1", stable{}, st)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := c.produce(ctx, loadgen.Config{Symbols: 20, TicksPerSymbol: 10, NotificationsPerSymbol: 1, Seed: 1, RunID: "a-"})
	c.waitAlerts(a.NotificationIDs, time.Minute)
	c.checkPrices(a.NotificationIDs, a.LastPrice)
	c.waitCaughtUp(30 * time.Second)
	before := c.waitStable([]*worker{w}, 0, 10*time.Second)
	c.stop(w)

	b := c.produce(ctx, loadgen.Config{Symbols: 20, TicksPerSymbol: 7, Seed: 2, RunID: "b-"})
	k := int64(b.Ticks)

	w = c.start("w1")
	cur := c.waitStable([]*worker{w}, before.gen, 60*time.Second)
	v := cur.views[w.id]
	plan, err := copartition.Assign(partitions, []string{w.id}, before.tasks())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("restart: generation %d→%d, tasks %v, moved %d (planner %d), restores %d, restored_records %d (K=%d)",
		before.gen, cur.gen, v.Tasks, v.Moved, plan.Moved, v.Restores, v.RestoredRecords, k)
	if v.RestoredRecords != k {
		t.Errorf("restored_records = %d after the restart, want exactly the K = %d ticks produced while it was down", v.RestoredRecords, k)
	}
	if v.Moved != plan.Moved || plan.Moved != 0 {
		t.Errorf("restart moved %d tasks, the planner says %d (want 0: it reports its stores as owned)", v.Moved, plan.Moved)
	}
	if !slices.Equal(v.Tasks, plan.Assignment[w.id]) {
		t.Errorf("tasks after the restart %v, want %v", v.Tasks, plan.Assignment[w.id])
	}
	if v.Restores != int64(len(v.Tasks)) {
		t.Errorf("%d restores started for %d tasks reopened from disk", v.Restores, len(v.Tasks))
	}

	// Notifications after the restart join the prices restored from Kafka.
	cNotes := c.produce(ctx, loadgen.Config{Symbols: 20, NotificationsPerSymbol: 2, RunID: "c-"})
	noteIDs, last := merge(a, b, cNotes)
	dups := c.waitAlerts(noteIDs, time.Minute)
	c.checkPrices(cNotes.NotificationIDs, last)
	c.checkAlertResults()
	c.waitCaughtUp(30 * time.Second)
	final := c.waitStable([]*worker{w}, 0, 10*time.Second)
	c.checkJoinCounts("end", final)
	if n := final.views[w.id].Local; n != int64(len(cNotes.NotificationIDs)) {
		t.Errorf("the restarted worker counted %d local joins, want %d", n, len(cNotes.NotificationIDs))
	}
	t.Logf("restart: %d notifications, %d alerts, %d duplicates", len(noteIDs), c.alerts.records(), dups)
	c.stop(w)
	c.checkFinalState(final.owners(partitions), last)
}

// TestIntegrationKill9FastRestart is the usual pod crash: a worker is
// killed with SIGKILL and comes back with the same instance id and state
// dir before its session times out. Kafka's static membership lets it
// take its place without a rebalance, so it must get the same tasks back,
// resume from its stores and lose nothing.
func TestIntegrationKill9FastRestart(t *testing.T) {
	c := newCluster(t, partitions)
	ws := []*worker{c.start("w1"), c.start("w2")}
	st := c.waitStable(ws, 0, 60*time.Second)
	c.checkMoved("start 2 workers", stable{}, st)

	l := c.startLoad("crash", 20, 3, 1, 300)
	c.waitRuns(l, 3, 30*time.Second)
	c.kill9(ws[1])
	killedAt := time.Now()
	ws[1] = c.start("w2")
	cur := c.waitStable(ws, st.gen-1, 40*time.Second)
	t.Logf("fast restart: stable at generation %d (was %d) %s after the kill, w2 tasks %v (were %v), w2 restored %d records",
		cur.gen, st.gen, cur.at.Sub(killedAt).Round(time.Millisecond), cur.views["w2"].Tasks, st.views["w2"].Tasks, cur.views["w2"].RestoredRecords)
	if cur.gen == st.gen {
		// No rebalance: the same plan.
		if got := cur.tasks(); !maps.EqualFunc(got, st.tasks(), slices.Equal) {
			t.Errorf("assignment changed without a new generation: %v, was %v", got, st.tasks())
		}
	} else {
		c.checkMoved("fast restart of w2", st, cur)
	}
	c.waitRuns(l, l.completed()+3, 30*time.Second)
	c.drain("fast restart", l, ws, cur.gen)
}
