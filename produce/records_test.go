package produce

import (
	"io"

	"github.com/segmentio/kafka-go"
)

// records is a kafka.RecordReader of msgs[idx[0]], msgs[idx[1]], ...: the
// reference the tests feed kafka-go's own record set encoder with, to
// compare appendRecordSet's bytes with. (It was the producer's first
// encoding path, through Client.Produce: appendRecordSet with RawProduce
// spends less CPU.)
type records struct {
	msgs   []kafka.Message
	idx    []int32
	i      int
	record kafka.Record
	key    bytesReader
	value  bytesReader
}

var _ kafka.RecordReader = (*records)(nil)

func (r *records) ReadRecord() (*kafka.Record, error) {
	if r.i >= len(r.idx) {
		return nil, io.EOF
	}
	m := &r.msgs[r.idx[r.i]]
	r.i++
	r.record = kafka.Record{Time: m.Time, Headers: m.Headers}
	if m.Key != nil {
		r.key.reset(m.Key)
		r.record.Key = &r.key
	}
	if m.Value != nil {
		r.value.reset(m.Value)
		r.record.Value = &r.value
	}
	return &r.record, nil
}

// rewind starts the batch over, for a retry.
func (r *records) rewind() { r.i = 0 }

// bytesReader is a kafka.Bytes (protocol.Bytes) over a byte slice that
// can be reset, so that one serves every record of a batch.
type bytesReader struct {
	b   []byte
	off int
}

func (b *bytesReader) reset(p []byte) { b.b, b.off = p, 0 }

func (b *bytesReader) Len() int { return len(b.b) - b.off }

func (b *bytesReader) Read(p []byte) (int, error) {
	if b.off >= len(b.b) {
		return 0, io.EOF
	}
	n := copy(p, b.b[b.off:])
	b.off += n
	return n, nil
}

func (b *bytesReader) Close() error { return nil }

// WriteTo writes the rest in one call: io.Copy, which the record encoder
// uses, then needs no buffer.
func (b *bytesReader) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(b.b[b.off:])
	b.off += n
	return int64(n), err
}
