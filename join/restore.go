package join

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/joiner-dev/joiner/record"
	"github.com/joiner-dev/joiner/statestore"
	"github.com/segmentio/kafka-go"
)

// errTaskStopped is returned to callers waiting on a state task that was
// stopped (its task left this member).
var errTaskStopped = errors.New("task stopped on this member")

// Roles of a state task: the active one (this member owns the task) or a
// copy kept for a failover: a standby, or a warm-up (a standby the plan
// will make active once it is caught up).
const (
	roleActive  = "active"
	roleStandby = "standby"
	roleWarmup  = "warmup"
)

// stateTask owns the state of one task: the Pebble store of partition p of
// the market topic. It restores the store from the market topic, then tails
// it, applying each fetched batch of ticks with its offset in one Pebble
// batch.
//
// A standby (or warm-up) state task does the same into its own store, but
// never dead-letters, is never committed, serves no lookups and has no
// process task; the Processor keeps it apart (Processor.standbys).
type stateTask struct {
	w *Processor
	p int

	// role is roleActive, roleStandby or roleWarmup; a standby may switch
	// between the last two while it runs. Set before the task starts.
	role atomic.Value
	// fromCopy is set on an active task whose store was this member's
	// standby or warm-up copy: what it restores counts as a failover.
	fromCopy bool

	restored chan struct{} // closed when the restore is complete
	stopped  chan struct{} // closed when run returns

	// store is safe for concurrent use; after its Close every method
	// returns statestore.ErrClosed (errTaskStopped here) and
	// AppliedOffset keeps its last value for the final commit.
	store *statestore.Store

	// prunedCut is the cut of the last successful prune; owned by run.
	prunedCut int64
	// bulk is set by restore when it bulk-loads the store, and
	// loadCommits is the time its load commits took (sorting and writing
	// the tables after the chunk's last fetch, and Pebble's ingest);
	// owned by run.
	bulk        bool
	loadCommits time.Duration

	// merged is set when this member also processes the task's
	// notifications: the process task then drives the tail (runMerged)
	// and this task only restores.
	merged bool
	// dlqFrom and resumeAt are set before restored is closed: malformed
	// ticks at or after dlqFrom are dead-lettered (earlier ones were by a
	// previous owner), and resumeAt is the market offset after the restore.
	dlqFrom, resumeAt int64

	// committedTs is the timestamp of the newest notification of this task
	// whose offset the group has committed (set by the committer when the
	// task is merged), -1 before one is: pruning keeps the history that a
	// replay from the committed offset can ask for.
	committedTs atomic.Int64
	// joinedTs is the greatest timestamp of a notification joined with
	// this task's prices (by its merge, a lookup of another task or a
	// remote one), -1 before one is: a tick applied at or before it
	// arrived too late for that join (joiner_ticks_late_total).
	joinedTs atomic.Int64

	// progress, guarded by pmu; changed is closed and replaced on each
	// update so waiters can select on it.
	pmu      sync.Mutex
	next     int64 // next market offset to read
	lastTsMs int64 // greatest record timestamp applied
	changed  chan struct{}

	// rc is the task's restore progress and market counts for
	// TaskStatus (taskstatus.go).
	rc restoreCounters
}

func newStateTask(w *Processor, p int, store *statestore.Store, merged bool) *stateTask {
	s := &stateTask{
		w:        w,
		p:        p,
		merged:   merged,
		store:    store,
		restored: make(chan struct{}),
		stopped:  make(chan struct{}),
		next:     store.AppliedOffset() + 1,
		lastTsMs: -1,
		changed:  make(chan struct{}),
	}
	s.committedTs.Store(-1)
	s.joinedTs.Store(-1)
	s.role.Store(roleActive)
	s.rc.init()
	return s
}

// newStandbyTask is a standby state task of p on store; warmup marks a
// warm-up copy.
func newStandbyTask(w *Processor, p int, store *statestore.Store, warmup bool) *stateTask {
	s := newStateTask(w, p, store, false)
	s.setRole(warmup)
	return s
}

