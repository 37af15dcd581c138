package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/joiner-dev/joiner/copartition"
	"github.com/joiner-dev/joiner/internal/fielderr"
	"github.com/joiner-dev/joiner/record"
	"github.com/segmentio/kafka-go"
)

// ErrPartitionsConflict is returned (wrapped) when --partitions was given
// explicitly and the existing one of the co-partitioned topics has another
// count: the missing topic is not created.
var ErrPartitionsConflict = errors.New("partition count conflicts with an existing topic")

// PartitionCounts returns the partition count of each topic that exists;
// missing topics are absent from the map.
func PartitionCounts(ctx context.Context, c *kafka.Client, topics []string) (map[string]int, error) {
	res, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: topics})
	if err != nil {
		return nil, fielderr.Errorf("reading metadata of %s: %w (check {Brokers})", strings.Join(topics, ", "), err)
	}
	out := map[string]int{}
	for _, t := range res.Topics {
		if t.Error != nil {
			if errors.Is(t.Error, kafka.UnknownTopicOrPartition) {
				continue
			}
			return nil, fmt.Errorf("metadata of topic %s: %w", t.Name, t.Error)
		}
		out[t.Name] = len(t.Partitions)
	}
	return out, nil
}

// EnsureTopics creates the missing topics of t, the co-partitioned ones
// (market, notifications) with the partition count they must share: that
// of the one that exists, or partitions when neither does. The alerts and
// dead-letter topics get the same count. When the count of an existing topic
// differs from partitions, the missing one follows the existing one and a
// WARN names both counts (slog.Default()). A market topic it creates is
// compacted, with MarketTopicConfigs of the default history retention
// (1h): it is the changelog the tasks' stores are restored from.
func EnsureTopics(ctx context.Context, c *kafka.Client, t record.Topics, partitions, replication int) error {
	return ensureTopics(ctx, c, t, partitions, replication, false, time.Hour, slog.Default())
}

// ensureTopics is EnsureTopics for a history retention of history (the
// market topic's MarketTopicConfigs); with explicit (the user gave
// --partitions), it refuses to create a co-partitioned topic whose pair
// exists with another count instead of following it.
func ensureTopics(ctx context.Context, c *kafka.Client, t record.Topics, partitions, replication int, explicit bool, history time.Duration, log *slog.Logger) error {
	t = t.WithDefaults()
	counts, err := PartitionCounts(ctx, c, t.All())
	if err != nil {
		return err
	}
	n := partitions
	existing := ""
	if v, ok := counts[t.Market]; ok {
		n, existing = v, t.Market
	} else if v, ok := counts[t.Notifications]; ok {
		n, existing = v, t.Notifications
	}
	if n < 1 {
		return fielderr.Errorf("cannot create topics with %d partitions; give {Partitions} 1 or more", n)
	}
	_, hasM := counts[t.Market]
	_, hasN := counts[t.Notifications]
	if existing != "" && hasM != hasN && n != partitions {
		missing := t.Notifications
		if !hasM {
			missing = t.Market
		}
		if explicit {
			return fielderr.Errorf("%w: {Partitions} is %d but %s already has %d partitions, so %s must have %d too; give {Partitions} %d or leave it out",
				ErrPartitionsConflict, partitions, existing, n, missing, n, n)
		}
		log.Warn("creating a topic with the partition count of its existing pair, not --partitions",
			"topic", missing, "partitions", n, "pair", existing, "pair_partitions", n, "flag_partitions", partitions)
	}
	var create []kafka.TopicConfig
	for _, name := range t.All() {
		if _, ok := counts[name]; !ok {
			tc := kafka.TopicConfig{Topic: name, NumPartitions: n, ReplicationFactor: replication}
			if name == t.Market {
				tc.ConfigEntries = MarketTopicConfigs(history)
			}
			create = append(create, tc)
		}
	}
	if len(create) == 0 {
		return nil
	}
	res, err := c.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: create})
	if err != nil {
		return fmt.Errorf("creating topics: %w", err)
	}
	for name, err := range res.Errors {
		if err != nil && !errors.Is(err, kafka.TopicAlreadyExists) {
			return fmt.Errorf("creating topic %s with %d partitions: %w", name, n, err)
		}
	}
	return nil
}

// CheckCopartitioned returns the shared partition count of the market and
// notifications topics, or an error naming each topic and its count.
func CheckCopartitioned(ctx context.Context, c *kafka.Client, t record.Topics) (int, error) {
	t = t.WithDefaults()
	counts, err := PartitionCounts(ctx, c, []string{t.Market, t.Notifications})
	if err != nil {
		return 0, err
	}
	for _, name := range []string{t.Market, t.Notifications} {
		if _, ok := counts[name]; !ok {
			return 0, fielderr.Errorf("topic %s does not exist; create it with as many partitions as the other, or start with {CreateTopics}", name)
		}
	}
	n, err := copartition.Partitions(counts)
	if err != nil {
		return 0, fmt.Errorf("%w; recreate or repartition the topics so that they have equal counts", err)
	}
	return n, nil
}
