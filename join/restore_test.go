package join

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/statestore"
	"github.com/segmentio/kafka-go"
)

// chunkFetcher answers at most n records per fetch, like a broker bounded
// by MaxBytes.
type chunkFetcher struct {
	*fakeFetcher
	n int
}

func (c chunkFetcher) Fetch(ctx context.Context, req *kafka.FetchRequest) (*kafka.FetchResponse, error) {
	res, err := c.fakeFetcher.Fetch(ctx, req)
	if err != nil {
		return nil, err
	}
	var out []kafka.Record
	for len(out) < c.n {
		r, err := res.Records.ReadRecord()
		if err != nil {
			break
		}
		out = append(out, *r)
	}
	res.Records = kafka.NewRecordReader(out...)
	return res, nil
}

// The restore fetches ahead while it applies; when it reaches the end
// offset it leaves the reader right after the last record it applied,
// whatever the fetcher read ahead, so the tail (or the merge) goes on from
// there and skips nothing.
func TestRestoreReadsAheadButResumesAfterWhatItApplied(t *testing.T) {
	f := newFakeFetcher()
	for i := range 30 {
		f.produce("market", 0, int64(1000+i), "X", tickJSON("X", float64(i)))
	}
	stores, err := statestore.Open(statestore.Options{Dirs: []string{t.TempDir()}, Group: "g", CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stores.Close() })
	cf := chunkFetcher{f, 3}
	w, err := NewProcessor(Config{Client: cf, Writer: &fakeWriter{}, Stores: stores, InstanceID: "w",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	store, err := stores.OpenTask(0)
	if err != nil {
		t.Fatal(err)
	}
	st := newStateTask(w, 0, store, true)
	defer st.close()
	r := newPartitionReader(cf, "market", 0, 0, time.Millisecond)
	n, ok := st.restore(context.Background(), r, 5, -1, w.log)
	if !ok {
		t.Fatal("restore failed")
	}
	// Fetches of 3: 0–2, then 3–5 reach the end offset 5.
	if n != 6 || st.appliedOffset() != 5 || r.next != 6 {
		t.Errorf("restored %d records, applied offset %d, reader at %d; want 6, 5 and 6", n, st.appliedOffset(), r.next)
	}
}
