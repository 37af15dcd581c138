package produce

import (
	"encoding/binary"
	"hash/crc32"
	"time"

	"github.com/segmentio/kafka-go"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendRecordSet appends to dst the record set of msgs[idx[0]],
// msgs[idx[1]], ... as a Produce request carries it: its int32 size, then
// one uncompressed record batch (magic 2). The bytes are those kafka-go's
// protocol.RecordSet writes for the same records (TestAppendRecordSetMatchesKafkaGo),
// built in one pass into a reused buffer instead of through kafka-go's
// encoder: a record with a zero Time gets now, as there.
func appendRecordSet(dst []byte, msgs []kafka.Message, idx []int32, now time.Time) []byte {
	return appendProducerRecordSet(dst, msgs, idx, now, noProducer)
}

// batchProducer is what a record batch says of its producer: its id and
// epoch, the sequence number of the batch's first record, and whether the
// batch is part of a transaction (the attributes' transactional bit).
type batchProducer struct {
	id            int64
	epoch         int16
	sequence      int32
	transactional bool
}

// noProducer is a batch of a producer that is neither idempotent nor
// transactional: producer id, epoch and base sequence -1.
var noProducer = batchProducer{id: -1, epoch: -1, sequence: -1}

// attrTransactional is the record batch attributes' transactional bit.
const attrTransactional = 1 << 4

// appendProducerRecordSet is appendRecordSet for a batch of producer pr.
func appendProducerRecordSet(dst []byte, msgs []kafka.Message, idx []int32, now time.Time, pr batchProducer) []byte {
	start := len(dst)
	var header [4 + 61]byte
	binary.BigEndian.PutUint32(header[4+12:], 0xffffffff) // partition leader epoch -1
	header[4+16] = 2                                      // magic
	if pr.transactional {
		binary.BigEndian.PutUint16(header[4+21:], attrTransactional)
	}
	binary.BigEndian.PutUint64(header[4+43:], uint64(pr.id))
	binary.BigEndian.PutUint16(header[4+51:], uint16(pr.epoch))
	binary.BigEndian.PutUint32(header[4+53:], uint32(pr.sequence))
	dst = append(dst, header[:]...)

	current := timestamp(now)
	var first, maxTS int64
	for i, j := range idx {
		m := &msgs[j]
		t := timestamp(m.Time)
		if t == 0 {
			t = current
		}
		if i == 0 {
			first = t
		}
		maxTS = max(maxTS, t)
		delta := t - first
		length := 1 + varintLen(delta) + varintLen(int64(i)) + nullBytesLen(m.Key) + nullBytesLen(m.Value) + varintLen(int64(len(m.Headers)))
		for _, h := range m.Headers {
			length += varintLen(int64(len(h.Key))) + len(h.Key) + nullBytesLen(h.Value)
		}
		dst = binary.AppendVarint(dst, int64(length))
		dst = append(dst, 0) // record attributes
		dst = binary.AppendVarint(dst, delta)
		dst = binary.AppendVarint(dst, int64(i))
		dst = appendNullBytes(dst, m.Key)
		dst = appendNullBytes(dst, m.Value)
		dst = binary.AppendVarint(dst, int64(len(m.Headers)))
		for _, h := range m.Headers {
			dst = binary.AppendVarint(dst, int64(len(h.Key)))
			dst = append(dst, h.Key...)
			dst = appendNullBytes(dst, h.Value)
		}
	}

	b := dst[start:]
	binary.BigEndian.PutUint32(b[0:], uint32(len(b)-4))    // record set size
	binary.BigEndian.PutUint32(b[4+8:], uint32(len(b)-16)) // batch length: after it
	binary.BigEndian.PutUint32(b[4+23:], uint32(len(idx)-1))
	binary.BigEndian.PutUint64(b[4+27:], uint64(first))
	binary.BigEndian.PutUint64(b[4+35:], uint64(maxTS))
	binary.BigEndian.PutUint32(b[4+57:], uint32(len(idx)))
	binary.BigEndian.PutUint32(b[4+17:], crc32.Checksum(b[4+21:], castagnoli))
	return dst
}

// timestamp is kafka-go's: milliseconds since the epoch, 0 for a zero time.
func timestamp(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano() / int64(time.Millisecond)
}

func varintLen(v int64) int {
	u := uint64(v<<1) ^ uint64(v>>63)
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}

func nullBytesLen(b []byte) int {
	if b == nil {
		return 1
	}
	return varintLen(int64(len(b))) + len(b)
}

func appendNullBytes(dst, b []byte) []byte {
	if b == nil {
		return binary.AppendVarint(dst, -1)
	}
	dst = binary.AppendVarint(dst, int64(len(b)))
	return append(dst, b...)
}
