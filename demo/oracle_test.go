package demo_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/demo"
	"github.com/joiner-dev/joiner/node"
	"github.com/joiner-dev/joiner/record"
	"github.com/joiner-dev/joiner/testsupport/oracle"
	"github.com/joiner-dev/joiner/testsupport/testkit"
)

// TestOracle produces ticks and notifications interleaved in time and checks
// every alert against the input (testsupport/oracle): each notification has an
// alert carrying its symbol's price as of its own time, or miss when there
// was none; a duplicate is identical to the first copy but for the worker.
// It does so without disturbance and under the disturbances workers meet,
// while the load flows.
func TestOracle(t *testing.T) {
	const session = 1500 * time.Millisecond
	scenarios := []struct {
		name     string
		assignor string
		workers  []string
		// disturb runs while the load flows; at(f) waits until a share f of
		// the rounds was produced.
		disturb func(t *testing.T, f *testkit.Fleet, at func(float64))
		// noDuplicates: no alert may be written twice.
		noDuplicates bool
		// maxDuplicates, when set, bounds the duplicates.
		maxDuplicates int
		// exactlyOnce: exactly-once workers, alerts read read_committed
		// (see exactlyOnceScenarios).
		exactlyOnce bool
		// calm: no disturbance, so a session timeout long enough that a
		// loaded machine (CI's 2 cores) drops no member: a dropped member
		// is a disturbance of its own (its tasks move, and under
		// at-least-once some alerts repeat; with 3 members roundrobin
		// puts market-p and notifications-p together).
		calm bool
	}{
		{name: "none", workers: []string{"w1", "w2", "w3"}, noDuplicates: true, calm: true},
		// With 4 members and 6 partitions, roundrobin puts market-p on member
		// p%4 and notifications-p on (p+2)%4: every priced join is remote.
		{name: "roundrobin", assignor: "roundrobin", workers: []string{"w1", "w2", "w3", "w4"}, noDuplicates: true, calm: true},
		{name: "scale-out-and-in", workers: []string{"w1", "w2"}, disturb: func(t *testing.T, f *testkit.Fleet, at func(float64)) {
			at(0.2)
			mustDo(t, startErr(f.Start(context.Background(), "w3")))
			at(0.4)
			mustDo(t, startErr(f.Start(context.Background(), "w4")))
			at(0.6)
			mustDo(t, f.Stop("w1"))
			at(0.8)
			mustDo(t, f.Stop("w4"))
		}},
		{name: "crash-and-restart", workers: []string{"w1", "w2", "w3"}, disturb: func(t *testing.T, f *testkit.Fleet, at func(float64)) {
			at(0.3)
			mustDo(t, f.Crash("w2"))
			time.Sleep(session / 2)
			// The same instance id and state dir, before the session
			// expired: it takes its tasks back and restores from its store.
			mustDo(t, startErr(f.Start(context.Background(), "w2")))
		}},
		{name: "isolated-past-the-session", workers: []string{"w1", "w2", "w3"}, disturb: func(t *testing.T, f *testkit.Fleet, at func(float64)) {
			at(0.3)
			mustDo(t, f.Isolate("w3"))
			// Past the session, the group gives w3's tasks to w1 and w2.
			waitUntil(t, 30*time.Second, "w1 and w2 to take w3's tasks over", func() bool {
				return takenOver(f, "w3")
			})
			mustDo(t, f.Heal("w3"))
		},
			// Fenced: the isolated worker restarts its tasks from the
			// committed offsets, so the duplicates are at most what it
			// processed after its last commit (a commit interval, 100ms, of
			// its share of 600 notifications/s) plus a batch in flight;
			// resuming from memory would repeat everything its tasks' interim
			// owners wrote (hundreds).
			maxDuplicates: 150},
	}
	for _, sc := range scenarios[:len(scenarios):len(scenarios)] {
		sc.name, sc.exactlyOnce, sc.noDuplicates, sc.maxDuplicates = "exactly-once-"+sc.name, true, true, 0
		scenarios = append(scenarios, sc)
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			b, err := demo.StartBroker(6)
			if err != nil {
				t.Fatal(err)
			}
			sessionTimeout := session
			if sc.calm {
				sessionTimeout = 6 * time.Second
			}
			f := testkit.NewFleet(b, t.TempDir(), node.Config{
				MemberConfig: node.MemberConfig{
					Assignor:          sc.assignor,
					SessionTimeout:    sessionTimeout,
					HeartbeatInterval: 250 * time.Millisecond,
					RebalanceTimeout:  5 * time.Second,
				},
				JoinConfig: node.JoinConfig{
					CommitInterval: 100 * time.Millisecond,
					MaxTaskIdle:    2 * time.Second,
				},
				Logger:      testLogger(t),
				ExactlyOnce: sc.exactlyOnce,
				// The isolated worker's transaction outlives it.
				TransactionTimeout: 3 * time.Second,
			})
			t.Cleanup(func() {
				if err := f.StopAll(); err != nil {
					t.Errorf("stopping workers: %v", err)
				}
				b.Close()
			})
			for _, w := range sc.workers {
				if _, err := f.Start(context.Background(), w); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := f.WaitStable(context.Background(), 30*time.Second); err != nil {
				t.Fatal(err)
			}

			topics := oracle.Topics{Market: b.Topics.Market, Notifications: b.Topics.Notifications, Alerts: b.Topics.Alerts}
			cfg := oracle.Config{Rounds: 60, RoundInterval: 50 * time.Millisecond}
			p := oracle.NewProducer(b.Addrs, nil, topics, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			produced := make(chan error, 1)
			go func() { produced <- p.Run(ctx) }()
			if sc.disturb != nil {
				at := func(share float64) {
					for float64(p.Rounds()) < share*float64(cfg.Rounds) {
						time.Sleep(10 * time.Millisecond)
					}
				}
				sc.disturb(t, f, at)
			}
			if err := <-produced; err != nil {
				t.Fatal(err)
			}
			wl := p.Workload()
			r := oracle.NewAlertReader(b.Client, b.Topics.Alerts, b.Partitions)
			if sc.exactlyOnce {
				r.ReadCommitted()
				defer r.Close()
			}
			rep, err := wl.WaitComplete(ctx, r, wl.Produced(), 60*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if sc.exactlyOnce {
				rep = settleCommitted(ctx, t, wl, r)
				if err := r.CrossCheck(ctx); err != nil {
					t.Error(err)
				}
			}
			n, ticks, exact := wl.Counts()
			t.Logf("oracle %s: %v (ticks=%d, notifications at a tick's exact time=%d)", sc.name, rep, ticks, exact)
			if n == 0 || rep.Results["miss"] == 0 || rep.Results["miss"] == n {
				t.Errorf("the workload must mix priced and unpriced notifications: %v", rep)
			}
			if rep.Lost != 0 || rep.Wrong != 0 || rep.Mismatched != 0 || rep.DuplicatesDiffering != 0 {
				t.Errorf("oracle: %v; examples: %q", rep, rep.Examples)
			}
			if sc.maxDuplicates > 0 && rep.Duplicates > sc.maxDuplicates {
				t.Errorf("oracle: %d duplicates, want at most %d", rep.Duplicates, sc.maxDuplicates)
			}
			if sc.noDuplicates && rep.Duplicates != 0 {
				t.Errorf("oracle: %d duplicates (without a disturbance, or exactly-once); copies of %q", rep.Duplicates, r.DuplicateOrigins(5))
			}
			if sc.assignor == "roundrobin" && rep.Results["local"] != 0 {
				t.Errorf("roundrobin: %d local joins, want every priced join remote", rep.Results["local"])
			}
		})
	}
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Error(err)
	}
}

