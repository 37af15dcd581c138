package demo_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/copartition"
	"github.com/joiner-dev/joiner/demo"
	"github.com/joiner-dev/joiner/murmur2"
	"github.com/joiner-dev/joiner/node"
	"github.com/joiner-dev/joiner/record"
	"github.com/joiner-dev/joiner/testsupport/oracle"
	"github.com/joiner-dev/joiner/testsupport/testkit"
	"github.com/segmentio/kafka-go"
)

// The high-availability tests of issue 9 on the embedded broker: the
// cooperative handover of a scale-out, standby failover after a crash, and
// the balance of active tasks while standbys are placed. Each checks every
// alert against the oracle too.

// haFleet starts a broker of partitions partitions and a fleet configured
// by tune, with the timeouts of the oracle tests.
func haFleet(t *testing.T, partitions int, tune func(*node.Config)) *testkit.Fleet {
	t.Helper()
	b, err := demo.StartBroker(partitions)
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.Config{
		MemberConfig: node.MemberConfig{
			SessionTimeout:    1500 * time.Millisecond,
			HeartbeatInterval: 250 * time.Millisecond,
			RebalanceTimeout:  5 * time.Second,
		},
		JoinConfig: node.JoinConfig{
			CommitInterval: 100 * time.Millisecond,
			MaxTaskIdle:    2 * time.Second,
		},
		Logger: testLogger(t),
	}
	if tune != nil {
		tune(&cfg)
	}
	f := testkit.NewFleet(b, t.TempDir(), cfg)
	t.Cleanup(func() {
		if err := f.StopAll(); err != nil {
			t.Errorf("stopping workers: %v", err)
		}
		b.Close()
	})
	return f
}

