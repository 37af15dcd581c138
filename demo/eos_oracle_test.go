package demo_test

import (
	"context"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/demo"
	"github.com/joiner-dev/joiner/internal/oracle"
	"github.com/joiner-dev/joiner/internal/testkit"
	"github.com/joiner-dev/joiner/node"
)

// TestOracleExactlyOnce is TestOracle with exactly-once workers
// (node.Config.ExactlyOnce), the alerts read read_committed: under every
// disturbance, no notification is lost, no price is wrong and no alert is
// written twice. A crashed worker (cut off and cancelled without a
// commit) leaves its transaction open; its restart fences it and aborts
// it, and its tasks restart from the offsets the last committed
// transaction holds.
func TestOracleExactlyOnce(t *testing.T) {
	const session = 1500 * time.Millisecond
	scenarios := []struct {
		name     string
		assignor string
		workers  []string
		disturb  func(t *testing.T, f *testkit.Fleet, at func(float64))
	}{
		{name: "none", workers: []string{"w1", "w2", "w3"}},
		{name: "roundrobin", assignor: "roundrobin", workers: []string{"w1", "w2", "w3", "w4"}},
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
			mustDo(t, startErr(f.Start(context.Background(), "w2")))
		}},
		{name: "isolated-past-the-session", workers: []string{"w1", "w2", "w3"}, disturb: func(t *testing.T, f *testkit.Fleet, at func(float64)) {
			at(0.3)
			mustDo(t, f.Isolate("w3"))
			waitUntil(t, 30*time.Second, "w1 and w2 to take w3's tasks over", func() bool {
				return takenOver(f, "w3")
			})
			mustDo(t, f.Heal("w3"))
		}},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			b, err := demo.StartBroker(6)
			if err != nil {
				t.Fatal(err)
			}
			f := testkit.NewFleet(b, t.TempDir(), node.Config{
				Assignor:          sc.assignor,
				SessionTimeout:    session,
				HeartbeatInterval: 250 * time.Millisecond,
				RebalanceTimeout:  5 * time.Second,
				CommitInterval:    100 * time.Millisecond,
				MaxTaskIdle:       2 * time.Second,
				ExactlyOnce:       true,
				// The isolated worker's transaction outlives it.
				TransactionTimeout: 3 * time.Second,
				Logger:             testLogger(t),
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
				sc.disturb(t, f, func(share float64) {
					for float64(p.Rounds()) < share*float64(cfg.Rounds) {
						time.Sleep(10 * time.Millisecond)
					}
				})
			}
			if err := <-produced; err != nil {
				t.Fatal(err)
			}
			wl := p.Workload()
			r := oracle.NewAlertReader(b.Client, b.Topics.Alerts, b.Partitions).ReadCommitted()
			rep, err := wl.WaitComplete(ctx, r, wl.Produced(), 60*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			// Alerts committed late (a transaction ending after the last
			// one read) would be duplicates: read once more after a while.
			time.Sleep(500 * time.Millisecond)
			if rep, err = wl.WaitComplete(ctx, r, wl.Produced(), time.Second); err != nil {
				t.Fatal(err)
			}
			t.Logf("oracle exactly-once %s: lost=%d wrong=%d duplicates=%d (%v)", sc.name, rep.Lost, rep.Wrong, rep.Duplicates, rep)
			if rep.Lost != 0 || rep.Wrong != 0 || rep.Mismatched != 0 || rep.Duplicates != 0 {
				t.Errorf("oracle exactly-once: %v; examples: %q", rep, rep.Examples)
			}
			if sc.assignor == "roundrobin" && rep.Results["local"] != 0 {
				t.Errorf("roundrobin: %d local joins, want every priced join remote", rep.Results["local"])
			}
		})
	}
}
