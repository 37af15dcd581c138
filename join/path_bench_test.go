package join

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/group"
	"github.com/joiner-dev/joiner/statestore"
	"github.com/segmentio/kafka-go"
)

// discardWriter acknowledges every write at once.
type discardWriter struct{}

func (discardWriter) WriteMessages(context.Context, ...kafka.Message) error { return nil }

// BenchmarkJoinPath measures joiner's own work per notification, without
// Kafka I/O: decode a chunk of notifications, join each with its price as
// of its time in the task's store (1,000 symbols, 10 versions each),
// encode the alerts (joinInto, as the merge does) and make the messages
// (writeOutWith, to a writer that acknowledges at once). The read path and the producer are measured by scripts/bench's
// pass-through; this is what joiner adds to them.
func BenchmarkJoinPath(b *testing.B) {
	// latest: every notification is newer than its symbol's newest price
	// (a task running merged, at the head of both topics); history: each
	// falls between two versions (a backlog joined after the market was
	// restored past it); before-newest: each falls between the newest
	// version and the one before, which the merged task keeps in memory
	// (a task at the head with a grace that saw one tick of the symbol).
	// latest-400B is latest with notifications of 400 bytes, padded by a
	// nested "meta" object as `joiner loadgen --notification-bytes 400`
	// pads them.
	for _, name := range []string{"latest", "history", "before-newest", "latest-400B"} {
		b.Run(name, func(b *testing.B) { benchmarkJoinPath(b, name) })
	}
}

func benchmarkJoinPath(b *testing.B, mode string) {
	stores, err := statestore.Open(statestore.Options{Dirs: []string{b.TempDir()}, Group: "g", CacheBytes: 64 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer stores.Close()
	w, err := NewProcessor(Config{Client: newFakeFetcher(), Writer: discardWriter{}, Stores: stores, InstanceID: "worker-0"})
	if err != nil {
		b.Fatal(err)
	}
	store, err := stores.OpenTask(0)
	if err != nil {
		b.Fatal(err)
	}
	st := newStateTask(&w.taskEnv, 0, store, true)
	close(st.restored)
	w.assignment = group.Assignment{Partitions: 1}
	w.states[0] = st
	t := newProcessTask(&w.taskEnv, 0, st)

	const symbols, versions = 1000, 10
	var ticks []statestore.Tick
	for v := range versions {
		for s := range symbols {
			ticks = append(ticks, statestore.Tick{Symbol: fmt.Sprintf("SYM%04d", s), Price: 100 + float64(v) + float64(s)/100, TimestampMs: int64(1000 * (v + 1)), Offset: int64(len(ticks))})
		}
	}
	if err := store.Apply(ticks, int64(len(ticks)-1)); err != nil {
		b.Fatal(err)
	}
	if mode == "before-newest" {
		// What the merge's applied leaves once a symbol's newest two
		// versions came after it was first joined.
		t.latest = map[string]*latestPrice{}
		for s := range symbols {
			prev, newest := ticks[(versions-2)*symbols+s], ticks[(versions-1)*symbols+s]
			t.latest[newest.Symbol] = &latestPrice{tick: newest, prev: prev, hasPrev: true}
		}
		t.latestParts = 1
	}
	recs := make([]fetchedRecord, mergeChunk)
	for i := range recs {
		ts := int64(20000 + i)
		switch mode {
		case "history":
			ts = int64(1500 + i%8000)
		case "before-newest":
			ts = int64(1000*(versions-1) + i%1000) // after version 9, before 10
		}
		v := fmt.Appendf(nil, `{"id":"n-%d","user":"u-%d","symbol":"SYM%04d","text":"SYM%04d moved 2.5%% today"}`, i, i%97, i%symbols, i%symbols)
		if mode == "latest-400B" {
			v = padNotification(v, 400)
		}
		recs[i] = fetchedRecord{Offset: int64(i), Time: time.UnixMilli(ts), Key: fmt.Appendf(nil, "SYM%04d", i%symbols), Value: v}
	}
	ctx := context.Background()
	var (
		scratch outScratch
		e       encoded
	)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		e.reset()
		dead, err := t.joinInto(ctx, &e, recs)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := w.writeOutWith(ctx, &scratch, 0, []*encoded{&e}, dead); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/notification")
	b.ReportMetric(float64(testing.AllocsPerRun(1, func() {
		e.reset()
		dead, _ := t.joinInto(ctx, &e, recs)
		_, _ = w.writeOutWith(ctx, &scratch, 0, []*encoded{&e}, dead)
	}))/float64(len(recs)), "allocs/notification")
}

// padNotification is v with a "meta" member before its closing brace that
// makes it size bytes, as loadgen's --notification-bytes pads.
func padNotification(v []byte, size int) []byte {
	const head, tail = `,"meta":{"channel":"push","lang":"id","body":"`, `"}}`
	out := append(append([]byte(nil), v[:len(v)-1]...), head...)
	for i := 0; len(out)+len(tail) < size; i++ {
		out = append(out, "lorem ipsum "[i%12])
	}
	return append(out, tail...)
}
