// The bulk load of a long restore (Config.BulkRestoreMin): the market
// read in ranges at once, decoded, sorted in memory and ingested as
// tables (statestore.Loader).

package join

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/joiner-dev/joiner/statestore"
)

// DefaultBulkRestoreMin is Config.BulkRestoreMin's default. Below it, a
// table and its fsync would cost a restore more than they save.
const DefaultBulkRestoreMin = 20000

// A bulk-loaded restore (Config.BulkRestoreMin) keeps the ticks in memory,
// about 40 bytes each, and ingests them in chunks of restoreLoadMaxTicks
// records at most (taskEnv.load: the tests restore short partitions every
// way).
const restoreLoadMaxTicks = 1 << 20

// restoreStreams is how many ranges of a bulk-loaded chunk are fetched at
// once, each on its own connection (kafka-go's Transport opens one per
// request in flight), when each range has at least half of
// Config.BulkRestoreMin records: kafka-go decodes a fetch response on its
// connection's goroutine, and one stream's fetch-and-decode is what bounds
// a raw consume. (taskEnv.load: the tests restore short partitions every
// way.)
const restoreStreams = 2

// restoreLoaded is restore for a long restore: it bulk-loads the store
// (statestore.Loader) in chunks of at most restoreLoadMaxTicks records,
// each read in restoreStreams ranges at once and committed as one load.
// The reader is left after the last chunk committed.
func (s *stateTask) restoreLoaded(ctx context.Context, r *partitionReader, end, dlqFrom int64, log *slog.Logger) (int64, bool) {
	// The worker-wide budget first: the Loader holds up to a chunk.
	held, err := s.env.restoreBudget.acquire(ctx, min(end-r.Next, int64(s.env.load.maxTicks)))
	if err != nil {
		return 0, false
	}
	defer s.env.restoreBudget.release(held)
	load := &restoreLoad{l: s.store.NewLoader(int(min(end-r.Next, int64(s.env.load.maxTicks)))), last: -1, maxTs: -1}
	// Tick buffers go back to the readers once added (the Loader keeps
	// none of them).
	free := make(chan []statestore.Tick, 2*s.env.load.streams+2)
	var n int64
	lastLog := time.Now()
	for r.Next < end {
		from, to := r.Next, min(r.Next+int64(s.env.load.maxTicks), end)
		streams := max(1, min(int64(s.env.load.streams), (to-from)/max(s.env.limits.BulkRestoreMin/2, 1)))
		fctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		dch := make(chan decodedBatch, 2*streams)
		for i := range streams {
			a, b := from+(to-from)*i/streams, from+(to-from)*(i+1)/streams
			s.readRange(fctx, &wg, readerAt(r, a), b, dlqFrom, dch, free, log)
		}
		go func() { wg.Wait(); close(dch) }()
		ok := true
		for d := range dch {
			if !ok {
				continue // drain until the readers stopped
			}
			if err := s.loadDecodedRetrying(ctx, load, d); err != nil {
				ok = false
				stop()
				continue
			}
			select {
			case free <- d.ticks[:0]:
			default:
			}
			n += int64(d.n)
			s.rc.done.Store(n)
			s.countRestored(d.n)
			s.observeEnd(d.hwm)
			if time.Since(lastLog) >= time.Second {
				log.Info("restoring", "from_offset", from, "to_offset", to, "end_offset", end, "records", n)
				lastLog = time.Now()
			}
		}
		stop()
		if !ok || ctx.Err() != nil {
			return n, false // r stays after the last chunk committed
		}
		if err := s.commitLoadRetrying(ctx, load); err != nil {
			return n, false
		}
		r.Next = to
		s.advance(to, -1)
	}
	return n, true
}

// readRange reads r up to offset to in a goroutine owned by wg, decoding
// each fetch (without the records at or after to) into a batch sent to
// dch, in a tick buffer from free when it has one, fetch failures retried
// with backoff, until it reaches to or ctx is done.
func (s *stateTask) readRange(ctx context.Context, wg *sync.WaitGroup, r *partitionReader, to, dlqFrom int64, dch chan<- decodedBatch, free <-chan []statestore.Tick, log *slog.Logger) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for r.Next < to {
			recs, _, ok := s.env.fetchRetrying(ctx, r, log)
			if !ok {
				return
			}
			if i := slices.IndexFunc(recs, func(rec fetchedRecord) bool { return rec.Offset >= to }); i >= 0 {
				recs = recs[:i] // the next range's
			}
			if len(recs) == 0 {
				continue
			}
			var d decodedBatch
			select {
			case d.ticks = <-free:
			default:
			}
			s.decodeInto(&d, recs, dlqFrom)
			d.next, d.hwm = r.Next, r.HWM
			select {
			case dch <- d:
			case <-ctx.Done():
				return
			}
		}
	}()
}

// restoreLoad is a restore's bulk load: its Loader, and what the ticks
// added since its last Commit cover.
type restoreLoad struct {
	l     *statestore.Loader
	last  int64 // greatest offset of the records read, -1 for none
	maxTs int64 // greatest record timestamp read (ms), -1 for none
	added bool  // records were read since the last Commit
}

// loadDecodedRetrying routes the dead letters of d (retried with backoff
// until ctx is done), then adds its ticks to the load: they are stored by
// the next commitLoadRetrying.
func (s *stateTask) loadDecodedRetrying(ctx context.Context, load *restoreLoad, d decodedBatch) error {
	if d.n == 0 {
		return nil
	}
	w := s.env
	w.metrics.Records.WithLabelValues(w.topics.Market).Add(float64(d.n))
	if len(d.dead) > 0 {
		if err := s.storeRetrying(ctx, "dead-lettering malformed market records failed; retrying", func(ctx context.Context) error {
			return w.writeOut(ctx, nil, d.dead)
		}); err != nil {
			return err
		}
	}
	s.rc.dead.Add(int64(len(d.dead)))
	load.l.Add(d.ticks)
	// The ranges of a chunk come in any order.
	load.last, load.maxTs, load.added = max(load.last, d.last), max(load.maxTs, d.maxTs), true
	return nil
}

// commitLoadRetrying stores what the load holds, with the offset of the
// last record read, failures retried with backoff. It fails only when ctx
// is done or the store was closed.
func (s *stateTask) commitLoadRetrying(ctx context.Context, load *restoreLoad) error {
	if !load.added {
		return nil
	}
	began := time.Now()
	defer func() { s.loadCommits += time.Since(began) }()
	if err := s.storeRetrying(ctx, "storing restored market records failed; retrying", func(context.Context) error {
		return load.l.Commit(load.last)
	}, "offset", load.last); err != nil {
		return err
	}
	s.advance(load.last+1, load.maxTs)
	load.added, load.maxTs = false, -1
	return nil
}