func startErr(_ *testkit.Running, err error) error {
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	return nil
}

// takenOver reports whether the running workers other than gone share one
// generation and own every task between them.
func takenOver(f *testkit.Fleet, gone string) bool {
	tasks := map[int]bool{}
	gens := map[int32]bool{}
	for name, n := range f.Workers() {
		if name == gone {
			continue
		}
		s := n.Processor().Stats()
		gens[s.Generation] = true
		for _, p := range s.Tasks {
			tasks[p] = true
		}
	}
	return len(gens) == 1 && len(tasks) == f.Broker.Partitions
}

// TestOracleUserRecords: the user's own records on the embedded broker.
// Notifications of every shape (members of their own, nested values, long
// integers, escapes, members named like the join's, no id), a renamed
// symbol and price member, headers on every notification, and ticks
// written up to 400 ms out of timestamp order. Every alert is checked
// member by member, header by header and price by price. With --grace
// 500ms no price is wrong (merged tasks and, with roundrobin, remote
// lookups); without a grace the late ticks are counted.
func TestOracleUserRecords(t *testing.T) {
	for _, sc := range []struct {
		name     string
		assignor string
		grace    time.Duration
	}{
		{name: "grace", grace: 500 * time.Millisecond},
		{name: "grace-roundrobin", assignor: "roundrobin", grace: 500 * time.Millisecond},
		{name: "no-grace"},
	} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			b, err := demo.StartBroker(6)
			if err != nil {
				t.Fatal(err)
			}
			fields := record.Fields{Symbol: "ticker", Price: "last"}
			f := testkit.NewFleet(b, t.TempDir(), node.Config{
				MemberConfig: node.MemberConfig{
					Assignor:          sc.assignor,
					SessionTimeout:    1500 * time.Millisecond,
					HeartbeatInterval: 250 * time.Millisecond,
				},
				JoinConfig: node.JoinConfig{
					Fields:         fields,
					Grace:          sc.grace,
					CommitInterval: 100 * time.Millisecond,
				},
				Logger: testLogger(t),
			})
			t.Cleanup(func() {
				if err := f.StopAll(); err != nil {
					t.Errorf("stopping workers: %v", err)
				}
				b.Close()
			})
			workers := []string{"w1", "w2", "w3"}
			if sc.assignor == "roundrobin" {
				workers = append(workers, "w4")
			}
			for _, w := range workers {
				if _, err := f.Start(context.Background(), w); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := f.WaitStable(context.Background(), 30*time.Second); err != nil {
				t.Fatal(err)
			}
			topics := oracle.Topics{Market: b.Topics.Market, Notifications: b.Topics.Notifications, Alerts: b.Topics.Alerts}
			cfg := oracle.Config{Rounds: 60, RoundInterval: 50 * time.Millisecond, Fields: fields, Shapes: true, Headers: true, OutOfOrder: 400 * time.Millisecond}
			p := oracle.NewProducer(b.Addrs, nil, topics, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := p.Run(ctx); err != nil {
				t.Fatal(err)
			}
			wl := p.Workload()
			rep, err := wl.WaitComplete(ctx, oracle.NewAlertReader(b.Client, b.Topics.Alerts, b.Partitions), wl.Produced(), 60*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			late := f.Totals().TicksLate
			_, ticks, _ := wl.Counts()
			t.Logf("oracle %s: %v (ticks=%d, late ticks counted=%d, longest a tick was written after its time %s)", sc.name, rep, ticks, late, wl.MaxTickDelay())
			if rep.Lost != 0 || rep.Mismatched != 0 || rep.Duplicates != 0 || rep.Alerts != rep.Notifications {
				t.Errorf("oracle: %v; examples: %q", rep, rep.Examples)
			}
			// The grace's guarantee holds for a notification whose ticks
			// were all written in time: before any tick more than the
			// grace newer (the oracle writes them so) and within the grace
			// of its time by the clock (unless the producer fell behind).
			behind := 0
			for _, id := range rep.WrongIDs {
				if wl.AckedAfter(id, sc.grace) {
					behind++
				}
			}
			if sc.grace > 0 && rep.Wrong != behind {
				t.Errorf("with a grace above the ticks' disorder: %d wrong prices, %d of them with a tick written more than the grace late; examples: %q", rep.Wrong, behind, rep.Examples)
			}
			if sc.grace > 0 && behind > 0 {
				t.Logf("%d wrong alerts had a tick the producer wrote more than the grace after the notification's time (a loaded machine)", behind)
			}
			if sc.grace == 0 && late == 0 {
				t.Errorf("without a grace, no late tick was counted (%d wrong prices)", rep.Wrong)
			}
			if sc.assignor == "roundrobin" && rep.Results["local"] != 0 {
				t.Errorf("roundrobin: %d local joins, want every priced join remote", rep.Results["local"])
			}
		})
	}
}
