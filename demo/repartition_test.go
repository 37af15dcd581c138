package demo_test

import (
	"context"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/demo"
	"github.com/joiner-dev/joiner/testsupport/oracle"
	"github.com/segmentio/kafka-go"
)

// TestBothTopicsGrowUnderLoad (issue 19, item 5): both input topics go
// from 6 to 8 partitions while the load flows. Most symbols then belong to
// another task, whose store lacks their history from before the change
// (it is in the store of the task that held them). Every alert must carry
// the exact as-of price all the same: a moved symbol's lookup also
// consults the task that held it under the old count.
func TestBothTopicsGrowUnderLoad(t *testing.T) {
	f, topics := oracleFleet(t)
	b := f.Broker
	// Sparse ticks, so that many symbols' last price before the change is
	// what their notifications after it must get.
	cfg := oracle.Config{Rounds: 240, Symbols: 80, TicksPerRound: 4, NotificationsPerRound: 40, RoundInterval: 50 * time.Millisecond}
	p := oracle.NewProducer(b.Addrs, nil, topics, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	produced := make(chan error, 1)
	go func() { produced <- p.Run(ctx) }()
	for p.Rounds() < cfg.Rounds/4 {
		time.Sleep(10 * time.Millisecond)
	}
	growBoth(ctx, t, b, 8)
	t.Logf("both topics grown to 8 partitions after round %d", p.Rounds())
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	checkExact(ctx, t, b, p.Workload(), 60*time.Second)
	owned := map[int]bool{}
	for p := range f.Owners() {
		owned[p] = true
	}
	if len(owned) != 8 {
		t.Errorf("tasks owned after the change: %v, want 8", f.Owners())
	}
}

// growBoth gives both input topics of b count partitions.
func growBoth(ctx context.Context, t *testing.T, b *demo.Broker, count int32) {
	t.Helper()
	resp, err := b.Client.CreatePartitions(ctx, &kafka.CreatePartitionsRequest{Topics: []kafka.TopicPartitionsConfig{
		{Name: b.Topics.Market, Count: count}, {Name: b.Topics.Notifications, Count: count},
	}})
	if err == nil {
		err = resp.Errors[b.Topics.Market]
		if err == nil {
			err = resp.Errors[b.Topics.Notifications]
		}
	}
	if err != nil {
		t.Fatal(err)
	}
}
