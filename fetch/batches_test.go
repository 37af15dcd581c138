package fetch

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/compress"
	"github.com/segmentio/kafka-go/protocol"
)

// testRec is one record of a testBatch: its offset delta and timestamp
// delta, key and value (nil: null) and headers.
type testRec struct {
	offsetDelta, tsDelta int64
	key, value           []byte
	headers              []kafka.Header
}

// testBatch is a v2 record batch as a broker stores it.
type testBatch struct {
	base            int64
	attrs           uint16
	lastOffsetDelta int32 // 0 or less: the last record's
	firstTs, maxTs  int64
	pid             int64
	recs            []testRec
	magic           byte // 0: 2
}

func appendVarint(b []byte, v int64) []byte { return binary.AppendVarint(b, v) }

func appendVarBytes(b, v []byte) []byte {
	if v == nil {
		return appendVarint(b, -1)
	}
	return append(appendVarint(b, int64(len(v))), v...)
}

// encode appends the batch to b as the broker writes it.
func (tb testBatch) encode(t testing.TB, b []byte) []byte {
	var recs []byte
	for _, r := range tb.recs {
		var body []byte
		body = append(body, 0) // attributes
		body = appendVarint(body, r.tsDelta)
		body = appendVarint(body, r.offsetDelta)
		body = appendVarBytes(body, r.key)
		body = appendVarBytes(body, r.value)
		body = appendVarint(body, int64(len(r.headers)))
		for _, h := range r.headers {
			body = appendVarBytes(body, []byte(h.Key))
			body = appendVarBytes(body, h.Value)
		}
		recs = append(appendVarint(recs, int64(len(body))), body...)
	}
	if c := compress.Compression(tb.attrs & attrCompression); c != 0 {
		var buf bytes.Buffer
		w := c.Codec().NewWriter(&buf)
		if _, err := w.Write(recs); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		recs = buf.Bytes()
	}
	last := tb.lastOffsetDelta
	if last <= 0 && len(tb.recs) > 0 {
		last = int32(tb.recs[len(tb.recs)-1].offsetDelta)
	}
	magic := tb.magic
	if magic == 0 {
		magic = 2
	}
	h := binary.BigEndian.AppendUint16(nil, tb.attrs)
	h = binary.BigEndian.AppendUint32(h, uint32(last))
	h = binary.BigEndian.AppendUint64(h, uint64(tb.firstTs))
	h = binary.BigEndian.AppendUint64(h, uint64(tb.maxTs))
	h = binary.BigEndian.AppendUint64(h, uint64(tb.pid))
	h = binary.BigEndian.AppendUint16(h, 0) // producer epoch
	h = binary.BigEndian.AppendUint32(h, 0) // base sequence
	h = binary.BigEndian.AppendUint32(h, uint32(len(tb.recs)))
	h = append(h, recs...)
	crc := crc32.Checksum(h, castagnoli)
	b = binary.BigEndian.AppendUint64(b, uint64(tb.base))
	b = binary.BigEndian.AppendUint32(b, uint32(4+1+4+len(h)))
	b = binary.BigEndian.AppendUint32(b, 0) // partition leader epoch
	b = append(b, magic)
	b = binary.BigEndian.AppendUint32(b, crc)
	return append(b, h...)
}

func encodeBatches(t testing.TB, bs ...testBatch) []byte {
	var b []byte
	for _, tb := range bs {
		b = tb.encode(t, b)
	}
	return b
}

// kafkaGo decodes set with kafka-go's decoder and the committed filter
// of the Isolated path: the reference RawRecords must agree with.
func kafkaGo(t testing.TB, set []byte, aborted []Aborted, from int64) ([]Record, int64, error) {
	framed := binary.BigEndian.AppendUint32(nil, uint32(len(set)))
	framed = append(framed, set...)
	var rs protocol.RecordSet
	if _, err := rs.ReadFrom(bytes.NewReader(framed)); err != nil {
		return nil, 0, err
	}
	if rs.Records == nil {
		return nil, from, nil
	}
	return Committed(rs.Records, aborted, from, nil)
}

