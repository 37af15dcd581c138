package fetch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/compress"
	"github.com/segmentio/kafka-go/protocol"
)

// # Record batches, decoded here
//
// kafka-go decodes every record batch of a response into a page buffer
// of its own, 64 KiB at least, and reads each varint through an
// io.Reader. Producers writing to a thousand partitions write batches of
// one or a few records, so a 1 MiB response took hundreds of MiB of pages
// (8.3 GB live at once in a 1,024-task drain, 18% of the CPU zeroing
// them), and at six partitions the decoding was 39% of a worker's CPU. A
// Mux therefore reads each partition's record set off the connection as
// it came (MuxResponse, one buffer of its own size), and RawRecords
// decodes it here: a v2 batch's header is read in place, its records
// straight from the bytes (decompressed first when the batch is), and
// only the keys, values and headers of the records returned are copied
// out, as Records copies them. Batches of the old message formats (magic
// 0 and 1) are handed to kafka-go's decoder.
//
// As Kafka's consumer does:
//   - every batch's CRC-32C is checked: a corrupt batch is an error
//     naming its offset, and the records before it are returned;
//   - a record of a batch whose topic stamps LogAppendTime has the
//     batch's append time (its MaxTimestamp), not the producer's;
//   - a batch wholly below the offset asked for is skipped unread, and
//     the offset to fetch next is past the last offset of every batch
//     read (a compacted batch whose last records were removed too);
//   - read_committed: the batches of aborted transactions and every
//     control batch are dropped (see Committed).
//
// A trailing batch that the broker cut at the response's size limit is
// left for the next fetch.

// batchHeaderSize is the size of a v2 batch after its length field:
// partition leader epoch, magic, CRC, attributes, last offset delta,
// first and max timestamps, producer id and epoch, base sequence and
// record count.
const batchHeaderSize = 4 + 1 + 4 + 2 + 4 + 8 + 8 + 8 + 2 + 4 + 4

