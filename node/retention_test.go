package node

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/record"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/segmentio/kafka-go"
)

// TestMarketRetentionCheck is the rule of when a restore from the market
// topic can miss a price, for a history retention of 1h.
func TestMarketRetentionCheck(t *testing.T) {
	const h = int64(3600 * 1000)
	for _, c := range []struct {
		name   string
		r      MarketRetention
		unsafe bool
		note   bool // safe, with a reason
	}{
		{"broker default: delete, 7 days", MarketRetention{"delete", 7 * 24 * h, -1, 0}, true, false},
		{"delete, unlimited time, finite size", MarketRetention{"delete", -1, 1 << 30, 0}, true, false},
		{"delete, unlimited", MarketRetention{"delete", -1, -1, 0}, false, true},
		{"compact, lag 0", MarketRetention{"compact", 7 * 24 * h, -1, 0}, true, false},
		{"compact, lag just below the retention", MarketRetention{"compact", -1, -1, h - 1}, true, false},
		{"compact, lag = the retention", MarketRetention{"compact", 7 * 24 * h, -1, h}, false, false},
		{"compact, lag twice the retention (--create-topics)", MarketRetention{"compact", -1, -1, 2 * h}, false, false},
		{"compact,delete with a finite retention.ms", MarketRetention{"compact,delete", 30 * 24 * h, -1, 2 * h}, true, false},
		{"compact,delete with a finite retention.bytes", MarketRetention{"compact, delete", -1, 1 << 40, 2 * h}, true, false},
		{"compact,delete unlimited, lag enough", MarketRetention{"delete,compact", -1, -1, 2 * h}, false, false},
		{"compact,delete unlimited, lag too short", MarketRetention{"compact,delete", -1, -1, h / 2}, true, false},
		{"unknown policy", MarketRetention{"shred", -1, -1, 2 * h}, true, false},
	} {
		unsafe, reason := c.r.Check(time.Hour)
		if unsafe != c.unsafe || (reason != "") != (c.unsafe || c.note) {
			t.Errorf("%s: %+v: Check = %v, %q; want unsafe %v (with a reason: %v)", c.name, c.r, unsafe, reason, c.unsafe, c.unsafe || c.note)
		}
	}
}

// TestCreateTopicsCompactsTheMarket: --create-topics creates the market
// topic compacted, with min.compaction.lag.ms twice the history retention,
// and the other topics with the broker's defaults; the start check finds
// it safe.
func TestCreateTopicsCompactsTheMarket(t *testing.T) {
	client := startBroker(t)
	ctx := context.Background()
	if err := ensureTopics(ctx, client, record.Topics{}, 3, 1, false, 10*time.Minute, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	topics := record.Topics{}.WithDefaults()
	r, err := describeMarketRetention(ctx, client, topics.Market)
	if err != nil {
		t.Fatal(err)
	}
	if r.CleanupPolicy != "compact" || r.MinCompactionLagMs != 20*60*1000 {
		t.Errorf("market topic created with %+v, want compact with min.compaction.lag.ms 1200000", r)
	}
	if unsafe, reason := r.Check(10 * time.Minute); unsafe {
		t.Errorf("the created market topic is unsafe: %s", reason)
	}
	n, err := describeMarketRetention(ctx, client, topics.Notifications)
	if err != nil {
		t.Fatal(err)
	}
	if n.CleanupPolicy == "compact" {
		t.Errorf("notifications topic created compacted: %+v", n)
	}
}

// TestMarketRetentionWarning: at start, a market topic with the broker's
// delete policy is warned about and sets joiner_market_retention_unsafe
// to 1; a compacted one with enough lag does neither; a topic whose
// configs cannot be read is logged at Debug only.
func TestMarketRetentionWarning(t *testing.T) {
	client := startBroker(t)
	ctx := context.Background()
	res, err := client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{
		{Topic: "timed", NumPartitions: 1, ReplicationFactor: 1, ConfigEntries: []kafka.ConfigEntry{{ConfigName: "retention.ms", ConfigValue: "86400000"}}},
		{Topic: "short-lag", NumPartitions: 1, ReplicationFactor: 1, ConfigEntries: []kafka.ConfigEntry{
			{ConfigName: "cleanup.policy", ConfigValue: "compact"}, {ConfigName: "min.compaction.lag.ms", ConfigValue: "60000"}}},
		{Topic: "changelog", NumPartitions: 1, ReplicationFactor: 1, ConfigEntries: MarketTopicConfigs(time.Hour)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for tp, err := range res.Errors {
		if err != nil {
			t.Fatalf("%s: %v", tp, err)
		}
	}
	for _, c := range []struct {
		topic  string
		gauge  float64
		level  string
		reason string
	}{
		{"timed", 1, "WARN", "retention.ms 86400000"},
		{"short-lag", 1, "WARN", "min.compaction.lag.ms 60000 is below --history-retention 1h0m0s"},
		{"changelog", 0, "DEBUG", "keeps what restores need"},
		{"absent", 0, "DEBUG", "cannot read the market topic's configs"},
	} {
		var logs bytes.Buffer
		log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		reg := prometheus.NewRegistry()
		g := newRetentionGauge(reg)
		checkMarketRetention(ctx, client, c.topic, time.Hour, g, log)
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		if got := mfs[0].GetMetric()[0].GetGauge().GetValue(); mfs[0].GetName() != "joiner_market_retention_unsafe" || got != c.gauge {
			t.Errorf("%s: joiner_market_retention_unsafe = %v, want %v", c.topic, got, c.gauge)
		}
		if out := logs.String(); !strings.Contains(out, "level="+c.level) || !strings.Contains(out, c.reason) {
			t.Errorf("%s: want a %s line with %q, logged:\n%s", c.topic, c.level, c.reason, out)
		}
		if c.topic == "timed" {
			problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range problems {
				t.Errorf("%s: %s", p.Metric, p.Text)
			}
		}
	}
}