func sameRecords(t *testing.T, what string, got, want []Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records; want %d:\n got %v\nwant %v", what, len(got), len(want), got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Offset != w.Offset || !g.Time.Equal(w.Time) || !bytes.Equal(g.Key, w.Key) || !bytes.Equal(g.Value, w.Value) ||
			(g.Key == nil) != (w.Key == nil) || (g.Value == nil) != (w.Value == nil) || !sameHeaders(g.Headers, w.Headers) {
			t.Fatalf("%s: record %d is %d %v key %q value %q headers %v; want %d %v key %q value %q headers %v",
				what, i, g.Offset, g.Time, g.Key, g.Value, g.Headers, w.Offset, w.Time, w.Key, w.Value, w.Headers)
		}
	}
}

func sameHeaders(a, b []kafka.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Key != b[i].Key || !bytes.Equal(a[i].Value, b[i].Value) {
			return false
		}
	}
	return true
}

// TestRawRecordsMatchKafkaGo: on a log of plain, compressed (every
// codec), transactional, aborted and control batches, with null and
// empty keys and values, headers, and records at any offset, RawRecords
// returns what kafka-go's decoder and the committed filter return, from
// every offset, read_committed and not; its next offset is past the last
// batch.
func TestRawRecordsMatchKafkaGo(t *testing.T) {
	big := bytes.Repeat([]byte("v"), ownBufferMin+5)
	hdrs := []kafka.Header{{Key: "h1", Value: []byte("x")}, {Key: "", Value: nil}, {Key: "ü", Value: []byte{}}}
	recs := func(n int, tag string) []testRec {
		var rs []testRec
		for i := range n {
			r := testRec{offsetDelta: int64(i), tsDelta: int64(10 * i), key: fmt.Appendf(nil, "k%d", i), value: fmt.Appendf(nil, "%s-%d", tag, i)}
			switch i % 4 {
			case 1:
				r.key, r.headers = nil, hdrs
			case 2:
				r.key, r.value = []byte{}, []byte{}
			case 3:
				r.value = nil
			}
			rs = append(rs, r)
		}
		return rs
	}
	ctl := func(typ int16) []testRec {
		return []testRec{{key: controlKey(typ), value: []byte{0, 0, 0, 0, 0, 0}}}
	}
	log := []testBatch{
		{base: 0, pid: -1, firstTs: 1000, recs: recs(3, "plain")},
		{base: 3, pid: -1, firstTs: 2000, attrs: uint16(compress.Gzip), recs: recs(4, "gzip")},
		{base: 7, pid: -1, firstTs: 3000, attrs: uint16(compress.Snappy), recs: recs(2, "snappy")},
		{base: 9, pid: -1, firstTs: 4000, attrs: uint16(compress.Lz4), recs: recs(2, "lz4")},
		{base: 11, pid: -1, firstTs: 5000, attrs: uint16(compress.Zstd), recs: recs(5, "zstd")},
		{base: 16, pid: 1, firstTs: 6000, attrs: attrTransactional, recs: recs(2, "p1-c")},
		{base: 18, pid: 2, firstTs: 6001, attrs: attrTransactional, recs: recs(2, "p2-a")}, // aborted at 21
		{base: 20, pid: 1, firstTs: 6002, attrs: attrTransactional | attrControl, recs: ctl(controlCommit)},
		{base: 21, pid: 2, firstTs: 6003, attrs: attrTransactional | attrControl, recs: ctl(controlAbort)},
		{base: 22, pid: 2, firstTs: 6004, attrs: attrTransactional, recs: recs(1, "p2-c")},
		{base: 23, pid: 2, firstTs: 6005, attrs: attrTransactional | attrControl, recs: ctl(controlCommit)},
		// Compacted: offsets 24, 26 and 29 left of 24-30 (the batch's last offset is 30).
		{base: 24, pid: -1, firstTs: 7000, lastOffsetDelta: 6, recs: []testRec{{offsetDelta: 0, value: []byte("c0")}, {offsetDelta: 2, value: big}, {offsetDelta: 5, value: []byte("c5")}}},
		{base: 31, pid: -1, firstTs: 8000, recs: recs(3, "end")},
	}
	set := encodeBatches(t, log...)
	aborted := []Aborted{{ProducerID: 2, FirstOffset: 18}}
	for _, committed := range []bool{false, true} {
		ab := []Aborted(nil)
		if committed {
			ab = aborted
		}
		for from := int64(-1); from <= 35; from++ {
			what := fmt.Sprintf("read_committed %v, from %d", committed, from)
			want, wantNext, err := kafkaGo(t, set, ab, from)
			if err != nil {
				t.Fatalf("%s: kafka-go: %v", what, err)
			}
			rr := NewRawRecords(set, ab)
			got, err := rr.AppendTo(nil, from)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			sameRecords(t, what, got, want)
			// kafka-go's filter advances per record read; RawRecords past
			// each batch's last offset, the compacted batch's 30 too.
			if rr.Next() != 34 || wantNext > max(34, from) {
				t.Fatalf("%s: next %d (kafka-go's filter %d); want 34", what, rr.Next(), wantNext)
			}
		}
	}
	// What read_committed drops: p2's aborted batch, and every marker.
	got, _ := NewRawRecords(set, aborted).AppendTo(nil, 0)
	for _, r := range got {
		if strings.HasPrefix(string(r.Value), "p2-a") {
			t.Fatalf("read_committed returned %q of the aborted transaction", r.Value)
		}
		if r.Offset == 20 || r.Offset == 21 || r.Offset == 23 {
			t.Fatalf("a control record at %d returned", r.Offset)
		}
	}
}

