package fetch

import (
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// BenchmarkRecords copies 5,000 records of about 100 bytes (a notification
// and its symbol key) out of a record reader; one op is 5,000 records
// (allocs/op / 5,000 is the allocations per record).
func BenchmarkRecords(b *testing.B) {
	const n = 5000
	keys := make([][]byte, n)
	values := make([][]byte, n)
	for i := range n {
		keys[i] = fmt.Appendf(nil, "SYM%04d", i%1000)
		values[i] = fmt.Appendf(nil, `{"id":"n-%d","user":"user-%d","symbol":"SYM%04d","text":"price alert number %d"}`, i, i%100, i%1000, i)
	}
	recs := make([]kafka.Record, n)
	out := make([]Record, 0, n)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		for i := range recs {
			recs[i] = kafka.Record{Offset: int64(i), Time: time.UnixMilli(int64(i)), Key: kafka.NewBytes(keys[i]), Value: kafka.NewBytes(values[i])}
		}
		rr := kafka.NewRecordReader(recs...)
		b.StartTimer()
		var err error
		if out, err = Records(rr, 0, out[:0]); err != nil || len(out) != n {
			b.Fatal(len(out), err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
}