// setRole makes a standby task a warm-up or a plain standby.
func (s *stateTask) setRole(warmup bool) {
	if warmup {
		s.role.Store(roleWarmup)
	} else {
		s.role.Store(roleStandby)
	}
}

func (s *stateTask) roleName() string { return s.role.Load().(string) }

func (s *stateTask) isStandby() bool { return s.roleName() != roleActive }

// restoreReason is the reason label of the records this task applies
// outside an active tail.
func (s *stateTask) restoreReason() string {
	switch r := s.roleName(); {
	case r != roleActive:
		return r // ReasonStandby, ReasonWarmup
	case s.fromCopy:
		return ReasonFailover
	default:
		return ReasonMove
	}
}

// countRestored counts n records applied by the restore, or by the tail of
// a standby, in joiner_restore_records_total.
func (s *stateTask) countRestored(n int) {
	if n > 0 {
		s.w.metrics.RestoreRecords.WithLabelValues(s.restoreReason()).Add(float64(n))
	}
}

// observeEnd records the market's end offset (a fetch's high watermark)
// for the task's market lag (TaskStatus) and sets a standby's lag gauge
// from it.
func (s *stateTask) observeEnd(hwm int64) {
	s.rc.hwm.Store(hwm)
	if hwm < 0 || !s.isStandby() {
		return
	}
	s.w.metrics.StandbyLag.WithLabelValues(taskLabel(s.p)).Set(float64(max(hwm-(s.appliedOffset()+1), 0)))
}

// isRestored reports whether the restore is complete.
func (s *stateTask) isRestored() bool {
	select {
	case <-s.restored:
		return true
	default:
		return false
	}
}

// marketCommit is the market offset to commit for this task: the next one
// after the store's applied offset, never below the group's committed
// offset. ok is false until the task is restored (a store restored from
// scratch starts below the committed offset).
func (s *stateTask) marketCommit() (next int64, ok bool) {
	if !s.isRestored() {
		return 0, false
	}
	return max(s.appliedOffset()+1, s.dlqFrom), true
}

// appliedOffset is the offset of the last market record in the store, -1
// when none.
func (s *stateTask) appliedOffset() int64 { return s.store.AppliedOffset() }

// taskStoppedErr maps the store's ErrClosed to errTaskStopped.
func taskStoppedErr(err error) error {
	if errors.Is(err, statestore.ErrClosed) {
		return errTaskStopped
	}
	return err
}

// getAsOf reads the version of symbol's price as of tsMs from the store.
func (s *stateTask) getAsOf(symbol string, tsMs int64) (statestore.Tick, statestore.Match, error) {
	if tsMs != math.MaxInt64 { // not the latest price (/v1/prices without at_ms): a join
		s.noteJoined(tsMs)
	}
	tick, match, err := s.store.GetAsOf(symbol, tsMs)
	return tick, match, taskStoppedErr(err)
}

// noteJoined records that a notification at tsMs is joined with this
// task's prices.
func (s *stateTask) noteJoined(tsMs int64) {
	if tsMs > s.joinedTs.Load() { // one writer per task in the common case
		for {
			old := s.joinedTs.Load()
			if tsMs <= old || s.joinedTs.CompareAndSwap(old, tsMs) {
				return
			}
		}
	}
}