// TestRawRecordsCopies: returned keys, values and header values do not
// alias the record set (its buffer may be reused), and appending to one
// never overwrites another.
func TestRawRecordsCopies(t *testing.T) {
	set := encodeBatches(t, testBatch{base: 0, pid: -1, recs: []testRec{
		{offsetDelta: 0, key: []byte("k0"), value: []byte("v0"), headers: []kafka.Header{{Key: "h", Value: []byte("hv")}}},
		{offsetDelta: 1, key: []byte("k1"), value: []byte("v1")},
	}})
	got, err := NewRawRecords(set, nil).AppendTo(nil, 0)
	if err != nil || len(got) != 2 {
		t.Fatalf("got %v %v", got, err)
	}
	for i := range set {
		set[i] = 'X'
	}
	_ = append(got[0].Value, '!')
	_ = append(got[0].Key, '!')
	if string(got[0].Key) != "k0" || string(got[0].Value) != "v0" || string(got[1].Key) != "k1" || string(got[1].Value) != "v1" || string(got[0].Headers[0].Value) != "hv" {
		t.Fatalf("records changed with the set or each other: %q %q %q %q %q", got[0].Key, got[0].Value, got[1].Key, got[1].Value, got[0].Headers[0].Value)
	}
}

// TestRawRecordsLogAppendTime: a batch stamped LogAppendTime gives its
// records the batch's max timestamp, as Kafka's consumer does.
func TestRawRecordsLogAppendTime(t *testing.T) {
	set := encodeBatches(t, testBatch{base: 5, pid: -1, attrs: attrLogAppendTime, firstTs: 1000, maxTs: 9999,
		recs: []testRec{{offsetDelta: 0, tsDelta: 0, value: []byte("a")}, {offsetDelta: 1, tsDelta: 7, value: []byte("b")}}},
		testBatch{base: 7, pid: -1, firstTs: 1000, maxTs: 9999, recs: []testRec{{offsetDelta: 0, tsDelta: 7, value: []byte("c")}}})
	got, err := NewRawRecords(set, nil).AppendTo(nil, 0)
	if err != nil || len(got) != 3 {
		t.Fatalf("got %v %v", got, err)
	}
	for i, want := range []int64{9999, 9999, 1007} {
		if got[i].Time.UnixMilli() != want {
			t.Errorf("record %d at %d; want %d", i, got[i].Time.UnixMilli(), want)
		}
	}
}

