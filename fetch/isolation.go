package fetch

import (
	"context"
	"fmt"

	"github.com/segmentio/kafka-go"
)

// CommittedClient is a *kafka.Client whose Fetch and ListOffsets read
// read_committed: Fetch goes through Isolated and its records through
// Committed's filter (aborted transactions and control records dropped),
// and its HighWatermark is the partition's last stable offset, the end a
// read_committed reader can reach; ListOffsets of the end gives the last
// stable offset too. Every other method is the client's. Readers of a
// response's records that must advance past dropped records read
// CommittedRecords.Next once the records are read.
type CommittedClient struct{ *kafka.Client }

// Fetch fetches req read_committed. A request at kafka.FirstOffset or
// kafka.LastOffset is the client's own (read_committed too).
func (c CommittedClient) Fetch(ctx context.Context, req *kafka.FetchRequest) (*kafka.FetchResponse, error) {
	r := *req
	r.IsolationLevel = kafka.ReadCommitted
	if r.Offset < 0 {
		return c.Client.Fetch(ctx, &r)
	}
	res, err := Isolated(ctx, c.Client, &r)
	if err != nil {
		return nil, err
	}
	end := res.LastStableOffset
	if end < 0 {
		end = res.HighWatermark
	}
	return &kafka.FetchResponse{
		Topic:         res.Topic,
		Partition:     res.Partition,
		HighWatermark: end,
		Error:         res.Error,
		Records:       &CommittedRecords{r: newCommittedReader(res.Records, res.Aborted)},
	}, nil
}

// ListOffsets lists offsets read_committed: the end of a partition is its
// last stable offset.
func (c CommittedClient) ListOffsets(ctx context.Context, req *kafka.ListOffsetsRequest) (*kafka.ListOffsetsResponse, error) {
	r := *req
	r.IsolationLevel = kafka.ReadCommitted
	return c.Client.ListOffsets(ctx, &r)
}

// CommittedRecords are the records of a CommittedClient fetch that a
// read_committed consumer sees.
type CommittedRecords struct{ r *committedReader }

// ReadRecord returns the next visible record, or io.EOF.
func (c *CommittedRecords) ReadRecord() (*kafka.Record, error) { return c.r.ReadRecord() }

// Next is the offset after the last record read, visible or dropped (a
// control record, an aborted batch); -1 before any. A reader goes on from
// it, or it would fetch a trailing commit marker again and again.
func (c *CommittedRecords) Next() int64 { return c.r.next }

// AppendTo appends the visible records at or after offset from to out,
// as Records does, and returns it.
func (c *CommittedRecords) AppendTo(out []Record, from int64) ([]Record, error) {
	out, err := Records(c, from, out)
	if c.r.err != nil && err == nil {
		err = fmt.Errorf("read records after offset %d: %w", from-1, c.r.err)
	}
	return out, err
}

// visible is a fetch's records as a reader reads them: AppendTo, then
// Next, the offset past every record or batch read, dropped or not.
type visible interface {
	AppendTo(out []Record, from int64) ([]Record, error)
	Next() int64
}

// visibleRecords returns rs as visible records: rs itself when it is
// RawRecords (a Mux's fetch) or CommittedRecords (a read_committed
// fetch), else rs read as read_uncommitted, only its control batches
// dropped (kafka-go's stream hides them too, but then nothing tells the
// reader their offsets).
func visibleRecords(rs kafka.RecordReader) visible {
	switch r := rs.(type) {
	case *RawRecords:
		return r
	case *CommittedRecords:
		return r
	}
	return &CommittedRecords{r: newCommittedReader(rs, nil)}
}

// NextAfter returns the offset to fetch after reading rs from next:
// the Next of RawRecords or CommittedRecords when rs is one and it is
// further.
func NextAfter(rs kafka.RecordReader, next int64) int64 {
	if v, ok := rs.(visible); ok {
		return max(next, v.Next())
	}
	return next
}
