package join

import (
	"context"
	"testing"
	"time"

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
	rig := newRestoreRig(t, func(f *fakeFetcher) Fetcher { return chunkFetcher{f, 3} })
	restoreMode(t, rig.st.env, "apply")
	for i := range 30 {
		rig.f.produce("market", 0, int64(1000+i), "X", tickJSON("X", float64(i)+0.5))
	}
	st := rig.st
	r := newPartitionReader(st.env.client, "market", 0, 0, time.Millisecond)
	n, ok := st.restore(context.Background(), r, 5, -1, st.env.log)
	if !ok {
		t.Fatal("restore failed")
	}
	// Fetches of 3: 0–2, then 3–5 reach the end offset 5.
	if n != 6 || st.appliedOffset() != 5 || r.Next != 6 {
		t.Errorf("restored %d records, applied offset %d, reader at %d; want 6, 5 and 6", n, st.appliedOffset(), r.Next)
	}
}
