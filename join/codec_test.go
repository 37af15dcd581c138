package join

import (
	"context"
	"fmt"
	"testing"

	"github.com/joiner-dev/joiner/record"
	"github.com/segmentio/kafka-go"
)

// chunkFixture is a worker whose store holds the latest price of symbols
// symbols (cached after the first lookup), and n fetched notifications of
// those symbols carved from one buffer, as package fetch carves them.
func chunkFixture(tb testing.TB, symbols, n int) (*processTask, []fetchedRecord) {
	_, pt, _ := newTestWorker(tb)
	var ticks []fetchedRecord
	for i := range symbols {
		ticks = append(ticks, recAt(int64(i), 1000, fmt.Sprintf(`{"symbol":"SYM%04d","price":%d.5}`, i, 1000+i)))
	}
	if err := pt.st.applyRetrying(context.Background(), ticks, -1); err != nil {
		tb.Fatal(err)
	}
	var slab []byte
	ends := make([]int, n)
	for i := range n {
		s := fmt.Sprintf("SYM%04d", i%symbols)
		slab = record.AppendNotification(slab, &record.Notification{ID: fmt.Sprintf("n-%d", 100000+i), User: fmt.Sprintf("u%d", i%97), Symbol: s, Text: s + " moved"})
		ends[i] = len(slab)
	}
	recs := make([]fetchedRecord, n)
	start := 0
	for i := range recs {
		recs[i] = recAt(int64(i), 2000+i, "")
		recs[i].Value = slab[start:ends[i]:ends[i]]
		start = ends[i]
	}
	return pt, recs
}

// joinChunk is the worker's own work on a chunk: decode, join, and the
// alert messages in a reused buffer.
func joinChunk(tb testing.TB, pt *processTask, recs []fetchedRecord, msgs []kafka.Message, buf []byte) ([]kafka.Message, []byte) {
	good, dead := pt.decode(recs)
	alerts, err := pt.joinAll(context.Background(), good)
	if err != nil || len(dead) != 0 || len(alerts) != len(recs) || alerts[len(alerts)-1].Price == nil {
		tb.Fatalf("%d alerts of %d notifications, %d dead letters, %v", len(alerts), len(recs), len(dead), err)
	}
	return record.AppendAlertMessagesTo(msgs[:0], buf, "alerts", alerts)
}

// TestJoinChunkAllocations: decoding, joining and encoding a chunk
// allocates per chunk, not per notification (the shared decoder, the
// interned symbols, the price slots, the reused message buffer).
func TestJoinChunkAllocations(t *testing.T) {
	allocs := map[int]float64{}
	for _, n := range []int{20, 400} {
		pt, recs := chunkFixture(t, 10, n)
		var (
			msgs []kafka.Message
			buf  []byte
		)
		msgs, buf = joinChunk(t, pt, recs, msgs, buf) // warm: the cache, the buffers
		allocs[n] = testing.AllocsPerRun(20, func() { msgs, buf = joinChunk(t, pt, recs, msgs, buf) })
	}
	if allocs[400] > allocs[20]+2 {
		t.Errorf("%v allocations for a chunk of 400 notifications, %v for 20: some step allocates per notification", allocs[400], allocs[20])
	}
}

// BenchmarkJoinChunk: the worker's own work on a chunk of 2,000 fetched
// notifications of 1,000 symbols whose latest prices are cached: decode
// (processTask.decode), join (joinAll, local lookups) and the alert
// messages in the outbox's reused buffer; Kafka's fetch and produce are
// not in it. One op is one chunk; ns/notification is per notification.
func BenchmarkJoinChunk(b *testing.B) {
	pt, recs := chunkFixture(b, 1000, 2000)
	var (
		msgs []kafka.Message
		buf  []byte
	)
	b.ReportAllocs()
	for b.Loop() {
		msgs, buf = joinChunk(b, pt, recs, msgs, buf)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/notification")
}