// countLate counts and logs (rate-limited) the ticks of a batch just
// stored that are at or before a notification already joined on the task:
// they came later than the grace. Alerts already written keep the price
// they had; later lookups see these ticks.
func (s *stateTask) countLate(ticks []statestore.Tick) {
	joined := s.joinedTs.Load()
	if joined < 0 {
		return
	}
	late := 0
	var first statestore.Tick
	for _, t := range ticks {
		if t.TimestampMs <= joined {
			if late == 0 {
				first = t
			}
			late++
		}
	}
	if late == 0 {
		return
	}
	s.w.metrics.TicksLate.Add(float64(late))
	s.w.lateLog.Warn("late-tick/"+strconv.Itoa(s.p), "ticks arrived after a notification at or after their time was joined on their task (later than the grace); stored for later lookups, alerts already written are not corrected",
		"task", s.p, "topic", s.w.cfg.Topics.Market, "late_ticks", late, "symbol", first.Symbol, "tick_ts_ms", first.TimestampMs, "offset", first.Offset, "joined_ts_ms", joined, "grace", s.w.cfg.Grace)
}

// pruneCut is the time before which the task's history may go: the
// retention before the newest committed notification (a replay after a
// crash starts there), or, for a task whose notifications are processed
// elsewhere, before the newest tick read. ok is false when nothing can be
// pruned yet.
func (s *stateTask) pruneCut() (cut int64, ok bool) {
	ref := s.committedTs.Load()
	if !s.merged {
		s.pmu.Lock()
		ref = s.lastTsMs
		s.pmu.Unlock()
	}
	if ref < 0 {
		return 0, false
	}
	return ref - s.w.cfg.HistoryRetention.Milliseconds(), true
}

// keeps reports whether pruning keeps every version at tsMs: it is newer
// than the cut (or nothing can be pruned yet).
func (s *stateTask) keeps(tsMs int64) bool {
	cut, ok := s.pruneCut()
	return !ok || tsMs > cut
}

// prune drops the history the task can no longer be asked for (see
// statestore.Store.Prune).
func (s *stateTask) prune(log *slog.Logger) {
	cut, ok := s.pruneCut()
	if !ok || cut <= s.prunedCut {
		return
	}
	began := time.Now()
	n, err := s.store.Prune(cut)
	if errors.Is(err, statestore.ErrClosed) {
		return // the task stopped
	}
	if err != nil {
		log.Warn("pruning the price history failed; retrying at the next interval", "cut_ms", cut, "err", err)
		return
	}
	s.prunedCut = cut
	s.w.metrics.PruneSeconds.Observe(time.Since(began).Seconds())
	if n > 0 {
		log.Debug("pruned the price history", "cut_ms", cut, "symbols", n)
	}
}

// pruneInterval is how often a task prunes its history: a sixtieth of the
// retention, between 1s and 1m.
func (w *Processor) pruneInterval() time.Duration {
	return min(max(w.cfg.HistoryRetention/60, time.Second), time.Minute)
}

// close closes the store; readers after it get errTaskStopped.
func (s *stateTask) close() error {
	if err := s.store.Close(); err != nil && !errors.Is(err, statestore.ErrClosed) {
		return err
	}
	return nil
}

