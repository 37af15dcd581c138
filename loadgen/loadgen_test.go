package loadgen

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/murmur2"
	"github.com/joiner-dev/joiner/record"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Every record lands in its symbol's murmur2 partition, and every tick is
// produced (has a lower timestamp and was acknowledged) before the first
// notification.
func TestRunPartitionsBySymbolAndTicksFirst(t *testing.T) {
	const P = 4
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(P, "market", "notifications"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var progress bytes.Buffer
	sum, err := Run(context.Background(), Config{
		Brokers: c.ListenAddrs(), Symbols: 15, TicksPerSymbol: 3, NotificationsPerSymbol: 2, Malformed: 2, Progress: &progress,
	})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Ticks != 45 || sum.Notifications != 30 || sum.Malformed != 2 || len(sum.NotificationIDs) != 30 || len(sum.LastPrice) != 15 {
		t.Fatalf("summary = %+v", sum)
	}
	if !strings.Contains(progress.String(), "loadgen: done: 45 ticks, 30 notifications, 2 malformed") {
		t.Errorf("no summary line in %q", progress.String())
	}
	client := &kafka.Client{Addr: kafka.TCP(c.ListenAddrs()...), Timeout: 5 * time.Second}
	var lastTick, firstNote time.Time
	count := map[string]int{}
	for _, topic := range []string{"market", "notifications"} {
		for p := range P {
			readPartition(t, client, topic, p, func(rec *kafka.Record) {
				key, _ := kafka.ReadAll(rec.Key)
				if got := murmur2.Partition(key, P); got != p {
					t.Errorf("%s: key %q in partition %d, murmur2 says %d", topic, key, p, got)
				}
				count[topic]++
				if topic == "market" && rec.Time.After(lastTick) {
					lastTick = rec.Time
				}
				if topic == "notifications" && (firstNote.IsZero() || rec.Time.Before(firstNote)) {
					firstNote = rec.Time
				}
			})
		}
	}
	if count["market"] != 45 || count["notifications"] != 32 {
		t.Errorf("read %v, want 45 ticks and 32 notifications", count)
	}
	if firstNote.Before(lastTick) {
		t.Errorf("a notification (%v) is older than the last tick (%v)", firstNote, lastTick)
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	for _, cfg := range []Config{
		{Brokers: []string{"x:1"}, Symbols: -1},
		{Brokers: []string{"x:1"}, Rate: -5},
		{Symbols: 1, TicksPerSymbol: 1},
	} {
		if _, err := Run(context.Background(), cfg); err == nil {
			t.Errorf("Run(%+v) accepted a bad config", cfg)
		}
	}
}

func TestRatePacesTheRun(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "market", "notifications"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	sum, err := Run(context.Background(), Config{Brokers: c.ListenAddrs(), Symbols: 10, TicksPerSymbol: 2, NotificationsPerSymbol: 2, Rate: 100})
	if err != nil {
		t.Fatal(err)
	}
	// 40 records at 100/s take about 0.4 s.
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Errorf("%d records at 100/s took %s", sum.Records(), el)
	}
}

// LastPrices and NotificationOf describe what Run produces (scripts/bench
// sizes its alert-sized pass-through from them): the last tick of every
// symbol and every notification's value, byte for byte.
func TestLastPricesAndNotificationOfMatchRun(t *testing.T) {
	const P = 3
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(P, "market", "notifications"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const symbols, ticks, notes = 12, 4, 3
	sum, err := Run(context.Background(), Config{Brokers: c.ListenAddrs(), Symbols: symbols, TicksPerSymbol: ticks, NotificationsPerSymbol: notes, RunID: "r7"})
	if err != nil {
		t.Fatal(err)
	}
	syms := Symbols(symbols)
	last := LastPrices(symbols, ticks, 0)
	if len(last) != symbols {
		t.Fatalf("LastPrices: %d prices; want %d", len(last), symbols)
	}
	for i, s := range syms {
		if last[i] != sum.LastPrice[s] {
			t.Errorf("LastPrices[%d] (%s) = %v; Run's last price is %v", i, s, last[i], sum.LastPrice[s])
		}
	}
	if LastPrices(symbols, 0, 0) != nil {
		t.Errorf("LastPrices with no ticks is not nil")
	}
	client := &kafka.Client{Addr: kafka.TCP(c.ListenAddrs()...), Timeout: 5 * time.Second}
	got := map[string]int{}
	for p := range P {
		readPartition(t, client, "notifications", p, func(rec *kafka.Record) {
			v, _ := kafka.ReadAll(rec.Value)
			got[string(v)]++
		})
	}
	if len(got) != symbols*notes {
		t.Fatalf("%d distinct notifications read; want %d", len(got), symbols*notes)
	}
	for i := range syms {
		for k := range notes {
			n := NotificationOf("r7", syms, i, k)
			if v := record.AppendNotification(nil, &n); got[string(v)] != 1 {
				t.Errorf("NotificationOf(r7, %d, %d) = %s: produced %d times; want once", i, k, v, got[string(v)])
			}
		}
	}
}

// readPartition calls fn with each record of partition p of topic, from
// its first offset (up to 1 MiB).
func readPartition(t *testing.T, client *kafka.Client, topic string, p int, fn func(*kafka.Record)) {
	t.Helper()
	res, err := client.Fetch(context.Background(), &kafka.FetchRequest{Topic: topic, Partition: p, Offset: 0, MaxBytes: 1 << 20, MaxWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for {
		rec, err := res.Records.ReadRecord()
		if err != nil {
			return
		}
		fn(rec)
	}
}
