package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/statestore"
)

// TestIntegrationStaticRestart is a rolling-restart step: one of 3 workers
// under load gets SIGTERM (it does not leave the group: it is a static
// member and --leave-on-shutdown is off) and is started again, with the
// same instance id and state dir, within the session timeout. The other
// members stay in the same generation, no task moves, the restarted worker
// restores each task from where its store stopped, and every notification
// gets an alert. The worker is down for about 2 s (a pod being
// rescheduled); the suite's session timeout is 6 s.
func TestIntegrationStaticRestart(t *testing.T) { staticRestart(t, false) }

// TestIntegrationStaticRestartLeader restarts the group leader the same
// way. kafka-go speaks JoinGroup v7, without KIP-814's SkipAssignment;
// Kafka 4.1 still keeps the generation (kfake does not: it rebalances when
// the leader returns, see group/static_test.go).
func TestIntegrationStaticRestartLeader(t *testing.T) { staticRestart(t, true) }

func staticRestart(t *testing.T, leader bool) {
	c := newCluster(t, partitions)
	ws := []*worker{c.start("w1"), c.start("w2"), c.start("w3")}
	st := c.waitStable(ws, 0, 60*time.Second)
	c.checkMoved("start 3 workers", stable{}, st)

	l := c.startLoad("static", 20, 3, 1, 300)
	c.waitRuns(l, 3, 30*time.Second)
	st = c.waitStable(ws, 0, 10*time.Second)
	vi := slices.IndexFunc(ws, func(w *worker) bool { return st.views[w.id].Leader == leader })
	if vi < 0 {
		t.Fatalf("no worker with leader=%v in generation %d", leader, st.gen)
	}
	victim := ws[vi]
	tasks := st.views[victim.id].Tasks

	// The market's end offsets a second before the SIGTERM and at it: the
	// worker must have applied the first (it tails the market with less
	// than --max-task-idle of delay); the records after the second were
	// produced while it was down.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	endSecondBefore, err := c.endOffsets(ctx, c.market)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	endAtStop, err := c.endOffsets(ctx, c.market)
	if err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	c.stop(victim) // SIGTERM, exit 0
	stopTook := time.Since(stopped)
	applied := c.appliedOffsets(victim.id, tasks)
	time.Sleep(2 * time.Second) // a pod being rescheduled
	if now, _ := ws[(vi+1)%3].view(); now.Generation != st.gen {
		t.Errorf("generation %d -> %d while %s was down (session timeout 6s)", st.gen, now.Generation, victim.id)
	}
	ws[vi] = c.start(victim.id)
	cur := c.waitStable(ws, st.gen-1, 40*time.Second)
	back := cur.at.Sub(stopped)
	t.Logf("%s (tasks %v) stopped with SIGTERM in %s; all 3 stable again %s after the SIGTERM (session timeout 6s)",
		victim.id, tasks, stopTook.Round(time.Millisecond), back.Round(time.Millisecond))

	// The group did not rebalance: the same generation, the same tasks,
	// no restore on the other members.
	if cur.gen != st.gen {
		t.Errorf("generation %d -> %d: the static restart caused a rebalance", st.gen, cur.gen)
	}
	if got := cur.tasks(); !mapsEqual(got, st.tasks()) {
		t.Errorf("tasks %v -> %v", st.tasks(), got)
	}
	for _, w := range ws {
		if w.id != victim.id && cur.views[w.id].Restores != st.views[w.id].Restores {
			t.Errorf("%s started %d restores during the restart of %s", w.id, cur.views[w.id].Restores-st.views[w.id].Restores, victim.id)
		}
	}

	// The restarted worker restored each task from its store's applied
	// offset: the records produced while it was down, and those of the
	// last second before the SIGTERM it had not applied yet.
	restores := restoresIn(t, ws[vi].logPath)
	var restored, whileDown, beyond int64
	for _, p := range tasks {
		r, ok := restores[p]
		if !ok {
			t.Errorf("task %d: no restore logged by the restarted %s", p, victim.id)
			continue
		}
		if r.From != applied[p]+1 {
			t.Errorf("task %d: restore started at offset %d, its store had applied %d", p, r.From, applied[p])
		}
		if r.From < endSecondBefore[p] {
			t.Errorf("task %d: the store had applied up to offset %d, but offsets up to %d were produced more than a second before the SIGTERM", p, r.From-1, endSecondBefore[p]-1)
		}
		restored += r.End - r.From
		whileDown += r.End - max(r.From, endAtStop[p])
		beyond += max(0, min(endAtStop[p], r.End)-r.From)
	}
	v := cur.views[victim.id]
	t.Logf("restart of %s: restores from the stores' offsets to the end offsets cover %d records (restored_records %d, the last fetch may read past the end): "+
		"%d produced after the SIGTERM, %d in the second before it and not yet applied; the partitions hold %d",
		victim.id, restored, v.RestoredRecords, whileDown, beyond, sum(endAtStop, tasks))
	if v.RestoredRecords < restored {
		t.Errorf("restored_records = %d, less than the %d records between the stores' offsets and the end offsets", v.RestoredRecords, restored)
	}
	c.waitRuns(l, l.completed()+3, 30*time.Second)
	c.drain("static restart", l, ws, cur.gen)
}

