package demo_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/demo"
	"github.com/joiner-dev/joiner/murmur2"
	"github.com/joiner-dev/joiner/record"
	"github.com/joiner-dev/joiner/testsupport/oracle"
	"github.com/segmentio/kafka-go"
)

// TestFreshWorkerLearnsThePartitionHistory (issue 19, item 5): after both
// topics went from 6 to 8 partitions, a worker joins on an empty state
// dir, so no file tells it the old count. The group does: the members
// report the counts they planned with, and the leader sends the history
// in every assignment. A notification of a moved symbol that the new
// worker joins gets the price its symbol had before the change (in its
// task under 6), checked by value.
func TestFreshWorkerLearnsThePartitionHistory(t *testing.T) {
	f := haFleet(t, 6, nil)
	startAll(t, f, "w1", "w2")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := f.WaitStable(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	b := f.Broker
	var moved []string
	for i := 0; len(moved) < 24; i++ {
		s := fmt.Sprintf("F%03d", i)
		if murmur2.Partition([]byte(s), 6) != murmur2.Partition([]byte(s), 8) {
			moved = append(moved, s)
		}
	}
	wl := oracle.NewWorkload(record.Fields{})
	var fields record.Fields
	old := newSwitchingProducer(b.Addrs, 6)
	var tm []kafka.Message
	t0 := time.Now().UnixMilli()
	for i, s := range moved {
		tm = append(tm, kafka.Message{Key: []byte(s), Time: time.UnixMilli(t0 + int64(i)), Value: fields.AppendTick(nil, record.Tick{Symbol: s, Price: float64(100 + i)})})
	}
	if err := old.write(ctx, b.Topics.Market, tm); err != nil {
		t.Fatal(err)
	}
	for i, s := range moved {
		wl.AddTick(s, t0+int64(i), float64(100+i))
	}
	growBoth(ctx, t, b, 8)
	if _, err := demo.WaitStable(ctx, 60*time.Second, 8, f.Workers); err != nil {
		t.Fatal(err)
	}
	if got := f.Workers()["w1"].Processor().PlannedPartitions(); !slices.Equal(got, []int{6, 8}) {
		t.Fatalf("w1 planned %v, want [6 8]", got)
	}
	// w2 leaves; w3 starts on an empty state dir and takes its tasks.
	if err := f.Stop("w2"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Start(ctx, "w3"); err != nil {
		t.Fatal(err)
	}
	if _, err := demo.WaitStable(ctx, 60*time.Second, 8, f.Workers); err != nil {
		t.Fatal(err)
	}
	if got := f.Workers()["w3"].Processor().PlannedPartitions(); !slices.Equal(got, []int{6, 8}) {
		t.Errorf("w3 (empty state dir) planned %v, want [6 8] from the group", got)
	}
	owners := f.Owners()
	var mine []string
	for _, s := range moved {
		if owners[murmur2.Partition([]byte(s), 8)] == "w3" {
			mine = append(mine, s)
		}
	}
	if len(mine) == 0 {
		t.Fatalf("w3 owns no new task of the %d moved symbols (owners %v)", len(moved), owners)
	}
	cur := newSwitchingProducer(b.Addrs, 8)
	var nm []kafka.Message
	t1 := time.Now().UnixMilli()
	for i, s := range mine {
		id := fmt.Sprintf("fresh-%d", i)
		v := fields.AppendNotification(nil, &record.Notification{ID: id, User: "u", Symbol: s, Text: "t"})
		nm = append(nm, kafka.Message{Key: []byte(s), Time: time.UnixMilli(t1 + int64(i)), Value: v})
		wl.AddNotification(id, s, t1+int64(i), v)
	}
	if err := cur.write(ctx, b.Topics.Notifications, nm); err != nil {
		t.Fatal(err)
	}
	r := oracle.NewAlertReader(b.Client, b.Topics.Alerts, b.Partitions)
	rep, err := wl.WaitComplete(ctx, r, wl.Produced(), 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d moved symbols in w3's tasks: %v", len(mine), rep)
	if rep.Lost != 0 || rep.Wrong != 0 {
		t.Errorf("oracle: %v; examples: %q", rep, rep.Examples)
	}
	for _, v := range r.Values() {
		var a record.Alert
		if err := json.Unmarshal(v, &a); err != nil {
			t.Fatal(err)
		}
		if a.Worker != "w3" {
			t.Errorf("alert %s joined by %s, want w3 (the worker on the empty state dir)", v, a.Worker)
		}
	}
}
