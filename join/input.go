package join

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	retry "github.com/joiner-dev/joiner/internal/backoff"
	"github.com/segmentio/kafka-go"
)

// Fetcher reads the input topics: *kafka.Client, or a fake in tests.
type Fetcher interface {
	Fetch(ctx context.Context, req *kafka.FetchRequest) (*kafka.FetchResponse, error)
	ListOffsets(ctx context.Context, req *kafka.ListOffsetsRequest) (*kafka.ListOffsetsResponse, error)
}

// Writer writes alerts and dead letters, each message naming its topic:
// *kafka.Writer (with an empty Topic), or a fake in tests.
type Writer interface {
	WriteMessages(ctx context.Context, msgs ...kafka.Message) error
}

// fetchedRecord is one fetched record, copied out of kafka-go's response buffers.
type fetchedRecord struct {
	Offset int64
	Time   time.Time
	Key    []byte
	Value  []byte
}

// partitionReader reads one topic-partition in order with kafka-go's
// Client.Fetch. It is owned by one goroutine and is not safe for concurrent
// use.
type partitionReader struct {
	client    Fetcher
	topic     string
	partition int
	// next is the offset of the next record to read; negative until
	// resolved to the partition's first offset.
	next int64
	// hwm is the high watermark from the last successful fetch.
	hwm      int64
	maxWait  time.Duration
	maxBytes int64
}

func newPartitionReader(c Fetcher, topic string, partition int, next int64, maxWait time.Duration) *partitionReader {
	return &partitionReader{client: c, topic: topic, partition: partition, next: next, hwm: -1, maxWait: maxWait, maxBytes: 4 << 20}
}

// bounds returns the partition's first offset and its current end (the
// offset the next produced record will get).
func (r *partitionReader) bounds(ctx context.Context) (first, end int64, err error) {
	if first, err = listOffset(ctx, r.client, r.topic, r.partition, kafka.FirstOffset); err != nil {
		return 0, 0, err
	}
	if end, err = listOffset(ctx, r.client, r.topic, r.partition, kafka.LastOffset); err != nil {
		return 0, 0, err
	}
	return first, end, nil
}

func listOffset(ctx context.Context, c Fetcher, topic string, partition int, which int64) (int64, error) {
	res, err := c.ListOffsets(ctx, &kafka.ListOffsetsRequest{
		Topics: map[string][]kafka.OffsetRequest{topic: {{Partition: partition, Timestamp: which}}},
	})
	if err != nil {
		return 0, fmt.Errorf("list offsets of %s-%d: %w", topic, partition, err)
	}
	for _, p := range res.Topics[topic] {
		if p.Partition != partition {
			continue
		}
		if p.Error != nil {
			return 0, fmt.Errorf("list offsets of %s-%d: %w", topic, partition, p.Error)
		}
		if which == kafka.FirstOffset {
			return p.FirstOffset, nil
		}
		return p.LastOffset, nil
	}
	return 0, fmt.Errorf("list offsets of %s-%d: partition missing from the response", topic, partition)
}

// fetch returns the records at or after r.next available now, waiting up
// to maxWait for some to arrive; it may return none. It advances r.next
// past the returned records and updates r.hwm.
func (r *partitionReader) fetch(ctx context.Context) ([]fetchedRecord, error) {
	if r.next < 0 {
		first, err := listOffset(ctx, r.client, r.topic, r.partition, kafka.FirstOffset)
		if err != nil {
			return nil, err
		}
		r.next = first
	}
	res, err := r.client.Fetch(ctx, &kafka.FetchRequest{
		Topic:     r.topic,
		Partition: r.partition,
		Offset:    r.next,
		MinBytes:  1,
		MaxBytes:  r.maxBytes,
		MaxWait:   r.maxWait,
	})
	if err != nil {
		return nil, fmt.Errorf("fetch %s-%d at offset %d: %w", r.topic, r.partition, r.next, err)
	}
	if res.Error != nil {
		if errors.Is(res.Error, kafka.OffsetOutOfRange) {
			// The log no longer holds our offset (retention deleted it,
			// or the topic was recreated): go on from what it holds.
			first, ferr := listOffset(ctx, r.client, r.topic, r.partition, kafka.FirstOffset)
			if ferr != nil {
				return nil, ferr
			}
			reportOffsetReset(r.client, r.topic, r.partition, r.next, first) // input_offsetreset.go
			r.next = first
			return nil, nil
		}
		return nil, fmt.Errorf("fetch %s-%d at offset %d: %w", r.topic, r.partition, r.next, res.Error)
	}
	r.hwm = res.HighWatermark
	var out []fetchedRecord
	for {
		rec, err := res.Records.ReadRecord()
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return out, fmt.Errorf("read records of %s-%d at offset %d: %w", r.topic, r.partition, r.next, err)
		}
		if rec.Offset < r.next {
			continue
		}
		v, err := readBytes(rec.Value)
		if err != nil {
			return out, fmt.Errorf("read record %s-%d@%d: %w", r.topic, r.partition, rec.Offset, err)
		}
		k, err := readBytes(rec.Key)
		if err != nil {
			return out, fmt.Errorf("read record %s-%d@%d: %w", r.topic, r.partition, rec.Offset, err)
		}
		out = append(out, fetchedRecord{Offset: rec.Offset, Time: rec.Time, Key: k, Value: v})
		r.next = rec.Offset + 1
	}
	return out, nil
}

func readBytes(b kafka.Bytes) ([]byte, error) {
	if b == nil {
		return nil, nil
	}
	defer b.Close()
	return kafka.ReadAll(b)
}

// backoff returns the delay before retry n (from 0): internal/backoff's
// default policy, 100ms doubling to 5s, jittered.
func backoff(n int) time.Duration { return retry.Default.Delay(n) }

// sleep waits for d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error { return retry.Sleep(ctx, d) }
