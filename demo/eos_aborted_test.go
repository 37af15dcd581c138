package demo_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/demo"
	"github.com/joiner-dev/joiner/loadgen"
	"github.com/joiner-dev/joiner/node"
	"github.com/joiner-dev/joiner/record"
	"github.com/joiner-dev/joiner/testsupport/testkit"
	"github.com/segmentio/kafka-go"
)

// TestExactlyOnceIgnoresAbortedInput: ticks and notifications written in
// aborted transactions (loadgen's decoys: ticks at loadgen.DecoyPrice,
// notifications with loadgen.DecoyIDPrefix ids) are never joined, stored
// or dead-lettered by exactly-once workers, which read both inputs
// read_committed: every committed notification has exactly one alert, no
// decoy has one, and no alert carries a decoy's price.
func TestExactlyOnceIgnoresAbortedInput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, sum, want, got := transactionalInput(ctx, t, true, func(a record.Alert, v []byte, want map[string]bool) {
		if strings.HasPrefix(a.ID, loadgen.DecoyIDPrefix) || !want[a.ID] {
			t.Errorf("an alert of a notification of an aborted transaction: %s", v)
		}
		if a.Price != nil && *a.Price == loadgen.DecoyPrice {
			t.Errorf("an alert priced by a tick of an aborted transaction: %s", v)
		}
	})
	for id := range want {
		if got[id] != 1 {
			t.Errorf("notification %s has %d alerts, want 1", id, got[id])
		}
	}
	dead := demo.NewTopicReader(b.Client, b.Topics.DeadLetter, b.Partitions).ReadCommitted()
	if _, err := dead.Poll(ctx, func(_ kafka.Record, v []byte) { t.Errorf("a dead letter: %s", v) }); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d notifications, %d alerts; aborted: %d ticks, %d notifications, none joined", len(want), len(got), sum.AbortedTicks, sum.AbortedNotifications)
}

// TestAtLeastOnceReadsTransactionalInput: at-least-once workers read
// their inputs read_uncommitted, past the transactions' markers: on the
// same transactional input (whose partitions end with COMMIT or ABORT
// markers), every committed notification has an alert, and every alert
// is of a notification loadgen wrote. (The aborted ticks and
// notifications are read too, as the README's Delivery section says.)
func TestAtLeastOnceReadsTransactionalInput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, sum, want, got := transactionalInput(ctx, t, false, func(a record.Alert, v []byte, want map[string]bool) {
		if !want[a.ID] && !strings.HasPrefix(a.ID, loadgen.DecoyIDPrefix) {
			t.Errorf("an alert of no notification: %s", v)
		}
	})
	for id := range want {
		if got[id] == 0 {
			t.Errorf("notification %s has no alert", id)
		}
	}
	t.Logf("%d notifications, %d alerted; aborted: %d ticks, %d notifications", len(want), len(got), sum.AbortedTicks, sum.AbortedNotifications)
}

// transactionalInput starts two workers (exactly-once or at-least-once)
// on a 3-partition embedded broker, writes loadgen's input in
// transactions, every second one aborted, and reads the alerts
// (read_committed under exactly-once) until every committed notification
// has one or 60 s have passed, calling each with every alert. It returns
// the broker, loadgen's summary, the committed notifications' ids and the
// alerts of each id.
func transactionalInput(ctx context.Context, t *testing.T, exactlyOnce bool, each func(a record.Alert, v []byte, want map[string]bool)) (*demo.Broker, loadgen.Summary, map[string]bool, map[string]int) {
	t.Helper()
	b, err := demo.StartBroker(3)
	if err != nil {
		t.Fatal(err)
	}
	f := testkit.NewFleet(b, t.TempDir(), node.Config{
		MemberConfig: node.MemberConfig{SessionTimeout: 3 * time.Second, HeartbeatInterval: 250 * time.Millisecond, RebalanceTimeout: 5 * time.Second},
		ExactlyOnce:  exactlyOnce, Logger: testLogger(t),
	})
	t.Cleanup(func() {
		if err := f.StopAll(); err != nil {
			t.Errorf("stopping workers: %v", err)
		}
		b.Close()
	})
	for _, w := range []string{"w1", "w2"} {
		if _, err := f.Start(context.Background(), w); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.WaitStable(context.Background(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	sum, err := loadgen.Run(ctx, loadgen.Config{
		Brokers: b.Addrs, MarketTopic: b.Topics.Market, NotificationsTopic: b.Topics.Notifications,
		Symbols: 10, TicksPerSymbol: 20, NotificationsPerSymbol: 20, Rate: 2000,
		Transactional: true, AbortEvery: 2, RunID: "eos",
	})
	if err != nil {
		t.Fatal(err)
	}
	if sum.AbortedTicks == 0 || sum.AbortedNotifications == 0 {
		t.Fatalf("the run aborted nothing: %+v", sum)
	}
	want := map[string]bool{}
	for _, id := range sum.NotificationIDs {
		want[id] = true
	}
	got := map[string]int{}
	r := demo.NewTopicReader(b.Client, b.Topics.Alerts, b.Partitions)
	if exactlyOnce {
		r = r.ReadCommitted()
	}
	alerted := func() bool {
		for id := range want {
			if got[id] == 0 {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(60 * time.Second); !alerted() && time.Now().Before(deadline); {
		if _, err := r.Poll(ctx, func(_ kafka.Record, v []byte) {
			var a record.Alert
			if err := json.Unmarshal(v, &a); err != nil {
				t.Errorf("alert %s: %v", v, err)
				return
			}
			got[a.ID]++
			each(a, v, want)
		}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return b, sum, want, got
}
