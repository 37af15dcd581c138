package produce

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
)

// kafkaGoRecordSet is the record set kafka-go's encoder writes for
// msgs[idx...]: the bytes Client.Produce would send.
func kafkaGoRecordSet(t testing.TB, msgs []kafka.Message, idx []int32) []byte {
	t.Helper()
	rs := protocol.RecordSet{Version: 2, Records: &records{msgs: msgs, idx: idx}}
	var buf bytes.Buffer
	if _, err := rs.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// randomMessages returns n messages with nil, empty and long keys and
// values, headers (some with nil values) and timestamps that go back and
// forth, none zero (kafka-go stamps a zero time with its own clock).
func randomMessages(r *rand.Rand, n int) []kafka.Message {
	bytesOf := func() []byte {
		switch r.IntN(5) {
		case 0:
			return nil
		case 1:
			return []byte{}
		case 2:
			return bytes.Repeat([]byte{byte(r.IntN(256))}, 64+r.IntN(300)) // multi-byte varint lengths
		default:
			return fmt.Appendf(nil, "v%d", r.IntN(1_000_000))
		}
	}
	base := time.UnixMilli(1_700_000_000_000 + r.Int64N(1_000_000))
	msgs := make([]kafka.Message, n)
	for i := range msgs {
		m := kafka.Message{Topic: "t", Key: bytesOf(), Value: bytesOf(),
			Time: base.Add(time.Duration(r.Int64N(200_000)-100_000) * time.Millisecond)}
		for range r.IntN(3) {
			m.Headers = append(m.Headers, kafka.Header{Key: fmt.Sprintf("h%d", r.IntN(100)), Value: bytesOf()})
		}
		msgs[i] = m
	}
	return msgs
}

// appendRecordSet writes the bytes kafka-go's encoder writes: the same
// record set size, batch header, CRC, records and headers.
func TestAppendRecordSetMatchesKafkaGo(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		msgs := randomMessages(r, 1+r.IntN(40))
		var idx []int32
		for i := range msgs {
			if r.IntN(4) != 0 { // a subset, in order, as a partition's window
				idx = append(idx, int32(i))
			}
		}
		if len(idx) == 0 {
			idx = []int32{0}
		}
		want := kafkaGoRecordSet(t, msgs, idx)
		got := appendRecordSet([]byte("prefix"), msgs, idx, time.Now())
		if !bytes.HasPrefix(got, []byte("prefix")) {
			t.Fatal("appendRecordSet overwrote dst")
		}
		if got = got[len("prefix"):]; !bytes.Equal(got, want) {
			at := 0
			for at < min(len(got), len(want)) && got[at] == want[at] {
				at++
			}
			t.Fatalf("trial %d (%d records): %d bytes, kafka-go %d; first difference at byte %d", trial, len(idx), len(got), len(want), at)
		}
	}
}

// A zero Time is stamped with now, as kafka-go stamps it with its clock.
func TestAppendRecordSetZeroTime(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_123)
	msgs := []kafka.Message{{Key: []byte("k"), Value: []byte("v")}, {Key: []byte("k"), Value: []byte("w"), Time: now.Add(time.Second)}}
	set := appendRecordSet(nil, msgs, []int32{0, 1}, now)
	rs := protocol.RecordSet{}
	if _, err := rs.ReadFrom(bytes.NewReader(set)); err != nil {
		t.Fatal(err)
	}
	var times []time.Time
	for {
		r, err := rs.Records.ReadRecord()
		if err != nil {
			break
		}
		times = append(times, r.Time)
	}
	if len(times) != 2 || !times[0].Equal(now) || !times[1].Equal(now.Add(time.Second)) {
		t.Errorf("times %v, want %v and a second later", times, now)
	}
}

// Encoding into a buffer of the right capacity allocates nothing.
func TestAppendRecordSetNoAllocs(t *testing.T) {
	msgs := randomMessages(rand.New(rand.NewPCG(3, 4)), 200)
	idx := make([]int32, len(msgs))
	for i := range idx {
		idx[i] = int32(i)
	}
	buf := appendRecordSet(nil, msgs, idx, time.Now())
	if allocs := testing.AllocsPerRun(20, func() { buf = appendRecordSet(buf[:0], msgs, idx, time.Now()) }); allocs != 0 {
		t.Errorf("%.0f allocations per record set, want 0", allocs)
	}
}

func BenchmarkAppendRecordSet(b *testing.B) {
	msgs := make([]kafka.Message, 1000)
	idx := make([]int32, len(msgs))
	for i := range msgs {
		msgs[i] = kafka.Message{Key: []byte("SYM123"), Value: bytes.Repeat([]byte{'x'}, 150), Time: time.Now()}
		idx[i] = int32(i)
	}
	b.Run("appendRecordSet", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for range b.N {
			buf = appendRecordSet(buf[:0], msgs, idx, time.Now())
		}
	})
	b.Run("kafka-go", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			kafkaGoRecordSet(b, msgs, idx)
		}
	})
}
