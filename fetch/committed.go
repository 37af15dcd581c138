package fetch

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	fetchapi "github.com/segmentio/kafka-go/protocol/fetch"
)

// # read_committed
//
// kafka-go's Client.Fetch sends the isolation level but drops the aborted
// transactions of the response (segmentio/kafka-go#1332), so a
// read_committed reader cannot tell an aborted record from a committed
// one. Isolated sends the same Fetch request at the protocol level
// (through the client's Transport, which still negotiates the version and
// routes to the leader) and keeps each partition's aborted transactions;
// Committed then drops what a read_committed consumer must not see, as
// Kafka's Java consumer does:
//
//   - a batch of a transactional producer whose transaction is aborted:
//     the aborted list names the producer id and the first offset of each
//     aborted transaction in the fetched range; from that offset on, the
//     producer's transactional batches are dropped until its ABORT control
//     record;
//   - every control record (the COMMIT and ABORT markers).
//
// The broker answers read_committed fetches only up to the last stable
// offset, so an open transaction's records are not returned at all. The
// next offset to fetch advances past every record read, dropped or not.

// Aborted is one aborted transaction of a fetched partition: its producer
// and the offset of its first record.
type Aborted struct {
	ProducerID  int64
	FirstOffset int64
}

// Response is one partition's fetch at the protocol level.
type Response struct {
	Topic            string
	Partition        int
	HighWatermark    int64
	LastStableOffset int64
	LogStartOffset   int64
	// Error is the partition's (or the response's) error code, as
	// kafka.FetchResponse has it.
	Error error
	// Aborted lists the aborted transactions of the fetched range (only
	// for read_committed).
	Aborted []Aborted
	// Records are the fetched batches; pass them to Committed (or, for
	// read_uncommitted, to Records).
	Records kafka.RecordReader
}

