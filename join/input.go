package join

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/joiner-dev/joiner/fetch"
	retry "github.com/joiner-dev/joiner/internal/backoff"
	"github.com/segmentio/kafka-go"
)

// Fetcher reads the input topics: *kafka.Client, or a fake in tests.
type Fetcher interface {
	Fetch(ctx context.Context, req *kafka.FetchRequest) (*kafka.FetchResponse, error)
	ListOffsets(ctx context.Context, req *kafka.ListOffsetsRequest) (*kafka.ListOffsetsResponse, error)
}

// Writer writes alerts and dead letters, each message naming its topic:
// produce.Producer (what node gives it), a *kafka.Writer (with an empty
// Topic), or a fake in tests.
type Writer interface {
	WriteMessages(ctx context.Context, msgs ...kafka.Message) error
}

// fetchedRecord is one fetched record, copied out of kafka-go's response
// buffers (the read path is package fetch, shared with bench/passthrough).
type fetchedRecord = fetch.Record

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
	hwm     int64
	maxWait time.Duration
	// lastN is the number of records the last fetch returned: the
	// capacity the next one starts with.
	lastN int
	// maxBytes is the size limit of the last fetch (fetch.NextMaxBytes).
	maxBytes int
}

func newPartitionReader(c Fetcher, topic string, partition int, next int64, maxWait time.Duration) *partitionReader {
	return &partitionReader{client: c, topic: topic, partition: partition, next: next, hwm: -1, maxWait: maxWait}
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
	return fetch.ListOffset(ctx, c, topic, partition, which)
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
	r.maxBytes = fetch.NextMaxBytes(r.maxBytes)
	res, err := r.client.Fetch(ctx, fetch.Request(r.topic, r.partition, r.next, r.maxWait, r.maxBytes))
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
	out, err := fetch.Records(res.Records, r.next, make([]fetchedRecord, 0, r.lastN))
	if len(out) > 0 {
		r.next = out[len(out)-1].Offset + 1
		r.lastN = len(out)
	}
	r.next = fetch.NextAfter(res.Records, r.next) // read_committed: past dropped records
	if err != nil {
		return out, fmt.Errorf("fetch %s-%d: %w", r.topic, r.partition, err)
	}
	return out, nil
}

// backoff returns the delay before retry n (from 0): internal/backoff's
// default policy, 100ms doubling to 5s, jittered.
func backoff(n int) time.Duration { return retry.Default.Delay(n) }

// sleep waits for d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error { return retry.Sleep(ctx, d) }