func startAll(t *testing.T, f *testkit.Fleet, names ...string) {
	t.Helper()
	for _, w := range names {
		if _, err := f.Start(context.Background(), w); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.WaitStable(context.Background(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
}

// oracleLoad produces the oracle's workload in the background; wait
// returns the workload once it is all produced, at(share) blocks until that
// share of the rounds was.
type oracleLoad struct {
	p        *oracle.Producer
	rounds   int
	produced chan error
}

func startOracleLoad(ctx context.Context, b *demo.Broker, cfg oracle.Config) *oracleLoad {
	topics := oracle.Topics{Market: b.Topics.Market, Notifications: b.Topics.Notifications, Alerts: b.Topics.Alerts}
	l := &oracleLoad{p: oracle.NewProducer(b.Addrs, nil, topics, cfg), rounds: cfg.Rounds, produced: make(chan error, 1)}
	go func() { l.produced <- l.p.Run(ctx) }()
	return l
}

func (l *oracleLoad) at(share float64) {
	for float64(l.p.Rounds()) < share*float64(l.rounds) {
		time.Sleep(10 * time.Millisecond)
	}
}

// check waits for the load and every alert, and fails the test on a lost or
// wrong alert, or on a duplicate when noDuplicates.
func (l *oracleLoad) check(ctx context.Context, t *testing.T, b *demo.Broker, noDuplicates bool) oracle.Report {
	t.Helper()
	if err := <-l.produced; err != nil {
		t.Fatal(err)
	}
	wl := l.p.Workload()
	rep, err := wl.WaitComplete(ctx, oracle.NewAlertReader(b.Client, b.Topics.Alerts, b.Partitions), wl.Produced(), 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("oracle: %v", rep)
	if rep.Lost != 0 || rep.Wrong != 0 || rep.DuplicatesDiffering != 0 {
		t.Errorf("oracle: %v; examples: %q", rep, rep.Examples)
	}
	if noDuplicates && rep.Duplicates != 0 {
		t.Errorf("oracle: %d duplicates, want none", rep.Duplicates)
	}
	return rep
}

// metrics scrapes a worker's /metrics.
func metrics(t *testing.T, n *node.Node) testkit.Metrics {
	t.Helper()
	m, err := testkit.Scrape(http.DefaultClient, "http://"+n.Addr()+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestCooperativeScaleOut scales 3 workers out to 4 under steady load. Only
// the tasks that move pause: on the old workers, the count of
// joiner_rebalance_pause_seconds grows by exactly the tasks each gave up,
// and the alerts of the tasks that stay keep flowing (the longest gap
// between two of their alerts around the rebalance is printed, and must be
// under a second). No alert is lost, wrong or written twice.
func TestCooperativeScaleOut(t *testing.T) {
	t.Parallel()
	f := haFleet(t, 6, nil)
	old := []string{"w1", "w2", "w3"}
	startAll(t, f, old...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := oracle.Config{Rounds: 100, RoundInterval: 50 * time.Millisecond}
	load := startOracleLoad(ctx, f.Broker, cfg)

	load.at(0.3)
	before := f.Owners()
	paused := map[string]float64{}
	for _, w := range old {
		paused[w] = metrics(t, f.Workers()[w]).Sum("joiner_rebalance_pause_seconds_count")
	}
	scaleStart := time.Now()
	mustDo(t, startErr(f.Start(context.Background(), "w4")))
	if _, err := f.WaitStable(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	scaleEnd := time.Now()
	after := f.Owners()

	rep := load.check(ctx, t, f.Broker, true)
	var kept []int
	for p, o := range before {
		if after[p] == o {
			kept = append(kept, p)
		}
	}
	slices.Sort(kept)
	for _, w := range old {
		gave := 0
		for p, o := range before {
			if o == w && after[p] != w {
				gave++
			}
		}
		got := metrics(t, f.Workers()[w]).Sum("joiner_rebalance_pause_seconds_count") - paused[w]
		t.Logf("%s gave up %d tasks; paused %v tasks", w, gave, got)
		if got != float64(gave) {
			t.Errorf("%s: %v tasks paused in the scale-out, want %d (only the tasks that moved)", w, got, gave)
		}
	}
	if len(kept) == 0 || len(kept) == len(before) {
		t.Fatalf("scale-out kept %v of %v: want some tasks kept and some moved", kept, before)
	}
	gap, err := testkit.LongestAlertGap(ctx, f.Broker.Client, f.Broker.Topics.Alerts, f.Broker.Partitions, rep.Alerts,
		kept, scaleStart.Add(-time.Second), scaleEnd.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("scale-out 3->4: longest gap between alerts of the %d tasks that stayed: %v (rebalance took %v)", len(kept), gap, scaleEnd.Sub(scaleStart).Round(time.Millisecond))
	if gap >= time.Second {
		t.Errorf("tasks that stayed paused for %v, want under 1s", gap)
	}
}

// TestStandbyFailover crashes one worker of four (cut off, no leave) under
// load, over a market with a long history (5,000 ticks per partition), with
// warm-ups on and a recovery lag of 1,000. With one standby per task, the
// tasks' new owners restore at most the ticks produced between the crash
// and the takeover plus one fetch's worth; without standbys they restore
// whole partitions.
func TestStandbyFailover(t *testing.T) {
	t.Parallel()
	const history = 30000 // ticks before the load, spread over the partitions
	for _, k := range []int{1, 0} {
		t.Run(fmt.Sprintf("standbys=%d", k), func(t *testing.T) {
			t.Parallel()
			f := haFleet(t, 6, func(c *node.Config) {
				c.Standbys = k
				c.AcceptableRecoveryLag = recoveryLag
				c.MaxWarmupReplicas = copartition.DefaultMaxWarmupReplicas
				c.ProbingRebalanceInterval = time.Second
			})
			b := f.Broker
			writeHistory(t, b, history)
			workers := []string{"w1", "w2", "w3", "w4"}
			startAll(t, f, workers...)
			// Workers that joined later warm their copies up first; the
			// probing rebalances then balance the tasks.
			waitUntil(t, 60*time.Second, "the warm-ups to balance the tasks", func() bool {
				return balanced(f)
			})
			if k > 0 {
				waitUntil(t, 30*time.Second, "standbys to catch up", func() bool {
					for _, w := range workers {
						m := metrics(t, f.Workers()[w])
						if m.Sum("joiner_tasks", `role="standby"`) == 0 || m.Sum("joiner_standby_lag_records") > 100 {
							return false
						}
					}
					return true
				})
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			load := startOracleLoad(ctx, b, oracle.Config{Rounds: 80, RoundInterval: 50 * time.Millisecond})
			load.at(0.3)

			victim := "w2"
			lost := f.Workers()[victim].Processor().Stats().Tasks
			restored := map[string]float64{}
			for _, w := range workers {
				if w != victim {
					m := metrics(t, f.Workers()[w])
					restored[w] = m.Sum("joiner_restore_records_total", `reason="move"`) + m.Sum("joiner_restore_records_total", `reason="failover"`)
				}
			}
			endsAtKill := endOffsets(ctx, t, b, lost)
			mustDo(t, f.Crash(victim))
			waitUntil(t, 30*time.Second, "the survivors to take the crashed worker's tasks over", func() bool {
				return takenOver(f, victim)
			})
			if _, err := f.WaitStable(ctx, 30*time.Second); err != nil {
				t.Fatal(err)
			}
			endsAtTakeover := endOffsets(ctx, t, b, lost)
			var produced int64
			for i := range lost {
				produced += endsAtTakeover[i] - endsAtKill[i]
			}
			var got float64
			for w, was := range restored {
				m := metrics(t, f.Workers()[w])
				got += m.Sum("joiner_restore_records_total", `reason="move"`) + m.Sum("joiner_restore_records_total", `reason="failover"`) - was
			}
			var size int64
			for _, e := range endsAtTakeover {
				size += e
			}
			t.Logf("standbys=%d: crashed worker had tasks %v (%d records of market in all); its tasks' new owners restored %v records; %d ticks were produced between the crash and the takeover",
				k, lost, size, got, produced)
			load.check(ctx, t, b, false)
			if k > 0 && got > float64(produced+fetchSlack) {
				t.Errorf("with a standby the new owners restored %v records, want at most the %d produced between the crash and the takeover + %d", got, produced, fetchSlack)
			}
			if k == 0 && got < float64(size-produced) {
				t.Errorf("without standbys the new owners restored %v records, want the whole partitions (%d)", got, size)
			}
		})
	}
}

// recoveryLag is the failover test's --acceptable-recovery-lag: well below
// a partition's history (5,000 ticks), as with real market history, so a
// worker without a copy is never caught up.
const recoveryLag = 1000

// balanced reports whether the running workers share one generation, own
// every task, and their active counts differ by at most one.
func balanced(f *testkit.Fleet) bool {
	if _, err := f.WaitStable(context.Background(), time.Millisecond); err != nil {
		return false
	}
	var counts []int
	for _, n := range f.Workers() {
		counts = append(counts, len(n.Processor().Stats().Tasks))
	}
	return slices.Max(counts)-slices.Min(counts) <= 1
}

// fetchSlack is "one fetch batch" of the failover bound: the records a
// standby may not have applied yet when its task is promoted.
const fetchSlack = 1000

// writeHistory writes n ticks of symbols the oracle never uses, a day in
// the past, so every partition holds a long history to restore.
func writeHistory(t *testing.T, b *demo.Broker, n int) {
	t.Helper()
	w := &kafka.Writer{Addr: kafka.TCP(b.Addrs...), Balancer: &murmur2.Balancer{}, BatchSize: 1000, BatchTimeout: time.Millisecond}
	defer w.Close()
	msgs := make([]kafka.Message, 0, 1000)
	old := time.Now().Add(-24 * time.Hour)
	for i := range n {
		sym := fmt.Sprintf("HIST%03d", i%200)
		msgs = append(msgs, kafka.Message{Topic: b.Topics.Market, Key: []byte(sym), Time: old.Add(time.Duration(i) * time.Millisecond),
			Value: record.AppendTick(nil, record.Tick{Symbol: sym, Price: float64(i)})})
		if len(msgs) == cap(msgs) || i == n-1 {
			if err := w.WriteMessages(context.Background(), msgs...); err != nil {
				t.Fatal(err)
			}
			msgs = msgs[:0]
		}
	}
}

// endOffsets lists the end offsets of the market partitions ps.
func endOffsets(ctx context.Context, t *testing.T, b *demo.Broker, ps []int) []int64 {
	t.Helper()
	req := make([]kafka.OffsetRequest, len(ps))
	for i, p := range ps {
		req[i] = kafka.LastOffsetOf(p)
	}
	resp, err := b.Client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{b.Topics.Market: req}})
	if err != nil {
		t.Fatal(err)
	}
	byPartition := map[int]int64{}
	for _, po := range resp.Topics[b.Topics.Market] {
		if po.Error != nil {
			t.Fatalf("end offset of %s-%d: %v", b.Topics.Market, po.Partition, po.Error)
		}
		byPartition[po.Partition] = po.LastOffset
	}
	out := make([]int64, len(ps))
	for i, p := range ps {
		out[i] = byPartition[p]
	}
	return out
}

// TestScaleOutWithStandbys is seed 000's scale-out, 1 to 8 workers on 8
// partitions, with one standby per task and the CLI's defaults of the
// recovery lag and warm-ups (the partitions are short, so every worker's
// copy counts as caught up and nothing waits for a warm-up): at every step the
// active counts differ by at most one (standbys never unbalance them), the
// standby counts too, no worker holds a standby of its own task, and at 8
// workers every worker has exactly one active task.
func TestScaleOutWithStandbys(t *testing.T) {
	t.Parallel()
	f := haFleet(t, 8, func(c *node.Config) {
		c.Standbys = 1
		c.AcceptableRecoveryLag = copartition.DefaultAcceptableRecoveryLag
		c.MaxWarmupReplicas = copartition.DefaultMaxWarmupReplicas
	})
	var names []string
	for i := 1; i <= 8; i++ {
		names = append(names, fmt.Sprintf("w%d", i))
		startAll(t, f, names[len(names)-1])
		var active, standby []int
		for _, w := range names {
			s := f.Workers()[w].Processor().Stats()
			active = append(active, len(s.Tasks))
			standby = append(standby, len(s.StandbyTasks))
			for _, p := range s.StandbyTasks {
				if slices.Contains(s.Tasks, p) {
					t.Errorf("%d workers: %s holds task %d both active and standby", i, w, p)
				}
			}
		}
		t.Logf("%d workers: active %v standby %v", i, active, standby)
		if slices.Max(active)-slices.Min(active) > 1 {
			t.Errorf("%d workers: active counts %v differ by more than one", i, active)
		}
		if slices.Max(standby)-slices.Min(standby) > 1 {
			t.Errorf("%d workers: standby counts %v differ by more than one", i, standby)
		}
		if wantStandbys := 8 * min(1, i-1); sumInts(standby) != wantStandbys {
			t.Errorf("%d workers: %d standbys, want %d", i, sumInts(standby), wantStandbys)
		}
	}
	for _, w := range names {
		if n := len(f.Workers()[w].Processor().Stats().Tasks); n != 1 {
			t.Errorf("8 workers: %s has %d active tasks, want exactly 1", w, n)
		}
	}
}

func sumInts(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}