// run restores the task, then tails the market partition until ctx is
// done.
func (s *stateTask) run(ctx context.Context) {
	defer close(s.stopped)
	w := s.w
	log := w.log.With("task", s.p, "topic", w.cfg.Topics.Market)
	// A copy that a standby kept (here, or before a restart) applied its
	// malformed ticks without dead-lettering them: see below.
	wasCopy := s.fromCopy || s.store.Standby()
	// Record the store's role on disk, so that after a restart a standby
	// copy is held (Processor.Held) but not claimed as owned (Owned).
	if err := s.store.SetStandby(s.isStandby()); err != nil {
		log.Warn("cannot record the role of the task store; after a restart it may be reported as owned", "role", s.roleName(), "err", err)
	}
	r := w.reader(w.cfg.Topics.Market, s.p, s.appliedOffset()+1)
	// Market records below the group's committed market offset were routed
	// by an earlier owner; dead-letter only the ones after it. A standby
	// dead-letters nothing: the active owner does.
	dlqFrom := int64(math.MaxInt64)
	if !s.isStandby() {
		var err error
		if dlqFrom, err = w.committedOffset(ctx, w.cfg.Topics.Market, s.p); err != nil {
			return
		}
	}
	s.dlqFrom = dlqFrom
	if wasCopy && !s.isStandby() && s.appliedOffset() >= dlqFrom {
		// The standby skipped the malformed ticks after the group's
		// committed market offset, which the dead owner may not have
		// routed yet: route them now, so none silently vanishes.
		if !s.deadLetterCopied(ctx, dlqFrom, s.appliedOffset()+1, log) {
			return
		}
	}

	began := time.Now()
	var first, end int64
	var err error
	for attempt := 0; ; attempt++ {
		first, end, err = r.Bounds(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		log.Warn("cannot read the offsets to restore to; retrying", "err", err)
		w.noteTaskErr(s.p, fmt.Errorf("reading the offsets of %s-%d: %w", w.cfg.Topics.Market, s.p, err))
		if sleep(ctx, backoff(attempt)) != nil {
			return
		}
	}
	if r.Next < first {
		// A new store, or one older than the log's retention: the log
		// holds nothing before first.
		r.Next = first
	}
	s.rc.began.Store(began.UnixNano())
	s.rc.from.Store(r.Next)
	s.rc.end.Store(end)
	log.Info("restore started", "from_offset", r.Next, "end_offset", end, "role", s.roleName(), "reason", s.restoreReason())
	s.observeEnd(end)
	restoredRecords, ok := s.restore(ctx, r, end, dlqFrom, log)
	if !ok {
		return
	}
	secs := time.Since(began).Seconds()
	if !s.isStandby() {
		// Stats and joiner_restore_seconds cover what kept an active task
		// from processing; a standby's catch-up is counted by reason only.
		w.metrics.RestoreSeconds.Observe(secs)
		w.restoredRecords.Add(restoredRecords)
	}
	s.resumeAt = r.Next
	close(s.restored)
	w.updateTaskGauges()
	attrs := []any{"records", restoredRecords, "seconds", secs, "applied_offset", s.appliedOffset(), "bulk", s.bulk}
	if s.bulk {
		attrs = append(attrs, "store_seconds", s.loadCommits.Seconds())
	}
	log.Info("restore complete", attrs...)
	s.prunedCut = math.MinInt64
	prune := time.NewTicker(w.pruneInterval())
	defer prune.Stop()
	if s.merged {
		// The process task reads the market from here, merged with the
		// notifications; this goroutine only prunes.
		for {
			select {
			case <-ctx.Done():
				return
			case <-prune.C:
				s.prune(log)
			}
		}
	}
	for {
		if _, ok := s.step(ctx, r, dlqFrom, log); !ok {
			return
		}
		select {
		case <-prune.C:
			s.prune(log)
		default:
		}
	}
}

// How far a restore reads ahead of what it applies, in fetches, and how
// many records it applies in one Pebble batch at most (once it has that
// many fetched).
const (
	restorePrefetch     = 8
	restoreBatchRecords = 50000
)

// DefaultBulkRestoreMin is Config.BulkRestoreMin's default. Below it, a
// table and its fsync would cost a restore more than they save.
const DefaultBulkRestoreMin = 20000

// A bulk-loaded restore (Config.BulkRestoreMin) keeps the ticks in memory,
// about 40 bytes each, and ingests them in chunks of restoreLoadMaxTicks
// records at most.
//
// Both are variables for the tests, which restore short partitions every
// way: restoreLoadMin is the default of Config.BulkRestoreMin.
var (
	restoreLoadMin      int64 = DefaultBulkRestoreMin
	restoreLoadMaxTicks       = 1 << 20
)

// restore reads r up to end and applies what it reads, the next fetches
// running while a batch is applied, or for a long restore bulk-loads it
// (Config.BulkRestoreMin). It leaves r at the offset after the last record the
// store holds, and returns the number of records read and false when ctx
// is done or the store closed.
func (s *stateTask) restore(ctx context.Context, r *partitionReader, end, dlqFrom int64, log *slog.Logger) (int64, bool) {
	w := s.w
	if r.Next >= end {
		return 0, true
	}
	if m := w.cfg.BulkRestoreMin; m >= 0 && end-r.Next >= m {
		s.bulk = true
		return s.restoreLoaded(ctx, r, end, dlqFrom, log)
	}
	next := r.Next // r belongs to the prefetcher from here until it stops
	fctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	ch := w.prefetch(fctx, &wg, r, restorePrefetch, log)
	// Tick buffers go back to the decoder once applied (the store keeps
	// none): one being decoded, one waiting and one being applied.
	free := make(chan []statestore.Tick, 3)
	dch := s.decodeAhead(fctx, &wg, ch, free, end, dlqFrom)
	defer func() {
		// The reader may have fetched past what was applied: go on from
		// what was.
		stop()
		wg.Wait()
		r.Next = next
	}()
	var n int64
	lastLog := time.Now()
	for next < end {
		var f decodedBatch
		select {
		case f = <-dch:
		case <-ctx.Done():
			return n, false
		}
		if err := s.applyDecodedRetrying(ctx, f); err != nil {
			return n, false
		}
		select {
		case free <- f.ticks[:0]:
		default:
		}
		next = f.next
		s.advance(next, -1)
		n += int64(f.n)
		s.rc.done.Store(n)
		s.countRestored(f.n)
		s.observeEnd(f.hwm)
		if time.Since(lastLog) >= time.Second {
			log.Info("restoring", "offset", next, "end_offset", end, "records", n)
			lastLog = time.Now()
		}
	}
	return n, true
}

// restoreStreams is how many ranges of a bulk-loaded chunk are fetched at
// once, each on its own connection (kafka-go's Transport opens one per
// request in flight), when each range has at least half of
// Config.BulkRestoreMin records: kafka-go decodes a fetch response on its
// connection's goroutine, and one stream's fetch-and-decode is what bounds
// a raw consume. A variable for the tests.
var restoreStreams = 2

// restoreLoaded is restore for a long restore: it bulk-loads the store
// (statestore.Loader) in chunks of at most restoreLoadMaxTicks records,
// each read in restoreStreams ranges at once and committed as one load.
// The reader is left after the last chunk committed.
func (s *stateTask) restoreLoaded(ctx context.Context, r *partitionReader, end, dlqFrom int64, log *slog.Logger) (int64, bool) {
	load := &restoreLoad{l: s.store.NewLoader(int(min(end-r.Next, int64(restoreLoadMaxTicks)))), last: -1, maxTs: -1}
	// Tick buffers go back to the readers once added (the Loader keeps
	// none of them).
	free := make(chan []statestore.Tick, 2*restoreStreams+2)
	var n int64
	lastLog := time.Now()
	for r.Next < end {
		from, to := r.Next, min(r.Next+int64(restoreLoadMaxTicks), end)
		streams := max(1, min(int64(restoreStreams), (to-from)/max(s.w.cfg.BulkRestoreMin/2, 1)))
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
			recs, _, ok := s.w.fetchRetrying(ctx, r, log)
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
	w := s.w
	w.metrics.Records.WithLabelValues(w.cfg.Topics.Market).Add(float64(d.n))
	for attempt := 0; len(d.dead) > 0; attempt++ {
		err := w.writeOut(ctx, nil, d.dead)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return err
		}
		w.log.Warn("dead-lettering malformed market records failed; retrying", "task", s.p, "err", err)
		w.noteTaskErr(s.p, err)
		if err := sleep(ctx, backoff(attempt)); err != nil {
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
	for attempt := 0; ; attempt++ {
		err := load.l.Commit(load.last)
		if err == nil {
			break
		}
		err = taskStoppedErr(err)
		if ctx.Err() != nil || errors.Is(err, errTaskStopped) {
			return err
		}
		s.w.log.Warn("storing restored market records failed; retrying", "task", s.p, "offset", load.last, "err", err)
		s.w.noteTaskErr(s.p, err)
		if err := sleep(ctx, backoff(attempt)); err != nil {
			return err
		}
	}
	s.advance(load.last+1, load.maxTs)
	load.added, load.maxTs = false, -1
	return nil
}

// deadLetterCopied dead-letters the malformed records of market-p in
// [from, to), which a standby copy applied without routing them, and
// reports false when ctx ended first. Ticks are not applied again: the
// store holds them. Records routed by the previous owner too are written
// twice (at least once).
func (s *stateTask) deadLetterCopied(ctx context.Context, from, to int64, log *slog.Logger) bool {
	w := s.w
	r := w.reader(w.cfg.Topics.Market, s.p, from)
	routed := 0
	for attempt := 0; r.Next < to; {
		recs, err := r.Fetch(ctx)
		if err == nil {
			recs = slices.DeleteFunc(recs, func(rec fetchedRecord) bool { return rec.Offset >= to })
			var d decodedBatch
			if s.decodeInto(&d, recs, from); len(d.dead) > 0 {
				if err = w.writeOut(ctx, nil, d.dead); err == nil {
					routed += len(d.dead)
				}
			}
		}
		if ctx.Err() != nil {
			return false
		}
		if err != nil {
			// Nothing is skipped: the reader goes back to the first
			// record of the failed round.
			if len(recs) > 0 {
				r.Next = recs[0].Offset
			}
			log.Warn("dead-lettering the malformed ticks a standby copy skipped; retrying", "from_offset", r.Next, "to_offset", to, "err", err)
			if sleep(ctx, backoff(attempt)) != nil {
				return false
			}
			attempt++
			continue
		}
		attempt = 0
	}
	s.rc.dead.Add(int64(routed))
	if routed > 0 {
		log.Info("dead-lettered the malformed ticks its standby copy had skipped", "records", routed, "from_offset", from, "to_offset", to)
	}
	return true
}

// decodedBatch is a batch of market records, decoded: the ticks to apply,
// the dead letters to route first, and what the store and the waiters
// need to know of the records themselves.
type decodedBatch struct {
	ticks []statestore.Tick
	dead  []deadLetter
	n     int   // records in the batch
	last  int64 // offset of the last record
	maxTs int64 // greatest record timestamp (ms)
	next  int64 // the reader's position after the batch
	hwm   int64 // the partition's high watermark of the last fetch
}

// decodeAhead decodes the restore's fetches in a goroutine owned by wg
// (stopped by ctx), so that the next batch is decoded while one is
// written to the store. The fetches that came in meanwhile are decoded
// together, up to restoreBatchRecords: one Pebble batch, not one per
// fetch. Tick buffers are taken from free when it has one.
func (s *stateTask) decodeAhead(ctx context.Context, wg *sync.WaitGroup, ch <-chan fetched, free <-chan []statestore.Tick, end, dlqFrom int64) <-chan decodedBatch {
	dch := make(chan decodedBatch, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			var f fetched
			select {
			case f = <-ch:
			case <-ctx.Done():
				return
			}
			var d decodedBatch
			select {
			case d.ticks = <-free:
			default:
			}
			s.decodeInto(&d, f.recs, dlqFrom)
			d.next, d.hwm = f.next, f.hwm
		more:
			for d.n < restoreBatchRecords && d.next < end {
				select {
				case g := <-ch:
					s.decodeInto(&d, g.recs, dlqFrom)
					d.next, d.hwm = g.next, g.hwm
				default:
					break more
				}
			}
			select {
			case dch <- d:
			case <-ctx.Done():
				return
			}
		}
	}()
	return dch
}

// applyDecodedRetrying applies a decoded batch (applyDecoded), failures
// retried with backoff. It fails only when ctx is done or the store was
// closed.
func (s *stateTask) applyDecodedRetrying(ctx context.Context, d decodedBatch) error {
	if d.n == 0 {
		return nil
	}
	for attempt := 0; ; attempt++ {
		err := s.applyDecoded(ctx, d)
		if err == nil {
			break
		}
		if ctx.Err() != nil || errors.Is(err, errTaskStopped) {
			return err
		}
		s.w.log.Warn("applying market records failed; retrying", "task", s.p, "err", err)
		s.w.noteTaskErr(s.p, err)
		if err := sleep(ctx, backoff(attempt)); err != nil {
			return err
		}
	}
	s.advance(d.last+1, d.maxTs)
	return nil
}

// step fetches once and applies what it got. It returns the number of
// records read and false when ctx is done or the store closed.
func (s *stateTask) step(ctx context.Context, r *partitionReader, dlqFrom int64, log *slog.Logger) (int, bool) {
	recs, _, ok := s.w.fetchRetrying(ctx, r, log)
	if !ok {
		return 0, false
	}
	if err := s.applyRetrying(ctx, recs, dlqFrom); err != nil {
		return 0, false
	}
	s.advance(r.Next, -1)
	s.observeEnd(r.HWM)
	if s.isStandby() {
		s.countRestored(len(recs))
	}
	return len(recs), true
}

// applyRetrying decodes recs and applies them (applyDecodedRetrying):
// malformed ticks at or after dlqFrom are dead-lettered first, then the
// valid ticks and the offset of the last record go to the store in one
// batch, failures retried with backoff. It fails only when ctx is done or
// the store was closed.
func (s *stateTask) applyRetrying(ctx context.Context, recs []fetchedRecord, dlqFrom int64) error {
	_, err := s.applyTicks(ctx, recs, dlqFrom)
	return err
}

// applyTicks is applyRetrying returning the ticks applied (the merge keeps
// its newest versions).
func (s *stateTask) applyTicks(ctx context.Context, recs []fetchedRecord, dlqFrom int64) ([]statestore.Tick, error) {
	var d decodedBatch
	s.decodeInto(&d, recs, dlqFrom)
	return d.ticks, s.applyDecodedRetrying(ctx, d)
}

// decodeInto adds recs to d: their ticks, and the malformed ones at or
// after dlqFrom as dead letters. It is where every market record is
// judged, for a restore, a bulk load, the tail of an unmerged or standby
// task and the merge alike: a tick is stored only if it decodes, its
// price is a finite number greater than zero, and its record key is its
// symbol (record.CheckKey; a tick keyed otherwise was written to its
// key's partition, which may not be its symbol's task).
func (s *stateTask) decodeInto(d *decodedBatch, recs []fetchedRecord, dlqFrom int64) {
	if len(recs) == 0 {
		return
	}
	w := s.w
	if d.n == 0 {
		d.maxTs = math.MinInt64
	}
	d.ticks = slices.Grow(d.ticks, len(recs))
	for i := range recs {
		rec := &recs[i]
		ts := rec.Time.UnixMilli()
		d.maxTs = max(d.maxTs, ts)
		// The fetched value is never written again (package fetch), so
		// the tick's symbol may alias it: the store copies what it keeps.
		t, err := w.dec.Tick(rec.Value)
		if err == nil {
			err = record.CheckKey(rec.Key, t.Symbol)
		}
		if err != nil {
			if rec.Offset >= dlqFrom {
				d.dead = append(d.dead, newDeadLetter(w.cfg.Topics.Market, s.p, *rec, err))
			}
			continue
		}
		d.ticks = append(d.ticks, statestore.Tick{Symbol: t.Symbol, Price: t.Price, TimestampMs: ts, Offset: rec.Offset})
	}
	d.n += len(recs)
	d.last = recs[len(recs)-1].Offset
}

// applyDecoded writes the dead letters of d, then its ticks and the offset
// of its last record in one batch.
func (s *stateTask) applyDecoded(ctx context.Context, d decodedBatch) error {
	w := s.w
	w.metrics.Records.WithLabelValues(w.cfg.Topics.Market).Add(float64(d.n))
	if len(d.dead) > 0 {
		if err := w.writeOut(ctx, nil, d.dead); err != nil {
			return err
		}
		s.rc.dead.Add(int64(len(d.dead)))
	}
	if err := s.store.Apply(d.ticks, d.last); err != nil {
		return fmt.Errorf("task %d: %w", s.p, taskStoppedErr(err))
	}
	s.countLate(d.ticks)
	return nil
}

// advance publishes the read position, and the greatest record timestamp
// read (maxTs, or -1), to waiters.
func (s *stateTask) advance(next, maxTs int64) {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	s.next = max(s.next, next)
	s.lastTsMs = max(s.lastTsMs, maxTs)
	close(s.changed)
	s.changed = make(chan struct{})
}

// waitFor blocks until the task has been read past tsMs, or up to the
// partition's end as it was once the wait began. This is what aligns a
// notification with the ticks before it: a tick produced before a
// notification is in the store once waitFor returns nil. While the market
// cannot be read (no leader, broker down), it re-checks every idle and logs
// once that it is still waiting. It gives up after limit with
// errNotReadPast, never by answering early, because a join before the
// market is read could miss a tick; ctx or the task stopping end it early
// (with their error).
//
// No caller waits without a limit: a merged task's market advances in its
// own merge loop, so two merge loops each waiting for the other's market
// without one would wait for ever (see runMerged's lookup retries, which
// go on reading their market).
func (s *stateTask) waitFor(ctx context.Context, tsMs int64, idle, limit time.Duration) error {
	recheck := time.NewTimer(idle)
	defer recheck.Stop()
	expire := time.NewTimer(limit)
	defer expire.Stop()
	end := int64(-1) // the end offset, read once the task is restored
	began := time.Now()
	warned := false
	// With a grace, the market must be read past tsMs + grace, or be
	// found at its end no earlier than that time by the clock.
	grace := s.w.cfg.Grace.Milliseconds()
	past := tsMs
	if grace > 0 && tsMs < math.MaxInt64-grace {
		past = tsMs + grace
	}
	var graceWait <-chan time.Time
	for {
		restored := s.isRestored()
		s.pmu.Lock()
		done := restored && (s.lastTsMs > past || (end >= 0 && s.next >= end))
		changed := s.changed
		s.pmu.Unlock()
		if done {
			return nil
		}
		if wait := time.Until(time.UnixMilli(past)); restored && end < 0 && grace > 0 && wait > 0 {
			if graceWait == nil {
				graceWait = time.After(wait)
			}
		} else if restored && end < 0 {
			// Not read past tsMs: wait until the reader reaches the end the
			// log has now, which includes every record produced before the
			// caller's.
			if e, err := listOffset(ctx, s.w.cfg.Client, s.w.cfg.Topics.Market, s.p, kafka.LastOffset); err == nil {
				end = e
				continue
			}
			s.w.metrics.FetchErrors.Inc() // retried at the next recheck
		}
		var restoring <-chan struct{}
		if !restored {
			restoring = s.restored
		}
		select {
		case <-changed:
		case <-restoring:
		case <-graceWait:
			graceWait = nil
		case <-s.stopped:
			return errTaskStopped
		case <-expire.C:
			return fmt.Errorf("%w: task %d, notification at %d ms, waited %v", errNotReadPast, s.p, tsMs, time.Since(began).Round(time.Millisecond))
		case <-recheck.C:
			if !warned && restored {
				warned = true
				s.w.log.Warn("a notification waits for the market to be read past its time; it is not joined before (the market partition may have no leader)",
					"task", s.p, "topic", s.w.cfg.Topics.Market, "notification_ts_ms", tsMs, "waited", time.Since(began).Round(time.Millisecond))
			}
			recheck.Reset(idle)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