// Batch attributes (v2).
const (
	attrCompression   = 0x07
	attrLogAppendTime = 0x08
	attrTransactional = 0x10
	attrControl       = 0x20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// RawRecords are one partition's fetched record set as the broker sent
// it (a Mux's fetches give them as FetchResponse.Records). AppendTo
// decodes them; ReadRecord reads them as a kafka.RecordReader. For
// read_committed they carry the partition's aborted transactions, and
// drop what a read_committed consumer must not see.
type RawRecords struct {
	b       []byte
	aborted []Aborted
	next    int64 // past the last batch read; -1 before any

	read []Record // ReadRecord's records, decoded at its first call
	i    int
	err  error
}

// NewRawRecords returns the records of record set b (batches, without
// the set's size prefix); aborted are the aborted transactions of a
// read_committed fetch, whose batches are dropped (control batches
// always are). b is not copied and must not change.
func NewRawRecords(b []byte, aborted []Aborted) *RawRecords {
	return &RawRecords{b: b, aborted: aborted, next: -1}
}

// Next returns the offset after the last batch read, dropped ones and
// control batches too; -1 before any.
func (rr *RawRecords) Next() int64 { return rr.next }

// ReadRecord returns the next visible record, or io.EOF (kafka.RecordReader).
func (rr *RawRecords) ReadRecord() (*kafka.Record, error) {
	if rr.read == nil && rr.err == nil {
		rr.read, rr.err = rr.AppendTo([]Record{}, -1)
	}
	if rr.i >= len(rr.read) {
		if rr.err != nil {
			return nil, rr.err
		}
		return nil, io.EOF
	}
	r := rr.read[rr.i]
	rr.i++
	rec := &kafka.Record{Offset: r.Offset, Time: r.Time, Headers: r.Headers}
	if r.Key != nil {
		rec.Key = kafka.NewBytes(r.Key)
	}
	if r.Value != nil {
		rec.Value = kafka.NewBytes(r.Value)
	}
	return rec, nil
}

// AppendTo appends to out the visible records at or after offset from,
// in order, their keys and values copied as Records copies them, and
// returns it; Next is then past every batch read. On a malformed or
// corrupt batch it returns the records before it and an error naming its
// offset.
func (rr *RawRecords) AppendTo(out []Record, from int64) ([]Record, error) {
	d := batchDecoder{from: from, next: rr.next}
	if len(rr.aborted) > 0 {
		d.aborted = sortedAborted(rr.aborted)
		d.open = map[int64]struct{}{}
	}
	out, err := d.decode(rr.b, out)
	rr.next = d.next
	if err == nil {
		err = d.controlErr
	}
	return out, err
}

// batchDecoder decodes the batches of one record set.
type batchDecoder struct {
	from    int64 // the next offset to return
	next    int64 // past the last batch read
	aborted []Aborted
	open    map[int64]struct{} // producers inside an aborted transaction; nil: none aborted
	// controlErr is the first malformed control record: it is skipped
	// and ends no transaction.
	controlErr error

	slab    []byte
	scratch bytes.Buffer // a compressed batch's records
}

func (d *batchDecoder) decode(b []byte, out []Record) ([]Record, error) {
	for len(b) >= 12 {
		base := int64(binary.BigEndian.Uint64(b))
		n := int32(binary.BigEndian.Uint32(b[8:]))
		if n < 0 || int64(n) > int64(len(b)-12) {
			if n < 0 {
				return out, fmt.Errorf("the record batch at offset %d has length %d", base, n)
			}
			break // cut at the response's limit: for the next fetch
		}
		batch := b[12 : 12+int(n)]
		if len(batch) > 4 && batch[4] < 2 {
			return d.decodeOld(b, out)
		}
		b = b[12+int(n):]
		var err error
		if out, err = d.batch(base, batch, out); err != nil {
			return out, err
		}
	}
	return out, nil
}

// batch decodes one v2 batch at offset base (batch is what follows its
// length field).
func (d *batchDecoder) batch(base int64, batch []byte, out []Record) ([]Record, error) {
	if len(batch) < batchHeaderSize {
		return out, fmt.Errorf("the record batch at offset %d has %d bytes, shorter than its header", base, len(batch))
	}
	if magic := batch[4]; magic != 2 {
		return out, fmt.Errorf("the record batch at offset %d has magic %d, want 2", base, magic)
	}
	if want, got := binary.BigEndian.Uint32(batch[5:]), crc32.Checksum(batch[9:], castagnoli); want != got {
		return out, fmt.Errorf("the record batch at offset %d is corrupt: CRC-32C %08x, want %08x", base, got, want)
	}
	attrs := binary.BigEndian.Uint16(batch[9:])
	end := base + int64(int32(binary.BigEndian.Uint32(batch[11:]))) + 1
	firstTs := int64(binary.BigEndian.Uint64(batch[15:]))
	maxTs := int64(binary.BigEndian.Uint64(batch[23:]))
	pid := int64(binary.BigEndian.Uint64(batch[31:]))
	count := int32(binary.BigEndian.Uint32(batch[45:]))
	recs := batch[batchHeaderSize:]
	switch {
	case attrs&attrControl != 0:
		d.control(base, pid, recs, attrs)
		d.next = max(d.next, end)
		return out, nil
	case attrs&attrTransactional != 0 && pid >= 0 && d.open != nil:
		d.consumeAborted(base)
		if _, dropped := d.open[pid]; dropped {
			d.next = max(d.next, end)
			return out, nil
		}
	}
	if end <= d.from {
		d.next = max(d.next, end)
		return out, nil // wholly before the offset asked for
	}
	recs, err := d.records(base, attrs, recs)
	if err != nil {
		return out, err
	}
	if count < 0 {
		return out, fmt.Errorf("the record batch at offset %d has %d records", base, count)
	}
	// A batch is returned whole or not at all: on an error its records
	// are dropped and the next offset stays before it.
	start, from := len(out), d.from
	for i := int32(0); i < count; i++ {
		var r rawRecord
		if recs, err = r.parse(recs); err != nil {
			d.from = from
			return out[:start], fmt.Errorf("record %d of the batch at offset %d: %w", i, base, err)
		}
		off := base + r.offsetDelta
		if off < d.from {
			continue
		}
		ts := firstTs + r.timestampDelta
		if attrs&attrLogAppendTime != 0 {
			ts = maxTs
		}
		rec := Record{Offset: off, Time: time.UnixMilli(ts), Key: d.carve(r.key), Value: d.carve(r.value)}
		if r.headers > 0 {
			if rec.Headers, err = d.headers(r.headerBytes, r.headers); err != nil {
				d.from = from
				return out[:start], fmt.Errorf("the headers of the record at offset %d: %w", off, err)
			}
		}
		out = append(out, rec)
		d.from = off + 1
	}
	d.next = max(d.next, end)
	return out, nil
}

// records returns the records part of a batch, decompressed.
func (d *batchDecoder) records(base int64, attrs uint16, recs []byte) ([]byte, error) {
	codec := compress.Compression(attrs & attrCompression)
	if codec == 0 {
		return recs, nil
	}
	c := codec.Codec()
	if c == nil {
		return nil, fmt.Errorf("the record batch at offset %d has compression codec %d, which kafka-go does not know", base, codec)
	}
	r := c.NewReader(bytes.NewReader(recs))
	defer r.Close()
	d.scratch.Reset()
	if _, err := d.scratch.ReadFrom(r); err != nil {
		return nil, fmt.Errorf("decompress the record batch at offset %d (%s): %w", base, c.Name(), err)
	}
	return d.scratch.Bytes(), nil
}

// control reads a control batch: it ends producer pid's aborted
// transaction at its ABORT marker.
func (d *batchDecoder) control(base, pid int64, recs []byte, attrs uint16) {
	if d.open == nil {
		return
	}
	d.consumeAborted(base)
	if pid < 0 {
		return
	}
	var r rawRecord
	recs, err := d.records(base, attrs, recs)
	if err == nil {
		_, err = r.parse(recs)
	}
	switch {
	case err != nil:
	case r.key == nil || len(r.key) < 4:
		err = fmt.Errorf("its key has %d bytes, want at least 4", len(r.key))
	case int16(binary.BigEndian.Uint16(r.key[2:])) == controlAbort:
		delete(d.open, pid)
		return
	default:
		return
	}
	if d.controlErr == nil {
		d.controlErr = fmt.Errorf("control record at offset %d: %w", base, err)
	}
}

// consumeAborted opens the aborted transactions that start at or before
// offset.
func (d *batchDecoder) consumeAborted(offset int64) {
	for len(d.aborted) > 0 && d.aborted[0].FirstOffset <= offset {
		d.open[d.aborted[0].ProducerID] = struct{}{}
		d.aborted = d.aborted[1:]
	}
}

// carve copies b into the decoder's slabs (see Records); nil stays nil.
func (d *batchDecoder) carve(b []byte) []byte {
	if b == nil {
		return nil
	}
	n := len(b)
	switch {
	case n == 0:
		return []byte{} // empty, not null
	case n >= ownBufferMin:
		return slices.Clone(b)
	}
	if cap(d.slab)-len(d.slab) < n {
		d.slab = make([]byte, 0, max(min(2*cap(d.slab), slabBytes), firstSlabBytes, n))
	}
	l := len(d.slab)
	d.slab = append(d.slab, b...)
	return d.slab[l : l+n : l+n]
}

// headers decodes n headers from b.
func (d *batchDecoder) headers(b []byte, n int64) ([]kafka.Header, error) {
	hs := make([]kafka.Header, 0, min(n, int64(len(b))/2))
	for range n {
		k, rest, err := varBytes(b)
		if err != nil {
			return nil, fmt.Errorf("key: %w", err)
		}
		if k == nil {
			return nil, errors.New("a null header key")
		}
		v, rest, err := varBytes(rest)
		if err != nil {
			return nil, fmt.Errorf("value of %q: %w", k, err)
		}
		b = rest
		hs = append(hs, kafka.Header{Key: string(k), Value: d.carve(v)})
	}
	return hs, nil
}

// rawRecord is one record of a v2 batch, its bytes in the batch.
type rawRecord struct {
	timestampDelta int64
	offsetDelta    int64
	key, value     []byte
	headers        int64
	headerBytes    []byte
}

// parse reads the record at the start of b and returns the rest of b.
func (r *rawRecord) parse(b []byte) ([]byte, error) {
	length, n := binary.Varint(b)
	if n <= 0 || length < 0 || length > int64(len(b)-n) {
		return nil, fmt.Errorf("a record length of %d does not fit the %d bytes left", length, len(b))
	}
	rec, rest := b[n:n+int(length)], b[n+int(length):]
	if len(rec) < 1 {
		return nil, errors.New("an empty record")
	}
	rec = rec[1:] // attributes: unused
	var ok bool
	if r.timestampDelta, rec, ok = varint(rec); !ok {
		return nil, errors.New("a malformed timestamp delta")
	}
	if r.offsetDelta, rec, ok = varint(rec); !ok {
		return nil, errors.New("a malformed offset delta")
	}
	var err error
	if r.key, rec, err = varBytes(rec); err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	if r.value, rec, err = varBytes(rec); err != nil {
		return nil, fmt.Errorf("value: %w", err)
	}
	if r.headers, rec, ok = varint(rec); !ok || r.headers < 0 {
		return nil, errors.New("a malformed header count")
	}
	r.headerBytes = rec
	return rest, nil
}

func varint(b []byte) (int64, []byte, bool) {
	v, n := binary.Varint(b)
	if n <= 0 {
		return 0, nil, false
	}
	return v, b[n:], true
}

// varBytes reads a varint length and that many bytes (-1: nil).
func varBytes(b []byte) (v, rest []byte, err error) {
	n, b, ok := varint(b)
	switch {
	case !ok:
		return nil, nil, errors.New("a malformed length")
	case n == -1:
		return nil, b, nil
	case n < -1 || n > int64(len(b)):
		return nil, nil, fmt.Errorf("a length of %d does not fit the %d bytes left", n, len(b))
	}
	return b[:n:n], b[n:], nil
}

// decodeOld hands b, from a batch of an old message format on, to
// kafka-go's decoder (such batches are never transactional).
func (d *batchDecoder) decodeOld(b []byte, out []Record) ([]Record, error) {
	set := make([]byte, 4+len(b))
	binary.BigEndian.PutUint32(set, uint32(len(b)))
	copy(set[4:], b)
	var rs protocol.RecordSet
	if _, err := rs.ReadFrom(bytes.NewReader(set)); err != nil {
		return out, fmt.Errorf("decode the record set (old message format): %w", err)
	}
	cr := newCommittedReader(rs.Records, nil)
	out, err := Records(cr, d.from, out)
	if len(out) > 0 {
		d.from = max(d.from, out[len(out)-1].Offset+1)
	}
	d.next = max(d.next, cr.next)
	return out, err
}
