package join

import (
	"context"
	"fmt"
	"testing"

	"github.com/joiner-dev/joiner/record"
	"github.com/segmentio/kafka-go"
)

// BenchmarkJoinChunk: the worker's own work on a chunk of 2,000 fetched
// notifications of 1,000 symbols whose latest prices are cached: decode
// (processTask.decode), join (joinAll, local lookups) and the alert
// messages in the outbox's reused buffer. Kafka's fetch and produce are
// not in it. One op is one chunk; ns/notification and
// allocs/notification are per notification.
func BenchmarkJoinChunk(b *testing.B) {
	_, pt, _ := newTestWorker(b)
	const symbols, chunk = 1000, 2000
	var ticks []fetchedRecord
	for i := range symbols {
		ticks = append(ticks, recAt(int64(i), 1000, fmt.Sprintf(`{"symbol":"SYM%04d","price":%d.5}`, i, 1000+i)))
	}
	if err := pt.st.applyRetrying(context.Background(), ticks, -1); err != nil {
		b.Fatal(err)
	}
	var slab []byte // one buffer, as package fetch carves them
	offsets := make([]int, 0, chunk+1)
	for i := range chunk {
		offsets = append(offsets, len(slab))
		s := fmt.Sprintf("SYM%04d", i%symbols)
		slab = record.AppendNotification(slab, &record.Notification{ID: fmt.Sprintf("n-%d", 100000+i), User: fmt.Sprintf("u%d", i%97), Symbol: s, Text: s + " moved"})
	}
	offsets = append(offsets, len(slab))
	recs := make([]fetchedRecord, chunk)
	for i := range recs {
		recs[i] = recAt(int64(i), 2000+i, "")
		recs[i].Value = slab[offsets[i]:offsets[i+1]:offsets[i+1]]
	}
	var (
		msgs []kafka.Message
		buf  []byte
	)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		good, dead := pt.decode(recs)
		alerts, err := pt.joinAll(ctx, good)
		if err != nil || len(dead) != 0 || len(alerts) != chunk || alerts[chunk-1].Price == nil {
			b.Fatalf("%d alerts, %d dead letters, %v", len(alerts), len(dead), err)
		}
		msgs, buf = record.AppendAlertMessagesTo(msgs[:0], buf, "alerts", alerts)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*chunk), "ns/notification")
}
