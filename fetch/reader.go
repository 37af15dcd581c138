package fetch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/joiner-dev/joiner/internal/backoff"
	"github.com/segmentio/kafka-go"
)

// Client is what a Reader reads with: a *kafka.Client, a *Mux (one
// multi-partition fetch per broker for every reader of a worker), or a
// fake in tests.
type Client interface {
	Fetch(ctx context.Context, req *kafka.FetchRequest) (*kafka.FetchResponse, error)
	Offsets
}

// ResetFunc is told that a Reader of topic-partition jumped from offset
// from to offset to, the first offset the log holds, after a fetch was
// answered OFFSET_OUT_OF_RANGE (retention deleted the records, or the
// topic was recreated): the records in between are lost to the reader.
type ResetFunc func(topic string, partition int, from, to int64)

// Reader reads one topic-partition in order. It is owned by one goroutine
// and is not safe for concurrent use.
type Reader struct {
	Client    Client
	Topic     string
	Partition int
	// Next is the offset of the next record to read; negative until
	// resolved to the partition's first offset.
	Next int64
	// HWM is the high watermark from the last successful fetch (-1
	// before it).
	HWM     int64
	MaxWait time.Duration
	// OnReset is called on an offset reset; nil logs it at WARN with
	// slog's default logger.
	OnReset ResetFunc

	// lastN is the number of records the last fetch returned: the
	// capacity the next one starts with.
	lastN int
	// maxBytes is the size limit of the last fetch (NextMaxBytes).
	maxBytes int
}

// NewReader returns a reader of topic-partition from offset next
// (negative: the partition's first offset), each fetch waiting up to
// maxWait for records.
func NewReader(c Client, topic string, partition int, next int64, maxWait time.Duration, onReset ResetFunc) *Reader {
	return &Reader{Client: c, Topic: topic, Partition: partition, Next: next, HWM: -1, MaxWait: maxWait, OnReset: onReset}
}

// Bounds returns the partition's first offset and its current end (the
// offset the next produced record will get).
func (r *Reader) Bounds(ctx context.Context) (first, end int64, err error) {
	if first, err = ListOffset(ctx, r.Client, r.Topic, r.Partition, kafka.FirstOffset); err != nil {
		return 0, 0, err
	}
	if end, err = ListOffset(ctx, r.Client, r.Topic, r.Partition, kafka.LastOffset); err != nil {
		return 0, 0, err
	}
	return first, end, nil
}

// Fetch returns the records at or after r.Next available now, waiting up
// to MaxWait for some to arrive; it may return none. It advances r.Next
// past the returned records and updates r.HWM. A fetch answered
// OFFSET_OUT_OF_RANGE moves r.Next to the first offset the log holds,
// tells OnReset, and returns no records.
func (r *Reader) Fetch(ctx context.Context) ([]Record, error) {
	if r.Next < 0 {
		first, err := ListOffset(ctx, r.Client, r.Topic, r.Partition, kafka.FirstOffset)
		if err != nil {
			return nil, err
		}
		r.Next = first
	}
	r.maxBytes = NextMaxBytes(r.maxBytes)
	res, err := r.Client.Fetch(ctx, Request(r.Topic, r.Partition, r.Next, r.MaxWait, r.maxBytes))
	if err != nil {
		return nil, fmt.Errorf("fetch %s-%d at offset %d: %w", r.Topic, r.Partition, r.Next, err)
	}
	if res.Error != nil {
		if errors.Is(res.Error, kafka.OffsetOutOfRange) {
			first, ferr := ListOffset(ctx, r.Client, r.Topic, r.Partition, kafka.FirstOffset)
			if ferr != nil {
				return nil, ferr
			}
			r.reset(r.Next, first)
			r.Next = first
			return nil, nil
		}
		return nil, fmt.Errorf("fetch %s-%d at offset %d: %w", r.Topic, r.Partition, r.Next, res.Error)
	}
	r.HWM = res.HighWatermark
	// Through a CommittedRecords, read_uncommitted too: r.Next goes past
	// the control batches (a transaction's COMMIT or ABORT marker), or a
	// partition whose log ends with a marker is never read to its end.
	rs := visibleRecords(res.Records)
	out, err := rs.AppendTo(make([]Record, 0, r.lastN), r.Next)
	if len(out) > 0 {
		r.Next = out[len(out)-1].Offset + 1
		r.lastN = len(out)
	}
	r.Next = max(r.Next, rs.Next()) // past dropped records and markers (isolation.go)
	if err != nil {
		return out, fmt.Errorf("fetch %s-%d: %w", r.Topic, r.Partition, err)
	}
	return out, nil
}

func (r *Reader) reset(from, to int64) {
	if r.OnReset != nil {
		r.OnReset(r.Topic, r.Partition, from, to)
		return
	}
	slog.Default().Warn("offset out of range; continuing from the first offset the log holds",
		"topic", r.Topic, "partition", r.Partition, "offset", from, "first_offset", to, "records_lost", max(to-from, 0))
}

// FetchRetrying is Fetch, a failure handed to onErr (nil: ignored) and
// retried with internal/backoff's default policy until ctx is done. It
// returns the records and when the fetch that returned them was sent, or
// ctx's error (wrapping the last failure).
func (r *Reader) FetchRetrying(ctx context.Context, onErr func(error)) ([]Record, time.Time, error) {
	var recs []Record
	var sent time.Time
	err := backoff.Do(ctx, backoff.Default, func(_ int, err error, _ time.Duration) error {
		if ctx.Err() == nil && onErr != nil {
			onErr(err)
		}
		return nil
	}, func(ctx context.Context) error {
		sent = time.Now()
		var err error
		recs, err = r.Fetch(ctx)
		return err
	})
	if err != nil {
		return nil, time.Time{}, err
	}
	return recs, sent, nil
}
