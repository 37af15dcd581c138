package node

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
)

// The market topic is the changelog of every task's store: a task with an
// empty state dir is rebuilt from the partition's first offset. What it
// must hold is what Kafka Streams keeps of a KTable's changelog: the newest
// record of every key (symbol), so a quiet symbol keeps its price however
// long ago it ticked, and every record of the retained window.
// cleanup.policy=compact with min.compaction.lag.ms ≥ --history-retention
// does both, and a restore reads about one record per symbol plus the
// window.

// Topic configs of the market topic that decide what a restore finds.
const (
	cfgCleanupPolicy   = "cleanup.policy"
	cfgRetentionMs     = "retention.ms"
	cfgRetentionBytes  = "retention.bytes"
	cfgMinCompactLagMs = "min.compaction.lag.ms"
)

// MarketTopicConfigs are the configs --create-topics gives the market
// topic for a history retention of history: compacted, records kept
// uncompacted for twice the retention (the retention itself, and as much
// again for notifications that lag behind the market; see
// MarketRetention.Check).
func MarketTopicConfigs(history time.Duration) []kafka.ConfigEntry {
	return []kafka.ConfigEntry{
		{ConfigName: cfgCleanupPolicy, ConfigValue: "compact"},
		{ConfigName: cfgMinCompactLagMs, ConfigValue: strconv.FormatInt(2*history.Milliseconds(), 10)},
	}
}

// MarketRetention is what the market topic's configs say about which of
// its records stay.
type MarketRetention struct {
	CleanupPolicy      string // "delete", "compact" or "compact,delete"
	RetentionMs        int64  // -1: unlimited
	RetentionBytes     int64  // -1: unlimited
	MinCompactionLagMs int64
}

// Check says whether a restore from the topic's first offset can miss a
// price a task with a history retention of history needs, and why (reason
// is also set, with unsafe false, when the topic is safe but restores read
// all of it).
//
// The rule:
//   - cleanup.policy with delete and a finite retention.ms or
//     retention.bytes is unsafe: deleting the oldest segments deletes the
//     only price of a symbol that has not ticked since (and, with compact,
//     delete, the newest record of a key too).
//   - compact with min.compaction.lag.ms < history is unsafe: the cleaner
//     may drop a version that a notification within the retention still
//     joins. Kafka drops a record only once a newer record of its symbol
//     is itself older than min.compaction.lag.ms, so with a lag L ≥ history
//     every version a notification at most history older than the newest
//     market record can need is kept; notifications that lag behind the
//     market by d need L ≥ history + d, which is why --create-topics uses
//     twice the retention.
//   - delete with unlimited retention is safe, but a restore reads the
//     whole topic, for ever longer.
//   - a policy that is neither delete nor compact is unsafe (unknown).
func (r MarketRetention) Check(history time.Duration) (unsafe bool, reason string) {
	var del, compact bool
	for _, p := range strings.Split(r.CleanupPolicy, ",") {
		switch strings.TrimSpace(p) {
		case "delete":
			del = true
		case "compact":
			compact = true
		}
	}
	switch {
	case !del && !compact:
		return true, fmt.Sprintf("cleanup.policy %q is neither delete nor compact", r.CleanupPolicy)
	case del && r.RetentionMs >= 0:
		return true, fmt.Sprintf("cleanup.policy %s with retention.ms %d deletes the price of a symbol quiet for longer than %s",
			r.CleanupPolicy, r.RetentionMs, time.Duration(r.RetentionMs)*time.Millisecond)
	case del && r.RetentionBytes >= 0:
		return true, fmt.Sprintf("cleanup.policy %s with retention.bytes %d deletes the oldest segments, with the price of symbols quiet since",
			r.CleanupPolicy, r.RetentionBytes)
	case compact && r.MinCompactionLagMs < history.Milliseconds():
		return true, fmt.Sprintf("min.compaction.lag.ms %d is below --history-retention %s: compaction can drop versions within the retention",
			r.MinCompactionLagMs, history)
	case !compact:
		return false, "cleanup.policy delete with unlimited retention: a restore reads the whole topic"
	}
	return false, ""
}

