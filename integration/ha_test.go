package integration

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/loadgen"
	"github.com/joiner-dev/joiner/testsupport/testkit"
)

// The high-availability tests of issue 9 on the real broker, with `joiner
// run` processes: standby failover after kill -9, and the cooperative
// handover of a scale-out. The figures are printed with t.Logf (go test -v).

// metricsOf scrapes a worker's /metrics.
func (w *worker) metricsOf(t *testing.T) testkit.Metrics {
	t.Helper()
	m, err := testkit.Scrape(w.net.http, w.net.scheme+"://"+w.addr+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// activeRestored is what a worker restored into tasks it runs as active:
// joiner_restore_records_total of reasons move and failover.
func activeRestored(m testkit.Metrics) float64 {
	return m.Sum("joiner_restore_records_total", `reason="move"`) +
		m.Sum("joiner_restore_records_total", `reason="failover"`)
}

// TestIntegrationStandbyFailover kills (-9) one of 4 workers under load,
// over a market with a history of 60,000 ticks. With --standby-replicas 1
// the tasks' new owners restore at most the ticks produced between the
// kill and the takeover, plus one fetch's worth; with 0 they restore whole
// partitions. Every alert is checked afterwards.
func TestIntegrationStandbyFailover(t *testing.T) {
	for _, k := range []int{1, 0} {
		t.Run(fmt.Sprintf("standbys=%d", k), func(t *testing.T) { standbyFailover(t, k) })
	}
}

func standbyFailover(t *testing.T, k int) {
	c := newCluster(t, partitions)
	// A recovery lag well below a partition's history (10,000 ticks), as
	// with real market history, and quick probing rebalances, so the
	// workers that join after the first one get their tasks once their
	// warm-up copies caught up.
	c.flags = []string{"--standby-replicas", strconv.Itoa(k), "--acceptable-recovery-lag", "1000", "--probing-rebalance-interval", "2s"}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	hist := c.produce(ctx, loadgen.Config{Symbols: 600, TicksPerSymbol: 100, Seed: 7, RunID: "hist-", DropIDs: true})
	ws := []*worker{c.start("w1"), c.start("w2"), c.start("w3"), c.start("w4")}
	st := c.waitBalanced(ws, 90*time.Second)
	if k > 0 {
		c.poll("standbys caught up", 60*time.Second, func() (bool, string) {
			for _, w := range ws {
				m := w.metricsOf(t)
				if m.Sum("joiner_tasks", `role="standby"`) == 0 || m.Sum("joiner_standby_lag_records") > 100 {
					return false, w.id + " has no standby yet, or one lags"
				}
			}
			return true, ""
		})
	}
	l := c.startLoad("failover", 20, 3, 1, 300)
	c.waitRuns(l, 2, 30*time.Second)
	st = c.waitStable(ws, 0, 10*time.Second)

	victim := ws[1]
	lost := st.views[victim.id].Tasks
	survivors := slices.Delete(slices.Clone(ws), 1, 2)
	before := map[string]float64{}
	for _, w := range survivors {
		before[w.id] = activeRestored(w.metricsOf(t))
	}
	endAtKill, err := c.endOffsets(ctx, c.market)
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	c.kill9(victim)
	cur := c.waitStable(survivors, st.gen, 60*time.Second)
	takeover := time.Since(killed)
	endAtTakeover, err := c.endOffsets(ctx, c.market)
	if err != nil {
		t.Fatal(err)
	}
	var restored float64
	for _, w := range survivors {
		restored += activeRestored(w.metricsOf(t)) - before[w.id]
	}
	var produced, size int64
	for _, p := range lost {
		produced += endAtTakeover[p] - endAtKill[p]
		size += endAtTakeover[p]
	}
	t.Logf("standbys=%d: kill -9 of %s (tasks %v, %d market records, %d of them history); takeover after %s; new owners restored %.0f records; %d ticks produced between the kill and the takeover",
		k, victim.id, lost, size, hist.Records(), takeover.Round(time.Millisecond), restored, produced)
	if k > 0 && restored > float64(produced+failoverSlack) {
		t.Errorf("with a standby, the new owners restored %.0f records; want at most the %d produced between the kill and the takeover + %d", restored, produced, failoverSlack)
	}
	if k == 0 && restored < float64(size-produced) {
		t.Errorf("without standbys the new owners restored %.0f records; want the whole partitions (%d)", restored, size)
	}
	c.waitRuns(l, l.completed()+2, 30*time.Second)
	// The history counts for the final state of the stores: the runs are
	// merged in order, so a symbol of both takes the load's last price.
	l.mu.Lock()
	l.runs = append([]loadgen.Summary{hist}, l.runs...)
	l.mu.Unlock()
	c.drain(fmt.Sprintf("standby failover (K=%d)", k), l, survivors, cur.gen)
}

// waitBalanced waits until ws are stable and their active task counts
// differ by at most one.
func (c *cluster) waitBalanced(ws []*worker, timeout time.Duration) stable {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st := c.waitStable(ws, 0, time.Until(deadline))
		lo, hi := c.partitions, 0
		for _, v := range st.views {
			lo, hi = min(lo, len(v.Tasks)), max(hi, len(v.Tasks))
		}
		if hi-lo <= 1 {
			return st
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("tasks %v still unbalanced after %s", st.tasks(), timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// failoverSlack is "one fetch batch" of the failover bound: what a standby
// may not have applied yet when its task is promoted.
const failoverSlack = 1000

// TestIntegrationCooperativeScaleOut scales 3 workers out to 4 under
// steady load. On the old workers, joiner_rebalance_pause_seconds counts
// only the tasks that moved; the longest gap between alerts of the tasks
// that stayed is printed (the embedded broker's test bounds it).
func TestIntegrationCooperativeScaleOut(t *testing.T) {
	c := newCluster(t, partitions)
	ws := []*worker{c.start("w1"), c.start("w2"), c.start("w3")}
	st := c.waitStable(ws, 0, 60*time.Second)
	l := c.startLoad("coop", 30, 3, 2, 600)
	c.waitRuns(l, 2, 30*time.Second)
	st = c.waitStable(ws, 0, 10*time.Second)
	paused := map[string]float64{}
	for _, w := range ws {
		paused[w.id] = w.metricsOf(t).Sum("joiner_rebalance_pause_seconds_count")
	}
	from := time.Now()
	ws = append(ws, c.start("w4"))
	cur := c.waitStable(ws, st.gen, 60*time.Second)
	to := time.Now()

	var kept []int
	was, now := st.owners(c.partitions), cur.owners(c.partitions)
	for p := range c.partitions {
		if was[p] == now[p] {
			kept = append(kept, p)
		}
	}
	for _, w := range ws[:3] {
		gave := 0
		for _, p := range st.views[w.id].Tasks {
			if !slices.Contains(cur.views[w.id].Tasks, p) {
				gave++
			}
		}
		got := w.metricsOf(t).Sum("joiner_rebalance_pause_seconds_count") - paused[w.id]
		t.Logf("%s gave up %d tasks, paused %.0f", w.id, gave, got)
		if got != float64(gave) {
			t.Errorf("%s: %.0f tasks paused in the scale-out, want %d (the tasks that moved)", w.id, got, gave)
		}
	}
	c.waitRuns(l, l.completed()+2, 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := c.endOffsets(ctx, c.alertsT)
	if err != nil {
		t.Fatal(err)
	}
	var want int64
	for _, e := range ends {
		want += e
	}
	gap, err := testkit.LongestAlertGap(ctx, c.client, c.alertsT, c.partitions, int(want),
		kept, from.Add(-time.Second), to.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("scale-out 3->4 on Kafka: longest gap between alerts of the %d tasks that stayed: %s (the rebalance took %s)",
		len(kept), gap.Round(time.Millisecond), to.Sub(from).Round(time.Millisecond))
	c.drain("cooperative scale-out", l, ws, cur.gen)
}
