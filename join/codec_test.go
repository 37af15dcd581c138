package join

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/murmur2"
	"github.com/joiner-dev/joiner/record"
)

// chunkFixture is a worker whose store holds the latest price of symbols
// symbols (cached after the first lookup), and n fetched notifications of
// those symbols carved from one buffer, as package fetch carves them.
func chunkFixture(tb testing.TB, symbols, n int) (*Processor, *processTask, []fetchedRecord) {
	w, pt, _ := newTestWorker(tb)
	w.writer = discardWriter{}
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
		recs[i].Key = []byte(fmt.Sprintf("SYM%04d", i%symbols))
		recs[i].Value = slab[start:ends[i]:ends[i]]
		start = ends[i]
	}
	return w, pt, recs
}

// joinChunk is the worker's own work on a chunk: decode, join and encode
// (joinInto, into the reused batch e), and the messages of the write
// (writeOutWith, with the outbox's reused scratch, to a writer that
// acknowledges at once).
func joinChunk(tb testing.TB, pt *processTask, recs []fetchedRecord, e *encoded, s *outScratch) {
	ctx := context.Background()
	e.reset()
	dead, err := pt.joinInto(ctx, e, recs)
	if err != nil || len(dead) != 0 || e.len() != len(recs) || e.results[0] != len(recs) {
		tb.Fatalf("%d alerts (%v) of %d notifications, %d dead letters, %v", e.len(), e.results, len(recs), len(dead), err)
	}
	if _, err := pt.env.writeOutWith(ctx, s, 0, []*encoded{e}, nil); err != nil {
		tb.Fatal(err)
	}
}

// TestJoinChunkAllocations: decoding, joining and encoding a chunk
// allocates per chunk, not per notification (the shared decoder, the
// alerts encoded as they are joined, the reused buffers).
func TestJoinChunkAllocations(t *testing.T) {
	allocs := map[int]float64{}
	for _, n := range []int{20, 400} {
		_, pt, recs := chunkFixture(t, 10, n)
		var (
			e encoded
			s outScratch
		)
		joinChunk(t, pt, recs, &e, &s) // warm: the cache, the buffers
		allocs[n] = testing.AllocsPerRun(20, func() { joinChunk(t, pt, recs, &e, &s) })
	}
	if allocs[400] > allocs[20]+2 {
		t.Errorf("%v allocations for a chunk of 400 notifications, %v for 20: some step allocates per notification", allocs[400], allocs[20])
	}
}

// TestNewestPricesForgottenWhenPartitionsChange: a merged task answers the
// common join from its map of its symbols' newest prices; once the
// partition count changes, a symbol in the map may belong to another task,
// so the map must not answer for it.
func TestNewestPricesForgottenWhenPartitionsChange(t *testing.T) {
	w, pt, recs := chunkFixture(t, 1, 1)
	var e encoded
	var s outScratch
	joinChunk(t, pt, recs, &e, &s) // SYM0000's price is now in the map
	parts := 2
	for murmur2.Partition([]byte("SYM0000"), parts) == pt.p {
		parts++
	}
	w.mu.Lock()
	w.assignment.Partitions = parts
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	e.reset()
	if _, err := pt.joinInto(ctx, &e, recs); err == nil && e.results[0] != 0 {
		t.Fatalf("with %d partitions SYM0000 is task %d's, not %d's, but was joined locally from the task's map", parts, murmur2.Partition([]byte("SYM0000"), parts), pt.p)
	}
}
