package demo_test

import (
	"context"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/demo"
	"github.com/joiner-dev/joiner/testsupport/oracle"
	"github.com/joiner-dev/joiner/testsupport/testkit"
)

// TestMisroutedNotifications (issue 19, item 2): 5% of the notifications
// are written with librdkafka's default partitioner (CRC32) instead of
// murmur2, so most of those land in another task's partition. Each is
// looked up in its symbol's task, on this worker or another; before, two
// merged tasks each waiting for the other's market deadlocked every
// partition within seconds. Every notification must get its exact as-of
// alert within a time bound, and the misrouted ones be counted.
func TestMisroutedNotifications(t *testing.T) {
	f, topics := oracleFleet(t)
	b := f.Broker
	cfg := oracle.Config{Rounds: 100, TicksPerRound: 12, NotificationsPerRound: 300, RoundInterval: 50 * time.Millisecond, Misrouted: 0.05}
	p := oracle.NewProducer(b.Addrs, nil, topics, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := p.Run(ctx); err != nil {
		t.Fatal(err)
	}
	wl := p.Workload()
	// The load takes 5s to produce; a healthy run has alerted it all
	// within a second or two after (under a second on an idle machine),
	// and a deadlock never completes. The time is the oracle's read of the
	// last alert, not the end of its check of all 30,000 (seconds under
	// -race on a loaded machine).
	produced := time.Now()
	rep := checkExact(ctx, t, b, wl, 20*time.Second)
	after := rep.CompletedAt.Sub(produced)
	t.Logf("the last alerts were read %v after the load ended", after)
	if rep.CompletedAt.IsZero() || after > 10*time.Second {
		t.Errorf("the last alerts came %v after the load ended, want within 10s", after)
	}
	misrouted := 0
	for _, id := range wl.Misrouted() {
		if oracle.MisroutedTo(wl.Symbol(id), b.Partitions) {
			misrouted++
		}
	}
	t.Logf("%d written with CRC32, %d of them outside their symbol's partition (%d alerts)", len(wl.Misrouted()), misrouted, rep.Alerts)
	if misrouted < 100 {
		t.Fatalf("only %d misrouted notifications: the workload does not test them", misrouted)
	}
	if got := f.Totals().Misrouted; got < int64(misrouted) {
		t.Errorf("joiner_notifications_misrouted_total sums to %d, want at least %d", got, misrouted)
	}
}

// oracleFleet starts three workers on an embedded broker of 6 partitions
// and waits for a stable group.
func oracleFleet(t *testing.T) (*testkit.Fleet, oracle.Topics) {
	t.Helper()
	f := haFleet(t, 6, nil)
	startAll(t, f, "w1", "w2", "w3")
	if _, err := f.WaitStable(context.Background(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	b := f.Broker
	return f, oracle.Topics{Market: b.Topics.Market, Notifications: b.Topics.Notifications, Alerts: b.Topics.Alerts}
}

// checkExact waits up to timeout for an alert of every notification of wl
// and fails the test unless each carries its exact as-of price.
func checkExact(ctx context.Context, t *testing.T, b *demo.Broker, wl *oracle.Workload, timeout time.Duration) oracle.Report {
	t.Helper()
	rep, err := wl.WaitComplete(ctx, oracle.NewAlertReader(b.Client, b.Topics.Alerts, b.Partitions), wl.Produced(), timeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%v", rep)
	if rep.Lost != 0 || rep.Wrong != 0 || rep.DuplicatesDiffering != 0 {
		t.Errorf("oracle: %v; examples: %q", rep, rep.Examples)
	}
	return rep
}