// Isolated fetches req.Topic-req.Partition at req.Offset (a real offset,
// not kafka.FirstOffset or LastOffset) with req.IsolationLevel, keeping
// the aborted transactions. Like Client.Fetch it waits at most half of
// c.Timeout (or of ctx's deadline) for the broker's MaxWait.
func Isolated(ctx context.Context, c *kafka.Client, req *kafka.FetchRequest) (*Response, error) {
	if req.Offset < 0 {
		return nil, fmt.Errorf("fetch %s-%d: offset %d is not an offset (resolve it with ListOffset first)", req.Topic, req.Partition, req.Offset)
	}
	maxWait := req.MaxWait
	if maxWait <= 0 {
		maxWait = 10 * time.Second // Client.Fetch's default
	}
	timeout := c.Timeout
	if deadline, ok := ctx.Deadline(); ok && (timeout <= 0 || time.Until(deadline) < timeout) {
		timeout = time.Until(deadline)
	}
	if timeout > 0 {
		maxWait = min(maxWait, timeout/2)
	}
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	rt := c.Transport
	if rt == nil {
		rt = kafka.DefaultTransport
	}
	m, err := rt.RoundTrip(ctx, c.Addr, &fetchapi.Request{
		ReplicaID:   -1,
		MaxWaitTime: int32(min(maxWait/time.Millisecond, math.MaxInt32)),
		MinBytes:    int32(req.MinBytes),
		// The response's limit is Java's consumer's (fetch.max.bytes,
		// 50 MiB), above the partition's: for one partition the
		// partition's limit is the one that applies. (kfake leaves the
		// aborted transactions out of a response that reached the
		// response's limit, so it must not be the one reached.)
		MaxBytes:       int32(min(max(req.MaxBytes, responseMaxBytes), math.MaxInt32)),
		IsolationLevel: int8(req.IsolationLevel),
		SessionID:      -1,
		SessionEpoch:   -1,
		Topics: []fetchapi.RequestTopic{{
			Topic: req.Topic,
			Partitions: []fetchapi.RequestPartition{{
				Partition:          int32(req.Partition),
				CurrentLeaderEpoch: -1,
				FetchOffset:        req.Offset,
				LogStartOffset:     -1,
				PartitionMaxBytes:  int32(req.MaxBytes),
			}},
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("fetch %s-%d at offset %d: %w", req.Topic, req.Partition, req.Offset, err)
	}
	res := m.(*fetchapi.Response)
	if len(res.Topics) == 0 || len(res.Topics[0].Partitions) == 0 {
		return nil, fmt.Errorf("fetch %s-%d at offset %d: the partition is missing from the response", req.Topic, req.Partition, req.Offset)
	}
	t := &res.Topics[0]
	p := &t.Partitions[0]
	out := &Response{
		Topic:            t.Topic,
		Partition:        int(p.Partition),
		HighWatermark:    p.HighWatermark,
		LastStableOffset: p.LastStableOffset,
		LogStartOffset:   p.LogStartOffset,
		Records:          p.RecordSet.Records,
	}
	switch {
	case p.ErrorCode != 0:
		out.Error = kafka.Error(p.ErrorCode)
	case res.ErrorCode != 0:
		out.Error = kafka.Error(res.ErrorCode)
	}
	out.Aborted = abortedOf(p)
	if out.Records == nil {
		out.Records = kafka.NewRecordReader()
	}
	return out, nil
}

// abortedOf returns the aborted transactions of a fetched partition, nil
// without.
func abortedOf(p *fetchapi.ResponsePartition) []Aborted {
	if len(p.AbortedTransactions) == 0 {
		return nil
	}
	out := make([]Aborted, len(p.AbortedTransactions))
	for i, a := range p.AbortedTransactions {
		out[i] = Aborted{ProducerID: a.ProducerID, FirstOffset: a.FirstOffset}
	}
	return out
}

// responseMaxBytes is the response-level limit of an Isolated fetch.
const responseMaxBytes = 50 << 20

// Control record types (the second int16 of a control record's key).
const (
	controlAbort  = 0
	controlCommit = 1
)

// Committed appends to out the records of rs at or after offset from
// that a read_committed consumer sees, copied as Records copies them, and
// returns them with the offset to fetch next: past every record of rs
// read, including dropped ones and control records, and never below from.
// aborted is the response's aborted transactions (in any order). rs is a
// Response's Records: kafka-go's stream of batches; any other reader is
// taken as one batch of no producer (nothing dropped but control
// records, which kafka-go's stream already hides).
func Committed(rs kafka.RecordReader, aborted []Aborted, from int64, out []Record) ([]Record, int64, error) {
	cr := newCommittedReader(rs, aborted)
	out, err := Records(cr, from, out)
	if cr.err != nil && err == nil {
		err = fmt.Errorf("read records after offset %d: %w", from-1, cr.err)
	}
	return out, max(from, cr.next), err
}

// committedReader is a kafka.RecordReader over the records of a fetch
// that a read_committed consumer sees.
type committedReader struct {
	batches []kafka.RecordReader
	i       int
	aborted []Aborted          // by FirstOffset; consumed from the front
	open    map[int64]struct{} // producers inside an aborted transaction
	// skip is set while the current batch is dropped (aborted or control).
	cur  kafka.RecordReader
	skip bool
	next int64 // after the last record read
	err  error // a malformed control record
}

func newCommittedReader(rs kafka.RecordReader, aborted []Aborted) *committedReader {
	r := &committedReader{next: -1}
	if s, ok := rs.(*protocol.RecordStream); ok {
		r.batches = s.Records
	} else if rs != nil {
		r.batches = []kafka.RecordReader{rs}
	}
	if len(aborted) > 0 {
		r.aborted = sortedAborted(aborted)
		r.open = make(map[int64]struct{})
	}
	return r
}

// sortedAborted returns a copy of aborted in the order of their first
// offsets.
func sortedAborted(aborted []Aborted) []Aborted {
	out := slices.Clone(aborted)
	slices.SortFunc(out, func(a, b Aborted) int { return cmp.Compare(a.FirstOffset, b.FirstOffset) })
	return out
}

// ReadRecord returns the next visible record, or io.EOF.
func (r *committedReader) ReadRecord() (*kafka.Record, error) {
	for {
		if r.cur == nil {
			if r.i >= len(r.batches) {
				return nil, io.EOF
			}
			r.cur = r.batches[r.i]
			r.i++
			r.skip = r.startBatch(r.cur)
		}
		rec, err := r.cur.ReadRecord()
		if err != nil {
			if errors.Is(err, io.EOF) {
				r.cur = nil
				continue
			}
			return nil, err
		}
		r.next = max(r.next, rec.Offset+1)
		if !r.skip {
			return rec, nil
		}
		closeRecord(rec)
	}
}

// startBatch says whether batch b is dropped, and ends an aborted
// transaction at its ABORT marker.
func (r *committedReader) startBatch(b kafka.RecordReader) bool {
	switch b := b.(type) {
	case *protocol.ControlBatch:
		r.consumeAborted(b.BaseOffset)
		if r.open != nil && b.ProducerID >= 0 {
			if typ, ok := r.controlType(b); ok && typ == controlAbort {
				delete(r.open, b.ProducerID)
			}
		}
		return true
	case *protocol.RecordBatch:
		if !b.Attributes.Transactional() || b.ProducerID < 0 || r.open == nil {
			return false
		}
		r.consumeAborted(b.BaseOffset)
		_, dropped := r.open[b.ProducerID]
		return dropped
	}
	return false
}

// consumeAborted opens the aborted transactions that start at or before
// offset.
func (r *committedReader) consumeAborted(offset int64) {
	for len(r.aborted) > 0 && r.aborted[0].FirstOffset <= offset {
		r.open[r.aborted[0].ProducerID] = struct{}{}
		r.aborted = r.aborted[1:]
	}
}

// controlType reads the type of control batch b's record, and replaces
// b's reader so that ReadRecord still sees the record (for the offset).
// A record whose key is shorter than 4 bytes is malformed: it is
// skipped, reported once in r.err, and ends no transaction.
func (r *committedReader) controlType(b *protocol.ControlBatch) (int16, bool) {
	rec, err := b.Records.ReadRecord()
	if err != nil {
		if !errors.Is(err, io.EOF) && r.err == nil {
			r.err = fmt.Errorf("control batch at offset %d: %w", b.BaseOffset, err)
		}
		return 0, false
	}
	var key [4]byte
	n := 0
	if rec.Key != nil {
		n, _ = io.ReadFull(rec.Key, key[:])
	}
	closeRecord(rec)
	r.cur = &oneThenRest{first: rec, rest: b.Records}
	if n < len(key) {
		if r.err == nil {
			r.err = fmt.Errorf("control record at offset %d: its key has %d bytes, want at least 4", rec.Offset, n)
		}
		return 0, false
	}
	return int16(binary.BigEndian.Uint16(key[2:])), true
}

// oneThenRest reads first, then the rest of a batch.
type oneThenRest struct {
	first *kafka.Record
	rest  kafka.RecordReader
}

func (o *oneThenRest) ReadRecord() (*kafka.Record, error) {
	if r := o.first; r != nil {
		o.first = nil
		return &kafka.Record{Offset: r.Offset, Time: r.Time}, nil
	}
	return o.rest.ReadRecord()
}

// closeRecord releases a dropped record's buffers.
func closeRecord(rec *kafka.Record) {
	if rec.Key != nil {
		rec.Key.Close()
	}
	if rec.Value != nil {
		rec.Value.Close()
	}
}