// TestRawRecordsBadBatches: a corrupt or malformed batch returns the
// records of the batches before it, an error naming its offset, and a
// next offset at the batch (it is fetched again, as Kafka's consumer
// fails on it again); a batch cut at the
// end of the set is left for the next fetch; old message formats go to
// kafka-go's decoder.
func TestRawRecordsBadBatches(t *testing.T) {
	good := testBatch{base: 0, pid: -1, recs: []testRec{{offsetDelta: 0, value: []byte("a")}, {offsetDelta: 1, value: []byte("b")}}}
	second := testBatch{base: 2, pid: -1, recs: []testRec{{offsetDelta: 0, value: []byte("c")}}}
	corrupt := encodeBatches(t, good, second)
	corrupt[len(corrupt)-2] ^= 0xff // inside the second batch's records
	cut := encodeBatches(t, good, second)
	cut = cut[:len(cut)-3]
	badLen := encodeBatches(t, good, testBatch{base: 2, pid: -1, recs: []testRec{{offsetDelta: 0, value: []byte("c")}}})
	bad := encodeBatches(t, good)
	badLen = append(bad, badLen[len(bad):len(bad)+8]...)
	badLen = binary.BigEndian.AppendUint32(badLen, 0xfffffff0) // negative length
	lying := testBatch{base: 2, pid: -1, recs: []testRec{{offsetDelta: 0, value: []byte("c")}}}.encode(t, nil)
	binary.BigEndian.PutUint32(lying[12+4+1+4+2+4+8+8+8+2+4:], 3) // claims 3 records, holds 1
	binary.BigEndian.PutUint32(lying[12+4+1:], crc32.Checksum(lying[12+4+1+4:], castagnoli))
	for _, c := range []struct {
		name    string
		set     []byte
		want    []string
		wantErr string
		next    int64
	}{
		{"corrupt", corrupt, []string{"a", "b"}, "offset 2 is corrupt", 2},
		{"cut", cut, []string{"a", "b"}, "", 2},
		{"negative length", badLen, []string{"a", "b"}, "at offset 2 has length", 2},
		{"fewer records than its count", append(encodeBatches(t, good), lying...), []string{"a", "b"}, "record 1 of the batch at offset 2", 2},
	} {
		rr := NewRawRecords(c.set, nil)
		got, err := rr.AppendTo(nil, 0)
		if !slices.Equal(values(got), c.want) || rr.Next() != c.next {
			t.Errorf("%s: %v next %d; want %v next %d", c.name, values(got), rr.Next(), c.want, c.next)
		}
		if (c.wantErr == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%s: error %v; want %q", c.name, err, c.wantErr)
		}
	}
	// A v1 message set goes to kafka-go's decoder.
	var buf bytes.Buffer
	v1 := protocol.RecordSet{Version: 1, Records: protocol.NewRecordReader(protocol.Record{Offset: 0, Time: time.UnixMilli(5), Value: protocol.NewBytes([]byte("old"))})}
	if _, err := v1.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	got, err := NewRawRecords(buf.Bytes()[4:], nil).AppendTo(nil, 0)
	if err != nil || !slices.Equal(values(got), []string{"old"}) {
		t.Errorf("v1 message set: %v %v; want [old]", values(got), err)
	}
}

