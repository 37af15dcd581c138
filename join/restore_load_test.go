package join

import (
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/record"
	"github.com/joiner-dev/joiner/statestore"
	"github.com/segmentio/kafka-go"
)

// restoreMode sets how the restores of a test write the store: "apply"
// (batch by batch), "load" (one bulk load, read in one stream),
// "load-2-streams" (one bulk load, read in two ranges at once) or
// "load-in-parts" (a bulk load committed every 4 records, each chunk read
// in two ranges).
// It sets env before the restores start (taskEnv.limits and load).
func restoreMode(t testing.TB, env *taskEnv, mode string) {
	switch mode {
	case "apply":
		env.limits.BulkRestoreMin = math.MaxInt64
	case "load":
		env.limits.BulkRestoreMin, env.load.streams = 1, 1
	case "load-2-streams":
		env.limits.BulkRestoreMin, env.load.streams = 1, 2
	case "load-in-parts":
		env.limits.BulkRestoreMin, env.load.maxTicks, env.load.streams = 1, 4, 2
	default:
		t.Fatalf("restore mode %q", mode)
	}
}

var restoreModes = []string{"apply", "load", "load-2-streams", "load-in-parts"}

// restoreRig is a state task of market-0 over a fake fetcher, its store
// and its writer of dead letters.
type restoreRig struct {
	f   *fakeFetcher
	out *fakeWriter
	st  *stateTask
}

func newRestoreRig(t *testing.T, fetcher func(*fakeFetcher) Fetcher) *restoreRig {
	f, out := newFakeFetcher(), &fakeWriter{}
	_, st := newTestStateTask(t, Config{Client: fetcher(f), Writer: out, InstanceID: "w",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(func() { st.close() })
	return &restoreRig{f: f, out: out, st: st}
}

// newTestStateTask is a Processor of cfg with stores of its own (a
// temporary dir), and the state task of its task 0, merged.
func newTestStateTask(t testing.TB, cfg Config) (*Processor, *stateTask) {
	t.Helper()
	stores, err := statestore.Open(statestore.Options{Dirs: []string{t.TempDir()}, Group: "g", CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stores.Close() })
	cfg.Stores = stores
	w, err := NewProcessor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	store, err := stores.OpenTask(0)
	if err != nil {
		t.Fatal(err)
	}
	return w, newStateTask(&w.taskEnv, 0, store, true)
}

// TestRestoreStoresEveryTick restores a partition of 40 records, two of
// them malformed, every way: the store must hold each valid tick as a
// version, at the applied offset of the last record, the reader must be
// after it, and the malformed records must be dead-lettered.
func TestRestoreStoresEveryTick(t *testing.T) {
	for _, mode := range restoreModes {
		t.Run(mode, func(t *testing.T) {
			rig := newRestoreRig(t, func(f *fakeFetcher) Fetcher { return chunkFetcher{f, 3} })
			restoreMode(t, rig.st.env, mode)
			syms := []string{"A", "AB", "B", "ABC"}
			var want []statestore.Tick
			for off := range int64(40) {
				sym := syms[off%4]
				ts := 1000 + off*10
				if off%5 == 0 {
					ts -= 35 // older than the ticks before it
				}
				if off == 7 || off == 23 {
					rig.f.produce("market", 0, ts, sym, `{"symbol":"`+sym+`"}`)
					continue
				}
				price := float64(off) + 0.5
				rig.f.produce("market", 0, ts, sym, tickJSON(sym, price))
				want = append(want, statestore.Tick{Symbol: sym, Price: price, TimestampMs: ts, Offset: off})
			}
			r := newPartitionReader(rig.st.env.client, "market", 0, 0, time.Millisecond)
			n, ok := rig.st.restore(context.Background(), r, 40, 0, rig.st.env.log)
			if !ok || n != 40 || rig.st.appliedOffset() != 39 || r.Next != 40 {
				t.Fatalf("restore: ok %v, %d records, applied offset %d, reader at %d; want true, 40, 39 and 40", ok, n, rig.st.appliedOffset(), r.Next)
			}
			var got []statestore.Tick
			for _, sym := range syms {
				h, err := rig.st.store.History(sym)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, h...)
			}
			byOffset := func(a, b statestore.Tick) int { return cmp.Compare(a.Offset, b.Offset) }
			slices.SortFunc(got, byOffset)
			if !slices.Equal(got, want) {
				t.Fatalf("stored %d versions:\n%v\nwant %d:\n%v", len(got), got, len(want), want)
			}
			if dead := rig.out.byTopic(record.DefaultDeadLetterTopic); len(dead) != 2 {
				t.Fatalf("%d dead letters, want 2", len(dead))
			}
			// The time of the load commits, logged as store_seconds.
			if bulk := mode != "apply"; rig.st.bulk != bulk || (rig.st.loadCommits > 0) != bulk {
				t.Fatalf("bulk %v, load commits took %v; want bulk %v and a time only then", rig.st.bulk, rig.st.loadCommits, bulk)
			}
		})
	}
}

// stallFetcher answers fetches from offset stallAt on with nothing until
// the fetch's context ends; stalled is closed at the first such fetch.
type stallFetcher struct {
	chunkFetcher
	stallAt int64
	once    *sync.Once
	stalled chan struct{}
}

func newStallFetcher(f *fakeFetcher, n int, stallAt int64) stallFetcher {
	return stallFetcher{chunkFetcher{f, n}, stallAt, new(sync.Once), make(chan struct{})}
}

func (s stallFetcher) Fetch(ctx context.Context, req *kafka.FetchRequest) (*kafka.FetchResponse, error) {
	if req.Offset >= s.stallAt {
		s.once.Do(func() { close(s.stalled) })
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.chunkFetcher.Fetch(ctx, req)
}

// TestStoppedRestoreResumesAfterWhatIsStored stops a restore halfway: the
// reader must be left after the last record the store holds, so that the
// restore goes on from there: after what was applied, or, for a bulk
// load, where the restore began (a load is stored only when it is
// committed).
func TestStoppedRestoreResumesAfterWhatIsStored(t *testing.T) {
	for _, tc := range []struct {
		mode    string
		applied int64
	}{
		{"apply", 9},
		{"load", -1},
		// 0–9 read, 10–19 stalled: nothing committed.
		{"load-2-streams", -1},
		// Loaded in chunks of 4 records: 0–3 and 4–7 committed, 8–9 not.
		{"load-in-parts", 7},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			var sf stallFetcher
			rig := newRestoreRig(t, func(f *fakeFetcher) Fetcher { sf = newStallFetcher(f, 2, 10); return sf })
			restoreMode(t, rig.st.env, tc.mode)
			for off := range int64(20) {
				rig.f.produce("market", 0, 1000+off, "X", tickJSON("X", float64(off)+0.5))
			}
			r := newPartitionReader(rig.st.env.client, "market", 0, 0, time.Millisecond)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan bool)
			go func() {
				_, ok := rig.st.restore(ctx, r, 20, 0, rig.st.env.log)
				done <- ok
			}()
			if tc.mode == "apply" {
				// Its prefetcher reads ahead of what it applied.
				waitFor(t, "10 records applied", func() bool { return rig.st.appliedOffset() >= 9 })
			} else {
				<-sf.stalled
			}
			cancel()
			if <-done {
				t.Fatal("a stopped restore reported success")
			}
			if got := rig.st.appliedOffset(); got != tc.applied || r.Next != got+1 {
				t.Fatalf("applied offset %d, reader at %d; want %d and the reader after it", got, r.Next, tc.applied)
			}
		})
	}
}

