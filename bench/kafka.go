package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	return b.listOffsets(ctx, topic, partitions, kafka.ReadUncommitted)
}

// stableOffsets returns the last stable offset of each partition of topic:
// every record below it is committed, aborted or not transactional, so a
// read_committed read up to it ends.
func (b *bench) stableOffsets(ctx context.Context, topic string, partitions int) ([]int64, error) {
	return b.listOffsets(ctx, topic, partitions, kafka.ReadCommitted)
}

func (b *bench) listOffsets(ctx context.Context, topic string, partitions int, iso kafka.IsolationLevel) ([]int64, error) {
	req := make([]kafka.OffsetRequest, partitions)
	for p := range req {
		req[p] = kafka.LastOffsetOf(p)
	}
	res, err := b.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: req}, IsolationLevel: iso})
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

// waitRecords waits until topic holds at least n data records read
// read_committed: committed or not transactional, transaction markers and
// aborted records not counted. So it is right for both guarantees: an
// exactly-once writer's end offsets also count one marker per partition
// and transaction. It polls the end offsets every 20ms until they sum to
// n (cheap, and never later than the data, since the end offsets count
// every data record), then counts the records from where the last count
// ended until the count reaches n. The count is the one read of the
// output while a contestant runs: at-least-once output holds n data
// records when its end offsets do, so the count runs after the drain;
// exactly-once output reaches it only markers' worth of records earlier.
func (b *bench) waitRecords(ctx context.Context, topic string, partitions int, n int64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var have int64
	cnt := &committedCounter{next: make([]int64, partitions)}
	for {
		if have < n {
			if offs, err := b.endOffsets(ctx, topic, partitions); err == nil {
				have = 0
				for _, o := range offs {
					have += o
				}
			}
		}
		if have >= n {
			if err := b.countCommitted(ctx, topic, cnt); err != nil {
				return err
			}
			if cnt.n >= n {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s holds %d of %d data records read read_committed (end offsets sum to %d, markers included) after %s", topic, cnt.n, n, have, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// committedCounter is a count of a topic's data records read
// read_committed, and where in each partition it stopped.
type committedCounter struct {
	next []int64 // per partition, the offset after the last one counted
	n    int64
}

// countCommitted adds to c the data records of topic from c's offsets up
// to the last stable offsets taken now.
func (b *bench) countCommitted(ctx context.Context, topic string, c *committedCounter) error {
	ends, err := b.stableOffsets(ctx, topic, len(c.next))
	if err != nil {
		return err
	}
	next, err := b.readRange(ctx, topic, c.next, ends, func(int, time.Time, []byte) { c.n++ }, nil)
	if err != nil {
		return err
	}
	c.next = next
	return nil
}

// readAll calls each for every data record of topic up to the last stable
// offsets taken now, read read_committed (see readRange).
func (b *bench) readAll(ctx context.Context, topic string, partitions int, each func(p int, ts time.Time, value []byte)) error {
	return b.readAllMarked(ctx, topic, partitions, each, nil)
}

// readAllMarked is readAll that also calls committed with the append time
// of every commit marker (a transaction's end in partition p: the data
// records of p passed since the last marker became visible then).
func (b *bench) readAllMarked(ctx context.Context, topic string, partitions int, each func(p int, ts time.Time, value []byte), committed func(p int, ts time.Time)) error {
	ends, err := b.stableOffsets(ctx, topic, partitions)
	if err != nil {
		return err
	}
	_, err = b.readRange(ctx, topic, make([]int64, partitions), ends, each, committed)
	return err
}

// readRange calls each for every data record of topic from offset from[p]
// to ends[p] of each partition p, read read_committed: committed or not
// transactional; transaction markers and aborted records are not passed.
// It returns, per partition, the offset after the last one read. It reads
// with franz-go, not kafka-go: kafka-go ignores a batch's LogAppendTime
// and reports the producer's timestamps, while the figures need the
// broker's append times. Control records are kept (and skipped here), so
// that a partition whose last records are a transaction's marker is seen
// to its end: a partition is read when a record at ends[p]-1 or later
// came.
func (b *bench) readRange(ctx context.Context, topic string, from, ends []int64, each func(p int, ts time.Time, value []byte), committed func(p int, ts time.Time)) ([]int64, error) {
	next := slices.Clone(from)
	offsets := map[int32]kgo.Offset{}
	for p, end := range ends {
		if end > next[p] {
			offsets[int32(p)] = kgo.NewOffset().At(next[p])
		}
	}
	if len(offsets) == 0 {
		return next, nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(b.cfg.brokers, ",")...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}), kgo.FetchMaxBytes(64<<20),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		return next, fmt.Errorf("reading %s: %w", topic, err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for open := len(offsets); open > 0; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return next, fmt.Errorf("reading %s read_committed: %d partitions not read to their stable offsets %v (at %v): %w", topic, open, ends, next, err)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) { ferr = fmt.Errorf("reading %s-%d: %w", t, p, err) })
		if ferr != nil {
			return next, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			p := int(r.Partition)
			if r.Offset < next[p] || next[p] >= ends[p] {
				return
			}
			switch {
			case r.Offset >= ends[p]:
			case !r.Attrs.IsControl():
				each(p, r.Timestamp, r.Value)
			case committed != nil && isCommitMarker(r.Key):
				committed(p, r.Timestamp)
			}
			next[p] = min(r.Offset+1, ends[p])
			if next[p] >= ends[p] {
				open--
			}
		})
	}
	return next, nil
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

// isCommitMarker reports whether a control record's key is a commit
// marker's: version int16, then type int16 (0 abort, 1 commit).
func isCommitMarker(key []byte) bool {
	return len(key) >= 4 && key[2] == 0 && key[3] == 1
}
