package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/record"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

func startBroker(t *testing.T, opts ...kfake.Opt) *kafka.Client {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return &kafka.Client{Addr: kafka.TCP(c.ListenAddrs()...), Timeout: 10 * time.Second}
}

func TestRefusesTopicsNotCopartitioned(t *testing.T) {
	client := startBroker(t, kfake.SeedTopics(6, "market"), kfake.SeedTopics(8, "notifications"))
	_, err := CheckCopartitioned(context.Background(), client, record.Topics{})
	if err == nil {
		t.Fatal("CheckCopartitioned accepted 6 vs 8 partitions")
	}
	for _, want := range []string{"market has 6", "notifications has 8", "6..7"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// New refuses to start on them too, before opening anything.
	_, err = New(context.Background(), Config{
		Brokers:      []string{client.Addr.String()},
		StoreOptions: StoreOptions{Dirs: []string{t.TempDir()}},
		HTTPAddr:     "127.0.0.1:0",
	})
	if err == nil || !strings.Contains(err.Error(), "not co-partitioned") {
		t.Errorf("New = %v, want a co-partitioning error", err)
	}
}

func TestMissingTopicsNeedCreateTopics(t *testing.T) {
	client := startBroker(t)
	ctx := context.Background()
	_, err := CheckCopartitioned(ctx, client, record.Topics{})
	if err == nil || !strings.Contains(err.Error(), "start with CreateTopics") {
		t.Fatalf("CheckCopartitioned on missing topics = %v, want advice to set CreateTopics", err)
	}
	if err := EnsureTopics(ctx, client, record.Topics{}, 4, 1); err != nil {
		t.Fatal(err)
	}
	n, err := CheckCopartitioned(ctx, client, record.Topics{})
	if err != nil || n != 4 {
		t.Fatalf("after EnsureTopics: %d partitions, %v; want 4", n, err)
	}
	counts, err := PartitionCounts(ctx, client, []string{"market", "notifications", "alerts", "joiner-dead-letters"})
	if err != nil {
		t.Fatal(err)
	}
	for topic, c := range counts {
		if c != 4 {
			t.Errorf("%s has %d partitions, want 4", topic, c)
		}
	}
	if len(counts) != 4 {
		t.Errorf("created %v, want all four topics", counts)
	}
}

func TestEnsureTopicsFollowsExistingCount(t *testing.T) {
	client := startBroker(t, kfake.SeedTopics(3, "market"))
	ctx := context.Background()
	if err := EnsureTopics(ctx, client, record.Topics{}, 12, 1); err != nil {
		t.Fatal(err)
	}
	n, err := CheckCopartitioned(ctx, client, record.Topics{})
	if err != nil || n != 3 {
		t.Fatalf("notifications created with %d partitions (%v); want market's 3", n, err)
	}
}

// Two workers of one group on one state dir: the second fails at start,
// naming the first one's instance id.
func TestSecondWorkerOnStateDirRefused(t *testing.T) {
	client := startBroker(t, kfake.SeedTopics(2, "market", "notifications"))
	dir := t.TempDir()
	cfg := Config{Brokers: []string{client.Addr.String()}, HTTPAddr: "127.0.0.1:0", StoreOptions: StoreOptions{Dirs: []string{dir}, CacheBytes: 1 << 20}}
	cfg.InstanceID = "worker-1"
	first, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	cfg.InstanceID = "worker-2"
	_, err = New(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "instance=worker-1") {
		t.Fatalf("second worker on the same state dir: err = %v, want one naming worker-1", err)
	}
	cfg.Group = "another-group"
	other, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("another group on the same state dir: %v", err)
	}
	other.Close()
}
