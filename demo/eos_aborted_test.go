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
	b, err := demo.StartBroker(3)
	if err != nil {
		t.Fatal(err)
	}
	f := testkit.NewFleet(b, t.TempDir(), node.Config{
		MemberConfig: node.MemberConfig{SessionTimeout: 3 * time.Second, HeartbeatInterval: 250 * time.Millisecond, RebalanceTimeout: 5 * time.Second},
		ExactlyOnce:  true, Logger: testLogger(t),
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
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
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
	r := demo.NewTopicReader(b.Client, b.Topics.Alerts, b.Partitions).ReadCommitted()
	for deadline := time.Now().Add(60 * time.Second); len(got) < len(want) && time.Now().Before(deadline); {
		if _, err := r.Poll(ctx, func(_ kafka.Record, v []byte) {
			var a record.Alert
			if err := json.Unmarshal(v, &a); err != nil {
				t.Errorf("alert %s: %v", v, err)
				return
			}
			got[a.ID]++
			if strings.HasPrefix(a.ID, loadgen.DecoyIDPrefix) || !want[a.ID] {
				t.Errorf("an alert of a notification of an aborted transaction: %s", v)
			}
			if a.Price != nil && *a.Price == loadgen.DecoyPrice {
				t.Errorf("an alert priced by a tick of an aborted transaction: %s", v)
			}
		}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
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