// randomLog is a random log of the shapes TestRawRecordsMatchKafkaGo
// lists, and the aborted transactions of its transactional producers.
func randomLog(t testing.TB, rng *rand.Rand) ([]byte, []Aborted) {
	var bs []testBatch
	var aborted []Aborted
	open := map[int64]bool{} // producer: in a transaction
	off := int64(rng.IntN(3))
	codecs := []uint16{0, 0, uint16(compress.Gzip), uint16(compress.Snappy), uint16(compress.Lz4), uint16(compress.Zstd)}
	for range 1 + rng.IntN(12) {
		pid := int64(rng.IntN(3)) - 1
		b := testBatch{base: off, pid: pid, firstTs: rng.Int64N(1 << 40), attrs: codecs[rng.IntN(len(codecs))], lastOffsetDelta: -1}
		switch {
		case pid >= 0 && open[pid] && rng.IntN(3) == 0: // the transaction ends
			typ := int16(rng.IntN(2))
			b.attrs = attrTransactional | attrControl
			b.recs = []testRec{{key: controlKey(typ), value: []byte{0, 0, 0, 0, 0, 0}}}
			delete(open, pid)
		default:
			if pid >= 0 {
				b.attrs |= attrTransactional
				if !open[pid] {
					open[pid] = true
					if rng.IntN(2) == 0 {
						aborted = append(aborted, Aborted{ProducerID: pid, FirstOffset: off})
					}
				}
			}
			delta := int64(0)
			for range 1 + rng.IntN(5) {
				r := testRec{offsetDelta: delta, tsDelta: rng.Int64N(100)}
				if rng.IntN(4) > 0 {
					r.key = fmt.Appendf(nil, "k%d", rng.IntN(100))
				}
				if rng.IntN(6) > 0 {
					r.value = bytes.Repeat([]byte{byte('a' + rng.IntN(26))}, rng.IntN(40))
				}
				if rng.IntN(3) == 0 {
					r.headers = []kafka.Header{{Key: "h", Value: []byte("v")}}
				}
				b.recs = append(b.recs, r)
				delta += 1 + int64(rng.IntN(2)) // compaction gaps
			}
			if rng.IntN(4) == 0 {
				b.lastOffsetDelta = int32(delta + 1)
			}
		}
		bs = append(bs, b)
		last := b.lastOffsetDelta
		if last <= 0 {
			last = int32(b.recs[len(b.recs)-1].offsetDelta)
		}
		off += int64(last) + 1
	}
	return encodeBatches(t, bs...), aborted
}

// TestRawRecordsRandomLogs: on random logs, RawRecords agrees with
// kafka-go's decoder and the committed filter, from random offsets.
func TestRawRecordsRandomLogs(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		set, aborted := randomLog(t, rng)
		from := rng.Int64N(20) - 1
		ab := aborted
		if i%2 == 0 {
			ab = nil
		}
		want, wantNext, err := kafkaGo(t, set, ab, from)
		if err != nil {
			t.Fatalf("log %d: kafka-go: %v", i, err)
		}
		rr := NewRawRecords(set, ab)
		got, err := rr.AppendTo(nil, from)
		if err != nil {
			t.Fatalf("log %d: %v", i, err)
		}
		sameRecords(t, fmt.Sprintf("log %d from %d (aborted %v)", i, from, ab), got, want)
		if max(from, rr.Next()) < wantNext { // Committed's next is never below from
			t.Fatalf("log %d: next %d, below kafka-go's filter's %d", i, rr.Next(), wantNext)
		}
	}
}

// FuzzRawRecords: any bytes as a record set never panic, return records
// in increasing offsets at or after the offset asked for, and move the
// next offset only forward.
func FuzzRawRecords(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		set, _ := randomLog(f, rng)
		f.Add(set, int64(0))
	}
	f.Add([]byte{}, int64(0))
	f.Fuzz(func(t *testing.T, set []byte, from int64) {
		rr := NewRawRecords(set, []Aborted{{ProducerID: 0, FirstOffset: 0}})
		got, _ := rr.AppendTo(nil, from)
		last := from - 1
		for _, r := range got {
			if r.Offset <= last {
				t.Fatalf("record at %d after %d (from %d)", r.Offset, last, from)
			}
			last = r.Offset
		}
		if len(got) > 0 && rr.Next() <= last {
			t.Fatalf("next %d not past the last record %d", rr.Next(), last)
		}
	})
}
