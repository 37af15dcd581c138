// Package fetch is joiner's read path: the partition Reader (reader.go),
// shared by join's tasks and bench/passthrough (the ceiling contestant of
// scripts/bench), so that both read with the same parameters, the same
// retries and the same copying of records out of kafka-go's buffers.
//
// Isolated and Committed read read_committed (committed.go): kafka-go's
// Client.Fetch drops a response's aborted transactions, so Isolated sends
// the Fetch request at the protocol level and keeps them, and Committed
// drops the records of aborted transactions and every control record,
// its next offset advancing past them.
package fetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/segmentio/kafka-go"
)

// MaxBytes is the most one fetch returns of a partition (the broker still
// returns a whole first record batch when it is larger). Small enough that
// the first records of a backlog reach the join in a few milliseconds and
// one fetch is joined while the next is read; large enough that a fetch
// carries thousands of records.
const MaxBytes = 1 << 20

// Record is one fetched record, its key and value copied out of kafka-go's
// buffers (they stay valid after the response is gone).
type Record struct {
	Offset int64
	Time   time.Time
	Key    []byte
	Value  []byte
	// Headers are the record's headers in order (kafka-go decodes them
	// into memory of their own, which nothing writes again); nil without.
	Headers []kafka.Header
}

// FirstMaxBytes is the most the first fetch of a reader returns; each
// fetch after it may return twice as much as the one before, up to
// MaxBytes. A reader that starts on a backlog so has its first records
// after a small fetch (the first alert of a backlog does not wait for a
// megabyte to be read and decoded by every task at once), and reaches
// full-size fetches after a few.
const FirstMaxBytes = 64 << 10

// Request is the fetch of one partition at offset: at least one byte, at
// most maxBytes (see NextMaxBytes), waiting up to maxWait for the first
// byte.
func Request(topic string, partition int, offset int64, maxWait time.Duration, maxBytes int) *kafka.FetchRequest {
	return &kafka.FetchRequest{
		Topic:     topic,
		Partition: partition,
		Offset:    offset,
		MinBytes:  1,
		MaxBytes:  int64(maxBytes),
		MaxWait:   maxWait,
	}
}

// NextMaxBytes is the size limit of a reader's next fetch after one of
// prev bytes (0 before the first): FirstMaxBytes, then doubling up to
// MaxBytes.
func NextMaxBytes(prev int) int {
	if prev <= 0 {
		return FirstMaxBytes
	}
	return min(2*prev, MaxBytes)
}

// Keys and values are carved from buffers of firstSlabBytes, then each
// twice the one before, up to slabBytes: a fetch of a few records (a
// steady trickle) allocates a few KiB, not 64. Values of ownBufferMin
// bytes or more get their own.
const (
	firstSlabBytes = 2 << 10
	slabBytes      = 64 << 10
	ownBufferMin   = 8 << 10
)

// Records appends to out the records of rs at or after offset from, in
// order, and returns it. Keys and values are copied into shared buffers
// (one allocation per buffer instead of two per record, the buffers
// growing from firstSlabBytes to slabBytes); each is capped, so appending
// to one never overwrites another. A slab is never reused or written
// again once its records are read (each call carves fresh ones), so the
// bytes of a returned record never change: join decodes them without
// copying (record.DecodeNotificationShared). A null key or value
// stays nil; an empty one is empty and non-nil. On a malformed record it
// returns the records before it and an error naming its offset.
func Records(rs kafka.RecordReader, from int64, out []Record) ([]Record, error) {
	var slab []byte
	carve := func(b kafka.Bytes) ([]byte, error) {
		if b == nil {
			return nil, nil
		}
		defer b.Close()
		n := b.Len()
		var dst []byte
		switch {
		case n == 0:
			return []byte{}, nil // empty, not null (a nil slab would give nil)
		case n >= ownBufferMin:
			dst = make([]byte, n)
		default:
			if cap(slab)-len(slab) < n {
				slab = make([]byte, 0, max(min(2*cap(slab), slabBytes), firstSlabBytes, n))
			}
			l := len(slab)
			slab = slab[:l+n]
			dst = slab[l : l+n : l+n]
		}
		if _, err := io.ReadFull(b, dst); err != nil {
			return nil, err
		}
		return dst, nil
	}
	for {
		rec, err := rs.ReadRecord()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return out, fmt.Errorf("read records after offset %d: %w", from-1, err)
		}
		if rec.Offset < from {
			continue
		}
		v, err := carve(rec.Value)
		if err != nil {
			return out, fmt.Errorf("read the value of the record at offset %d: %w", rec.Offset, err)
		}
		k, err := carve(rec.Key)
		if err != nil {
			return out, fmt.Errorf("read the key of the record at offset %d: %w", rec.Offset, err)
		}
		out = append(out, Record{Offset: rec.Offset, Time: rec.Time, Key: k, Value: v, Headers: rec.Headers})
		from = rec.Offset + 1
	}
}

// Offsets lists offsets: *kafka.Client, or a fake in tests.
type Offsets interface {
	ListOffsets(ctx context.Context, req *kafka.ListOffsetsRequest) (*kafka.ListOffsetsResponse, error)
}

// ListOffset returns the first offset of topic-partition (which is
// kafka.FirstOffset) or its end, the offset the next record will get
// (kafka.LastOffset).
func ListOffset(ctx context.Context, c Offsets, topic string, partition int, which int64) (int64, error) {
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
