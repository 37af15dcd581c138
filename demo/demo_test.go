package demo_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/copartition"
	"github.com/joiner-dev/joiner/demo"
	"github.com/joiner-dev/joiner/join"
	"github.com/joiner-dev/joiner/loadgen"
	"github.com/joiner-dev/joiner/node"
	"github.com/joiner-dev/joiner/testsupport/testkit"
	"github.com/segmentio/kafka-go"
)

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() && os.Getenv("JOINER_TEST_LOGS") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return testkit.FailureLog(t, 400)
}

// The four-worker experiment (`joiner demo`'s defaults): 4 workers, 6
// partitions, 10 symbols × 3 notifications, with each assignor.
func TestDemoFourWorkers(t *testing.T) {
	tests := []struct {
		assignor            string
		local, remote, miss int64
	}{
		{"copartition", 30, 0, 0},
		// roundrobin deals market-0..5, notifications-0..5 over 4 members:
		// market-p lands on member p%4 and notifications-p on (p+2)%4, so
		// every price lives elsewhere and is looked up from its owner.
		{"roundrobin", 0, 30, 0},
		// range co-locates equal partition numbers.
		{"range", 30, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.assignor, func(t *testing.T) {
			t.Parallel()
			cfg := demo.DefaultConfig()
			cfg.Assignor, cfg.Timeout, cfg.Logger = tt.assignor, time.Minute, testLogger(t)
			rep, err := demo.Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Notifications != 30 || rep.Alerts != 30 {
				t.Errorf("notifications=%d alerts=%d, want 30 and 30", rep.Notifications, rep.Alerts)
			}
			got := rep.Joins
			if got.Local != tt.local || got.Remote != tt.remote || got.Miss != tt.miss {
				t.Errorf("joins = %+v, want local=%d remote=%d miss=%d", got, tt.local, tt.remote, tt.miss)
			}
			if len(rep.PerWorker) != 4 {
				t.Errorf("per_worker has %d entries, want 4", len(rep.PerWorker))
			}
			var tasks []int
			for _, w := range rep.PerWorker {
				tasks = append(tasks, w.Tasks...)
			}
			slices.Sort(tasks)
			if !slices.Equal(tasks, []int{0, 1, 2, 3, 4, 5}) {
				t.Errorf("tasks over the workers = %v, want each of 0..5 once", tasks)
			}
		})
	}
}

func TestMoreWorkersThanPartitions(t *testing.T) {
	t.Parallel()
	cfg := demo.DefaultConfig()
	cfg.Workers, cfg.Partitions, cfg.Symbols, cfg.Timeout, cfg.Logger = 5, 3, 12, time.Minute, testLogger(t)
	rep, err := demo.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	idle := 0
	for _, w := range rep.PerWorker {
		if len(w.Tasks) == 0 {
			idle++
		}
	}
	if idle != 2 || rep.Joins.Local != 36 || rep.Alerts != 36 {
		t.Errorf("idle=%d joins=%+v alerts=%d; want 2 idle and 36 local", idle, rep.Joins, rep.Alerts)
	}
}

// harness is a broker, a fleet on it and the notifications produced so
// far.
type harness struct {
	t     *testing.T
	b     *demo.Broker
	f     *testkit.Fleet
	ids   []string
	last  map[string]float64
	round int
}

func newHarness(t *testing.T, partitions int) *harness {
	t.Helper()
	b, err := demo.StartBroker(partitions)
	if err != nil {
		t.Fatal(err)
	}
	f := testkit.NewFleet(b, t.TempDir(), node.Config{
		MemberConfig: node.MemberConfig{
			SessionTimeout:    1500 * time.Millisecond,
			HeartbeatInterval: 250 * time.Millisecond,
			RebalanceTimeout:  5 * time.Second,
		},
		JoinConfig: node.JoinConfig{CommitInterval: 100 * time.Millisecond},
		Logger:     testLogger(t),
	})
	t.Cleanup(func() {
		if err := f.StopAll(); err != nil {
			t.Errorf("stopping workers: %v", err)
		}
		b.Close()
	})
	return &harness{t: t, b: b, f: f, last: map[string]float64{}}
}

func (h *harness) start(names ...string) {
	h.t.Helper()
	for _, n := range names {
		if _, err := h.f.Start(context.Background(), n); err != nil {
			h.t.Fatal(err)
		}
	}
}

func (h *harness) stable() int32 {
	h.t.Helper()
	gen, err := h.f.WaitStable(context.Background(), 45*time.Second)
	if err != nil {
		h.t.Fatal(err)
	}
	return gen
}