func sum(ends []int64, tasks []int) int64 {
	var n int64
	for _, p := range tasks {
		n += ends[p]
	}
	return n
}

func mapsEqual(a, b map[string][]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !slices.Equal(v, w) {
			return false
		}
	}
	return true
}

// appliedOffsets opens the stores of a stopped worker and returns the
// applied market offset of each task (-1 for none).
func (c *cluster) appliedOffsets(id string, tasks []int) map[int]int64 {
	c.t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	mgr, err := statestore.Open(statestore.Options{Dirs: []string{c.stateDir(id)}, Group: c.group, CacheBytes: 1 << 20, Logger: quiet})
	if err != nil {
		c.t.Fatalf("opening the state of %s: %v", id, err)
	}
	defer mgr.Close()
	out := map[int]int64{}
	for _, p := range tasks {
		s, err := mgr.OpenTask(p)
		if err != nil {
			c.t.Fatalf("opening task %d of %s: %v", p, id, err)
		}
		out[p] = s.AppliedOffset()
		_ = s.Close()
	}
	return out
}

// restore is one "restore started" log line: the offsets it read from and
// up to.
type restore struct{ From, End int64 }

// restoresIn returns the restores a worker's JSON log reports, by task.
func restoresIn(t *testing.T, path string) map[int]restore {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[int]restore{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var line struct {
			Msg  string `json:"msg"`
			Task *int   `json:"task"`
			From int64  `json:"from_offset"`
			End  int64  `json:"end_offset"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "restore started" && line.Task != nil {
			out[*line.Task] = restore{line.From, line.End}
		}
	}
	return out
}

// TestIntegrationLeaveRemovesStoppedWorker is a scale-down without
// --leave-on-shutdown: a worker stopped with SIGTERM stays a member, and
// `joiner leave` removes it at once (KIP-345's admin removal on Kafka
// 4.1): the survivors take its tasks in a new generation well before the
// session timeout, as the planner says. Removing it again fails (exit 1).
func TestIntegrationLeaveRemovesStoppedWorker(t *testing.T) {
	c := newCluster(t, partitions)
	ws := []*worker{c.start("w1"), c.start("w2"), c.start("w3")}
	st := c.waitStable(ws, 0, 60*time.Second)
	victim, survivors := ws[2], ws[:2]
	c.stop(victim)
	stopped := time.Now()

	leave := func() (int, string) {
		cmd := exec.Command(joinerBin, "leave", "--brokers", strings.Join(brokers, ","), "--group", c.group, "--instance-id", victim.id)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("joiner leave: %v", err)
		}
		return code, strings.TrimSpace(string(out))
	}
	code, out := leave()
	if code != 0 {
		t.Fatalf("joiner leave: exit %d: %s", code, out)
	}
	cur := c.waitStable(survivors, st.gen, 20*time.Second)
	took := cur.at.Sub(stopped)
	t.Logf("joiner leave: %q; survivors stable at generation %d, %s after the SIGTERM (session timeout 6s)", out, cur.gen, took.Round(time.Millisecond))
	if took >= 6*time.Second {
		t.Errorf("the survivors took over %s after the SIGTERM, not before the session timeout", took)
	}
	if moved := c.checkMoved("joiner leave "+victim.id, st, cur); moved != len(st.views[victim.id].Tasks) {
		t.Errorf("moved %d tasks, %s held %d", moved, victim.id, len(st.views[victim.id].Tasks))
	}
	if code, out := leave(); code != 1 || !strings.Contains(out, "no member with this instance id") {
		t.Errorf("second joiner leave: exit %d: %s; want 1 and no such instance", code, out)
	}
}