// describeMarketRetention reads the retention configs of topic.
func describeMarketRetention(ctx context.Context, c *kafka.Client, topic string) (MarketRetention, error) {
	res, err := c.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{{
		ResourceType: kafka.ResourceTypeTopic,
		ResourceName: topic,
		ConfigNames:  []string{cfgCleanupPolicy, cfgRetentionMs, cfgRetentionBytes, cfgMinCompactLagMs},
	}}})
	if err != nil {
		return MarketRetention{}, err
	}
	if len(res.Resources) != 1 {
		return MarketRetention{}, fmt.Errorf("%d resources in the answer, want 1", len(res.Resources))
	}
	rs := res.Resources[0]
	if rs.Error != nil {
		return MarketRetention{}, rs.Error
	}
	// Kafka's defaults, for an answer that leaves one out.
	r := MarketRetention{CleanupPolicy: "delete", RetentionMs: 7 * 24 * 3600 * 1000, RetentionBytes: -1}
	seen := map[string]bool{}
	for _, e := range rs.ConfigEntries {
		seen[e.ConfigName] = true
		var dst *int64
		switch e.ConfigName {
		case cfgCleanupPolicy:
			r.CleanupPolicy = e.ConfigValue
			continue
		case cfgRetentionMs:
			dst = &r.RetentionMs
		case cfgRetentionBytes:
			dst = &r.RetentionBytes
		case cfgMinCompactLagMs:
			dst = &r.MinCompactionLagMs
		default:
			continue
		}
		v, err := strconv.ParseInt(e.ConfigValue, 10, 64)
		if err != nil {
			return MarketRetention{}, fmt.Errorf("%s = %q: %w", e.ConfigName, e.ConfigValue, err)
		}
		*dst = v
	}
	if !seen[cfgCleanupPolicy] {
		return MarketRetention{}, fmt.Errorf("the answer has no %s", cfgCleanupPolicy)
	}
	return r, nil
}

// checkMarketRetention reads the market topic's configs and warns, and sets
// gauge to 1, when a restore from it could miss a price (see
// MarketRetention.Check). A broker that cannot describe the topic's
// configs (an embedded one, missing ACLs) is logged at Debug and the gauge
// stays 0.
func checkMarketRetention(ctx context.Context, c *kafka.Client, topic string, history time.Duration, gauge prometheus.Gauge, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	r, err := describeMarketRetention(ctx, c, topic)
	if err != nil {
		log.Debug("cannot read the market topic's configs; not checking its retention", "topic", topic, "err", err)
		return
	}
	unsafe, reason := r.Check(history)
	attrs := []any{"topic", topic, "cleanup_policy", r.CleanupPolicy, "retention_ms", r.RetentionMs,
		"retention_bytes", r.RetentionBytes, "min_compaction_lag_ms", r.MinCompactionLagMs, "history_retention", history}
	switch {
	case unsafe:
		gauge.Set(1)
		log.Warn("the market topic's retention can lose prices a task restored from it needs; set cleanup.policy=compact and min.compaction.lag.ms of at least twice --history-retention on it",
			append(attrs, "reason", reason)...)
	case reason != "":
		log.Info("the market topic keeps every record; consider cleanup.policy=compact", append(attrs, "reason", reason)...)
	default:
		log.Debug("the market topic's retention keeps what restores need", attrs...)
	}
}

// newRetentionGauge registers joiner_market_retention_unsafe on reg.
func newRetentionGauge(reg prometheus.Registerer) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "joiner_market_retention_unsafe",
		Help: "1 when the market topic's configs, read at start, let a restore from it miss a price (delete with a finite retention, or compact with min.compaction.lag.ms below --history-retention); 0 otherwise or when they could not be read.",
	})
	reg.MustRegister(g)
	return g
}
