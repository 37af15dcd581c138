package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
)

// createTopic creates topic with partitions partitions; appendTime sets
// message.timestamp.type=LogAppendTime, so that every record carries the
// time the broker appended it (the clock all figures are read from).
func (b *bench) createTopic(ctx context.Context, topic string, partitions int, appendTime bool) error {
	tc := kafka.TopicConfig{Topic: topic, NumPartitions: partitions, ReplicationFactor: 1}
	if appendTime {
		tc.ConfigEntries = []kafka.ConfigEntry{{ConfigName: "message.timestamp.type", ConfigValue: "LogAppendTime"}}
	}
	res, err := b.client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{tc}})
	if err != nil {
		return fmt.Errorf("creating topic %s: %w", topic, err)
	}
	if err := res.Errors[topic]; err != nil && !errors.Is(err, kafka.TopicAlreadyExists) {
		return fmt.Errorf("creating topic %s: %w", topic, err)
	}
	b.created = append(b.created, topic)
	// Wait until the topic has a leader for every partition.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err := b.endOffsets(ctx, topic, partitions); err == nil {
			return nil
		}
	}
	return fmt.Errorf("topic %s has no leaders 30s after its creation", topic)
}

// deleteTopics deletes topics (best effort: the run's figures are taken).
func (b *bench) deleteTopics(topics ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = b.client.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: topics})
}

// endOffsets returns the end offset of each partition of topic.
func (b *bench) endOffsets(ctx context.Context, topic string, partitions int) ([]int64, error) {
	req := make([]kafka.OffsetRequest, partitions)
	for p := range req {
		req[p] = kafka.LastOffsetOf(p)
	}
	res, err := b.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: req}})
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	out := make([]int64, partitions)
	got := 0
	for _, po := range res.Topics[topic] {
		if po.Error != nil {
			return nil, fmt.Errorf("end offset of %s-%d: %w", topic, po.Partition, po.Error)
		}
		if po.Partition >= 0 && po.Partition < partitions {
			out[po.Partition] = po.LastOffset
			got++
		}
	}
	if got != partitions {
		return nil, fmt.Errorf("end offsets of %s: %d of %d partitions answered", topic, got, partitions)
	}
	return out, nil
}

// waitRecords waits until topic holds at least n records (its partitions
// start at offset 0), polling the end offsets every 20ms.
func (b *bench) waitRecords(ctx context.Context, topic string, partitions int, n int64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var have int64
	for {
		if offs, err := b.endOffsets(ctx, topic, partitions); err == nil {
			have = 0
			for _, o := range offs {
				have += o
			}
			if have >= n {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s holds %d of %d records after %s", topic, have, n, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// readAll calls each for every record of topic up to the end offsets
// taken now. It reads with franz-go, not kafka-go: kafka-go ignores a
// batch's LogAppendTime and reports the producer's timestamps, while the
// figures need the broker's append times.
func (b *bench) readAll(ctx context.Context, topic string, partitions int, each func(p int, ts time.Time, value []byte)) error {
	ends, err := b.endOffsets(ctx, topic, partitions)
	if err != nil {
		return err
	}
	offsets := map[int32]kgo.Offset{}
	var want int64
	for p, end := range ends {
		if end > 0 {
			offsets[int32(p)] = kgo.NewOffset().AtStart()
			want += end
		}
	}
	if want == 0 {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(b.cfg.brokers, ",")...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}), kgo.FetchMaxBytes(64<<20))
	if err != nil {
		return fmt.Errorf("reading %s: %w", topic, err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var got int64
	for got < want {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("reading %s: %d of %d records: %w", topic, got, want, err)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) { ferr = fmt.Errorf("reading %s-%d: %w", t, p, err) })
		if ferr != nil {
			return ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset < ends[r.Partition] {
				each(int(r.Partition), r.Timestamp, r.Value)
				got++
			}
		})
	}
	return nil
}

// outputSpan is the first and last append time of the records of topic.
func (b *bench) outputSpan(ctx context.Context, topic string, partitions int) (first, last time.Time, n int64, err error) {
	err = b.readAll(ctx, topic, partitions, func(_ int, ts time.Time, _ []byte) {
		if first.IsZero() || ts.Before(first) {
			first = ts
		}
		if ts.After(last) {
			last = ts
		}
		n++
	})
	return first, last, n, err
}