// produce runs the load generator once with a fresh run id.
func (h *harness) produce(cfg loadgen.Config) loadgen.Summary {
	h.t.Helper()
	h.round++
	cfg.Brokers = h.b.Addrs
	cfg.RunID = fmt.Sprint(h.round)
	cfg.Seed = uint64(h.round)
	sum, err := loadgen.Run(context.Background(), cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	h.ids = append(h.ids, sum.NotificationIDs...)
	for s, p := range sum.LastPrice {
		h.last[s] = p
	}
	return sum
}

// allAlerts waits until every notification produced has an alert.
func (h *harness) allAlerts() *testkit.Alerts {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, err := testkit.CollectAlerts(ctx, h.b, func(a *testkit.Alerts) bool {
		for _, id := range h.ids {
			if a.Count(id) == 0 {
				return false
			}
		}
		return true
	})
	if err != nil {
		missing := 0
		for _, id := range h.ids {
			if a.Count(id) == 0 {
				missing++
			}
		}
		h.t.Fatalf("%d of %d notifications have no alert: %v", missing, len(h.ids), err)
	}
	return a
}

// committed returns the group's committed offset of each partition of
// topic.
func (h *harness) committed(topic string) map[int]int64 {
	h.t.Helper()
	res, err := h.b.Client.OffsetFetch(context.Background(), &kafka.OffsetFetchRequest{GroupID: h.b.Group, Topics: map[string][]int{topic: seq(h.b.Partitions)}})
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[int]int64{}
	for _, p := range res.Topics[topic] {
		out[p.Partition] = p.CommittedOffset
	}
	return out
}

// ends returns the end offset of each partition of topic.
func (h *harness) ends(topic string) map[int]int64 {
	h.t.Helper()
	var reqs []kafka.OffsetRequest
	for p := range h.b.Partitions {
		reqs = append(reqs, kafka.LastOffsetOf(p))
	}
	res, err := h.b.Client.ListOffsets(context.Background(), &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[int]int64{}
	for _, p := range res.Topics[topic] {
		out[p.Partition] = p.LastOffset
	}
	return out
}

// waitCommitted waits until the group has committed every partition of
// topic up to its end.
func (h *harness) waitCommitted(topic string) {
	h.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, e := h.committed(topic), h.ends(topic)
		var behind []string
		for p, end := range e {
			if end > 0 && c[p] != end {
				behind = append(behind, fmt.Sprintf("%s-%d at %d of %d", topic, p, c[p], end))
			}
		}
		if len(behind) == 0 {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("offsets not committed to the end: %s", strings.Join(behind, ", "))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// Grow 1→2→3→4 workers, then shrink back, producing between steps. Each
// rebalance moves exactly the number of tasks the planner reports, only
// moved tasks are restored, and no alert is lost.
func TestScaleOutAndIn(t *testing.T) {
	t.Parallel()
	const P = 6
	h := newHarness(t, P)
	steps := [][]string{
		{"w1"}, {"w1", "w2"}, {"w1", "w2", "w3"}, {"w1", "w2", "w3", "w4"},
		{"w1", "w2", "w3"}, {"w1", "w2"}, {"w1"},
	}
	var (
		prevOwners map[int]string
		prevTotals join.Stats
		prevGen    int32
		running    []string
	)
	for i, members := range steps {
		for _, m := range members {
			if !slices.Contains(running, m) {
				h.start(m)
			}
		}
		for _, m := range running {
			if !slices.Contains(members, m) {
				if err := h.f.Stop(m); err != nil {
					t.Fatalf("stopping %s: %v", m, err)
				}
			}
		}
		running = slices.Clone(members)
		gen := h.stable()
		owners := h.f.Owners()
		totals := h.f.Totals()

		previous := map[string][]int{}
		for p, o := range prevOwners {
			previous[o] = append(previous[o], p)
		}
		plan, err := copartition.Assign(P, members, previous)
		if err != nil {
			t.Fatal(err)
		}
		observed := 0
		for p := range P {
			if owners[p] != prevOwners[p] {
				observed++
			}
		}
		moved := totals.MovedTotal - prevTotals.MovedTotal
		restores := totals.Restores - prevTotals.Restores
		t.Logf("step %d %v: generation %d→%d, planner moved %d, observed %d, reported %d, restores %d",
			i, members, prevGen, gen, plan.Moved, observed, moved, restores)
		if observed != plan.Moved {
			t.Errorf("step %d: %d tasks changed owner, the planner reports %d", i, observed, plan.Moved)
		}
		if restores != moved {
			t.Errorf("step %d: %d restores for %d moved tasks: unmoved tasks must not be restored", i, restores, moved)
		}
		if gen == prevGen+1 && moved != int64(plan.Moved) {
			t.Errorf("step %d: the leader reported %d moved, the planner %d", i, moved, plan.Moved)
		}
		prevOwners, prevTotals, prevGen = owners, totals, gen
		h.produce(loadgen.Config{Symbols: 20, TicksPerSymbol: 2, NotificationsPerSymbol: 2})
	}
	a := h.allAlerts()
	t.Logf("%d notifications, %d alerts, %d duplicates", len(h.ids), a.Records, a.Duplicates())
	// Clean rebalances pause and commit before tasks move: nothing is
	// processed twice.
	if a.Duplicates() != 0 {
		t.Errorf("%d duplicate alerts across clean rebalances, want 0", a.Duplicates())
	}
	tot := h.f.Totals()
	if tot.Miss != 0 {
		t.Errorf("%d misses; every symbol had a tick before its notifications", tot.Miss)
	}
}

// A worker that stops heartbeating without leaving: its tasks resume
// elsewhere after the session timeout and every notification gets at
// least one alert. The worker crashes while load flows: after a known
// number of notifications were acknowledged, not after a sleep.
func TestWorkerCrash(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 6)
	h.start("w1", "w2", "w3")
	gen := h.stable()
	h.produce(loadgen.Config{Symbols: 30, TicksPerSymbol: 2, NotificationsPerSymbol: 2})

	// Crash w3 once 50 of the next 150 notifications are acknowledged.
	const notifications, crashAfter = 150, 50
	w := loadgen.NewWriter(h.b.Addrs)
	defer w.Close()
	var crashedAt time.Time
	crashed := testkit.AfterAcked(w, h.b.Topics.Notifications, crashAfter, func() {
		crashedAt = time.Now()
		if err := h.f.Crash("w3"); err != nil {
			t.Error(err)
		}
	})
	sum := h.produce(loadgen.Config{Writer: w, Symbols: 30, TicksPerSymbol: 1, NotificationsPerSymbol: notifications / 30, Rate: 500})
	if !crashed() {
		t.Fatalf("w3 was not crashed: fewer than %d of %d notifications acknowledged", crashAfter, sum.Notifications)
	}
	gen2 := h.stable()
	takeover := time.Since(crashedAt)
	t.Logf("w3 crashed after %d of %d notifications were acknowledged; its tasks resumed elsewhere %s later (generation %d→%d); owners %v",
		crashAfter, sum.Notifications, takeover.Round(time.Millisecond), gen, gen2, h.f.Owners())
	// A crashed worker does not leave: the group notices only when its
	// session expires, a session timeout after its last heartbeat, which
	// was one heartbeat interval (a few, if heartbeats were late) before
	// the crash. A clean leave lets the others take over at once (about
	// 250ms here). Half the session timeout tells the two apart.
	if floor := h.f.Template.SessionTimeout / 2; takeover < floor {
		t.Errorf("w3's tasks were taken over %s after its crash, before its session (%s) could expire: it left the group instead of crashing",
			takeover.Round(time.Millisecond), h.f.Template.SessionTimeout)
	}
	// Owners over every worker, the crashed one included: w3 is not in
	// the generation that took its tasks over, and w1 and w2 own them all.
	owners := h.f.Owners()
	for p := range h.b.Partitions {
		if o := owners[p]; o != "w1" && o != "w2" {
			t.Errorf("task %d is owned by %q after the crash, want w1 or w2", p, o)
		}
	}
	c, ok := h.f.Crashed()["w3"]
	if !ok {
		t.Fatalf("w3 is not among the crashed workers %v", h.f.Crashed())
	}
	if c.Generation >= gen2 {
		t.Errorf("the crashed w3 reports generation %d (tasks %v), the group is at %d: it was not cut off", c.Generation, c.Tasks, gen2)
	}
	h.produce(loadgen.Config{Symbols: 30, TicksPerSymbol: 1, NotificationsPerSymbol: 2})
	a := h.allAlerts()
	t.Logf("%d notifications, %d alerts, %d duplicates after the crash", len(h.ids), a.Records, a.Duplicates())
	if a.Distinct() < len(h.ids) {
		t.Errorf("lost alerts: %d of %d notifications", a.Distinct(), len(h.ids))
	}
}

// A worker restarted with the same instance id and state dir restores only
// the ticks produced after its last applied offset.
func TestRestartRestoresOnlyNewTicks(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 4)
	h.start("w1")
	h.stable()
	h.produce(loadgen.Config{Symbols: 25, TicksPerSymbol: 4, NotificationsPerSymbol: 1})
	h.allAlerts()
	h.waitCommitted(h.b.Topics.Market)
	h.waitCommitted(h.b.Topics.Notifications)
	if err := h.f.Stop("w1"); err != nil {
		t.Fatal(err)
	}
	before := h.f.Totals().RestoredRecords

	sum := h.produce(loadgen.Config{Symbols: 7, TicksPerSymbol: 3, NotificationsPerSymbol: 1})
	h.start("w1")
	h.stable()
	h.allAlerts()
	restored := h.f.Totals().RestoredRecords - before
	if restored != int64(sum.Ticks) {
		t.Errorf("the restarted worker restored %d records, want exactly the %d ticks produced while it was down", restored, sum.Ticks)
	}
	// Its store ends with the last price of every symbol.
	tot := h.f.Totals()
	if tot.Miss != 0 {
		t.Errorf("%d misses after the restart", tot.Miss)
	}
	checkPrices(t, h)
}

// checkPrices asks the owners for every symbol's price and compares it with
// the last tick produced.
func checkPrices(t *testing.T, h *harness) {
	t.Helper()
	syms := make([]string, 0, len(h.last))
	for s := range h.last {
		syms = append(syms, s)
	}
	sort.Strings(syms)
	for _, n := range h.f.Workers() {
		for _, s := range syms {
			task := join.SymbolTask(s, h.b.Partitions)
			if !slices.Contains(n.Processor().Stats().StateTasks, task) {
				continue
			}
			p, ok := lookup(t, n.Addr(), s)
			if !ok || p != h.last[s] {
				t.Errorf("%s: price of %s is %v (found %v), want %v", n.InstanceID(), s, p, ok, h.last[s])
			}
		}
	}
}

// Malformed ticks and notifications go to the dead-letter topic with
// their reason and source, and the group commits past them. The expected
// reason of each record is stated here, next to the record produced.
func TestMalformedRecordsAreDeadLettered(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 3)
	h.start("w1", "w2")
	h.stable()
	market, notes := h.b.Topics.Market, h.b.Topics.Notifications
	bad := []struct {
		topic, value, reason string
	}{
		{market, `{"symbol":"BBCA","price":"high"}`, "wrong_type"},
		{market, `{"price":12.5}`, "missing_field"},
		{market, `{"symbol":"BBCA","price":12.5`, "invalid_json"},
		{notes, `{"id":"bad-1","symbol":`, "invalid_json"},
		{notes, `{"id":"bad-2"}`, "missing_field"},
		{notes, `{"id":"bad-3","symbol":42}`, "wrong_type"},
		{notes, `{"id":"bad-4","symbol":"BB CA"}`, "invalid_value"},
		{notes, `not json`, "invalid_json"},
	}
	w := loadgen.NewWriter(h.b.Addrs)
	defer w.Close()
	want := map[string]int{}
	source := map[string]string{} // value → topic
	for _, b := range bad {
		want[b.reason]++
		source[b.value] = b.topic
		if err := w.WriteMessages(context.Background(), kafka.Message{Topic: b.topic, Key: []byte("BBCA"), Value: []byte(b.value)}); err != nil {
			t.Fatal(err)
		}
	}
	h.produce(loadgen.Config{Symbols: 10, TicksPerSymbol: 1, NotificationsPerSymbol: 2})
	h.allAlerts()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dead, err := testkit.CollectDeadLetters(ctx, h.b, func(d []testkit.DeadLetter) bool { return len(d) >= len(bad) })
	if err != nil {
		t.Fatalf("dead letters: %v (have %v)", err, dead)
	}
	reasons := map[string]int{}
	for _, d := range dead {
		reasons[d.Reason]++
		topic, ok := source[d.Value]
		if !ok {
			t.Errorf("dead letter %q (%s) is not one of the malformed records produced", d.Value, d.Reason)
		}
		if !strings.HasPrefix(d.Source, topic+"/") {
			t.Errorf("dead letter %q has source %q, want %s/<partition>/<offset>", d.Value, d.Source, topic)
		}
	}
	if fmt.Sprint(reasons) != fmt.Sprint(want) {
		t.Errorf("dead-letter reasons = %v, want %v", reasons, want)
	}
	// The offsets of the malformed records were committed past them.
	h.waitCommitted(h.b.Topics.Notifications)
	h.waitCommitted(h.b.Topics.Market)
}
