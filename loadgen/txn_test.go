package loadgen

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/fetch"
	"github.com/joiner-dev/joiner/record"
	"github.com/joiner-dev/joiner/testsupport/testkit/realkafka"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// readTopic reads every partition of topic to its end with package fetch,
// read_committed or not, and returns the values.
func readTopic(t *testing.T, c *kafka.Client, topic string, partitions int, iso kafka.IsolationLevel) [][]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out [][]byte
	for part := range partitions {
		end, err := fetch.ListOffset(ctx, c, topic, part, kafka.LastOffset)
		if err != nil {
			t.Fatal(err)
		}
		for next := int64(0); next < end; {
			req := fetch.Request(topic, part, next, 50*time.Millisecond, fetch.MaxBytes)
			req.IsolationLevel = iso
			res, err := fetch.Isolated(ctx, c, req)
			if err != nil || res.Error != nil {
				t.Fatal(err, res.Error)
			}
			var recs []fetch.Record
			if recs, next, err = fetch.Committed(res.Records, res.Aborted, next, nil); err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				out = append(out, r.Value)
			}
			if ctx.Err() != nil {
				t.Fatalf("%s-%d: stuck at %d of %d", topic, part, next, end)
			}
		}
	}
	return out
}

// waitStable waits until every partition of topic has its markers
// written (the last stable offset is the end): a real Kafka writes them
// after EndTxn returned.
func waitStable(t *testing.T, c *kafka.Client, topic string, partitions int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for part := 0; part < partitions; {
		req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: {{Partition: part, Timestamp: kafka.LastOffset}}}}
		all, err := c.ListOffsets(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		req.IsolationLevel = kafka.ReadCommitted
		stable, err := c.ListOffsets(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if all.Topics[topic][0].LastOffset == stable.Topics[topic][0].LastOffset || time.Now().After(deadline) {
			part++
			continue
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A transactional run with AbortEvery: a read_committed reader sees the
// run's ticks (none at DecoyPrice) and exactly its notifications (none a
// decoy); the decoys are in the log, aborted, as many as the summary says.
func TestRunTransactionalAbortEvery(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "market", "notifications"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	testRunTransactional(t, c.ListenAddrs(), "market", "notifications")
}

func TestRunTransactionalAbortEveryRealBroker(t *testing.T) {
	addrs := realkafka.Brokers(t)
	client := &kafka.Client{Addr: kafka.TCP(addrs...), Timeout: 30 * time.Second}
	prefix := fmt.Sprintf("loadgen-txn-%d", time.Now().UnixNano())
	market, notes := prefix+"-market", prefix+"-notifications"
	res, err := client.CreateTopics(context.Background(), &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{
		{Topic: market, NumPartitions: 3, ReplicationFactor: 1}, {Topic: notes, NumPartitions: 3, ReplicationFactor: 1},
	}})
	if err == nil {
		err = errors.Join(res.Errors[market], res.Errors[notes])
	}
	if err != nil {
		t.Fatal(err)
	}
	testRunTransactional(t, addrs, market, notes)
}

func testRunTransactional(t *testing.T, addrs []string, market, notifications string) {
	const P = 3
	var progress strings.Builder
	// Rate 400: chunks of 20 records, 4 transactions, every 2nd preceded
	// by an aborted one.
	sum, err := Run(context.Background(), Config{
		Brokers: addrs, MarketTopic: market, NotificationsTopic: notifications, Symbols: 5, TicksPerSymbol: 8, NotificationsPerSymbol: 8, Rate: 400,
		Transactional: true, AbortEvery: 2, RunID: "t", Progress: &progress,
	})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Ticks != 40 || sum.Notifications != 40 || sum.Transactions != 4 || sum.AbortedTicks != 20 || sum.AbortedNotifications != 20 {
		t.Fatalf("summary = %+v", sum)
	}
	if !strings.Contains(progress.String(), "loadgen: 4 transactions committed; aborted: 20 ticks, 20 notifications") {
		t.Errorf("no transaction line in %q", progress.String())
	}
	client := &kafka.Client{Addr: kafka.TCP(addrs...), Timeout: 10 * time.Second}
	waitStable(t, client, market, P)
	waitStable(t, client, notifications, P)

	last := map[string]float64{}
	ticks := readTopic(t, client, market, P, kafka.ReadCommitted)
	for _, v := range ticks {
		tk, err := record.DecodeTick(v, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if tk.Price == DecoyPrice {
			t.Errorf("read_committed sees an aborted tick %s", v)
		}
		last[tk.Symbol] = tk.Price // one partition per symbol: in order
	}
	if len(ticks) != sum.Ticks {
		t.Errorf("read_committed sees %d ticks, want %d", len(ticks), sum.Ticks)
	}
	for s, p := range sum.LastPrice {
		if last[s] != p {
			t.Errorf("%s: last committed price %v, want %v", s, last[s], p)
		}
	}
	var ids []string
	for _, v := range readTopic(t, client, notifications, P, kafka.ReadCommitted) {
		n, err := record.DecodeNotification(v, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, n.ID)
	}
	slices.Sort(ids)
	want := slices.Sorted(slices.Values(sum.NotificationIDs))
	if !slices.Equal(ids, want) {
		t.Errorf("read_committed notification ids %q, want %q", ids, want)
	}
	// The decoys are there for a read_uncommitted reader.
	decoys := 0
	for _, v := range readTopic(t, client, market, P, kafka.ReadUncommitted) {
		if tk, _ := record.DecodeTick(v, 1<<20); tk.Price == DecoyPrice {
			decoys++
		}
	}
	for _, v := range readTopic(t, client, notifications, P, kafka.ReadUncommitted) {
		if n, _ := record.DecodeNotification(v, 1<<20); strings.HasPrefix(n.ID, DecoyIDPrefix) {
			decoys++
		}
	}
	if decoys != sum.AbortedTicks+sum.AbortedNotifications {
		t.Errorf("read_uncommitted sees %d decoys, want %d", decoys, sum.AbortedTicks+sum.AbortedNotifications)
	}
}