// TestJoinAndCommitOnFakesBulkRestore is TestJoinAndCommitOnFakes with
// the task's market restored by a bulk load.
func TestJoinAndCommitOnFakesBulkRestore(t *testing.T) {
	joinAndCommitOnFakes(t, "load")
}

// TestKeptTaskRunsThroughRebalanceBulkRestore is
// TestKeptTaskRunsThroughRebalance with the tasks' markets restored by a
// bulk load.
func TestKeptTaskRunsThroughRebalanceBulkRestore(t *testing.T) {
	keptTaskRunsThroughRebalance(t, "load")
}

// flakyFetcher fails every third Fetch (counted across goroutines).
type flakyFetcher struct {
	chunkFetcher
	calls *atomic.Int64
}

func (f flakyFetcher) Fetch(ctx context.Context, req *kafka.FetchRequest) (*kafka.FetchResponse, error) {
	if f.calls.Add(1)%3 == 0 {
		return nil, errors.New("injected fetch failure")
	}
	return f.chunkFetcher.Fetch(ctx, req)
}

// TestRestoreRetriesFailedFetches restores through a fetcher that fails
// every third fetch, every way: each failure must be counted in
// joiner_fetch_errors_total and retried, and every tick stored.
func TestRestoreRetriesFailedFetches(t *testing.T) {
	for _, mode := range restoreModes {
		t.Run(mode, func(t *testing.T) {
			calls := new(atomic.Int64)
			rig := newRestoreRig(t, func(f *fakeFetcher) Fetcher { return flakyFetcher{chunkFetcher{f, 4}, calls} })
			restoreMode(t, rig.st.env, mode)
			for off := range int64(30) {
				rig.f.produce("market", 0, 1000+off, "X", tickJSON("X", float64(off)+0.5))
			}
			r := newPartitionReader(rig.st.env.client, "market", 0, 0, time.Millisecond)
			n, ok := rig.st.restore(context.Background(), r, 30, 0, rig.st.env.log)
			if !ok || n != 30 || rig.st.appliedOffset() != 29 {
				t.Fatalf("restore: ok %v, %d records, applied offset %d; want true, 30 and 29", ok, n, rig.st.appliedOffset())
			}
			h, err := rig.st.store.History("X")
			if err != nil || len(h) != 30 {
				t.Fatalf("%d versions stored (%v), want 30", len(h), err)
			}
			// A fetch that failed as the restore ended is not counted.
			if failed := counterValue(rig.st.env.metrics.FetchErrors); failed == 0 || failed > calls.Load()/3 {
				t.Fatalf("joiner_fetch_errors_total = %v after %d fetches, want one in three", failed, calls.Load())
			}
		})
	}
}
