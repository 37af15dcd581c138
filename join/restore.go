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

	"github.com/joiner-dev/joiner/internal/backoff"
	"github.com/joiner-dev/joiner/record"
	"github.com/joiner-dev/joiner/statestore"
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
	env *taskEnv
	p   int

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

func newStateTask(env *taskEnv, p int, store *statestore.Store, merged bool) *stateTask {
	s := &stateTask{
		env:      env,
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
func newStandbyTask(env *taskEnv, p int, store *statestore.Store, warmup bool) *stateTask {
	s := newStateTask(env, p, store, false)
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
		s.env.metrics.RestoreRecords.WithLabelValues(s.restoreReason()).Add(float64(n))
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
	s.env.metrics.StandbyLag.WithLabelValues(taskLabel(s.p)).Set(float64(max(hwm-(s.appliedOffset()+1), 0)))
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
	s.env.metrics.TicksLate.Add(float64(late))
	s.env.lateLog.Warn("late-tick/"+strconv.Itoa(s.p), "ticks arrived after a notification at or after their time was joined on their task (later than the grace); stored for later lookups, alerts already written are not corrected",
		"task", s.p, "topic", s.env.topics.Market, "late_ticks", late, "symbol", first.Symbol, "tick_ts_ms", first.TimestampMs, "offset", first.Offset, "joined_ts_ms", joined, "grace", s.env.limits.Grace)
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
	return ref - s.env.limits.HistoryRetention.Milliseconds(), true
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
	s.env.metrics.PruneSeconds.Observe(time.Since(began).Seconds())
	if n > 0 {
		log.Debug("pruned the price history", "cut_ms", cut, "symbols", n)
	}
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
	log := s.env.log.With("task", s.p, "topic", s.env.topics.Market)
	r := s.env.reader(s.env.topics.Market, s.p, s.appliedOffset()+1)
	dlqFrom, ok := s.begin(ctx, log)
	if !ok {
		return
	}
	began := time.Now()
	end, ok := s.restoreBounds(ctx, r, log)
	if !ok {
		return
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
	s.restoreDone(began, restoredRecords, r.Next, log)
	s.tail(ctx, r, dlqFrom, log)
}

// begin records the store's role on disk and works out from which market
// offset malformed ticks are dead-lettered (dlqFrom); an active task whose
// store was a standby copy first routes the ones the copy skipped. It
// reports false when ctx ended first.
func (s *stateTask) begin(ctx context.Context, log *slog.Logger) (dlqFrom int64, ok bool) {
	// A copy that a standby kept (here, or before a restart) applied its
	// malformed ticks without dead-lettering them: see below.
	wasCopy := s.fromCopy || s.store.Standby()
	// Record the store's role on disk, so that after a restart a standby
	// copy is held (Processor.Held) but not claimed as owned (Owned).
	if err := s.store.SetStandby(s.isStandby()); err != nil {
		log.Warn("cannot record the role of the task store; after a restart it may be reported as owned", "role", s.roleName(), "err", err)
	}
	// Market records below the group's committed market offset were routed
	// by an earlier owner; dead-letter only the ones after it. A standby
	// dead-letters nothing: the active owner does.
	dlqFrom = int64(math.MaxInt64)
	if !s.isStandby() {
		var err error
		if dlqFrom, err = s.env.committedOffset(ctx, s.env.topics.Market, s.p); err != nil {
			return 0, false
		}
	}
	s.dlqFrom = dlqFrom
	if wasCopy && !s.isStandby() && s.appliedOffset() >= dlqFrom {
		// The standby skipped the malformed ticks after the group's
		// committed market offset, which the dead owner may not have
		// routed yet: route them now, so none silently vanishes.
		if !s.deadLetterCopied(ctx, dlqFrom, s.appliedOffset()+1, log) {
			return 0, false
		}
	}
	return dlqFrom, true
}

// restoreBounds reads the offsets the restore goes to (end) and from
// (r.Next, moved up to the log's first offset), failures retried with
// backoff; false when ctx ended first.
func (s *stateTask) restoreBounds(ctx context.Context, r *partitionReader, log *slog.Logger) (end int64, ok bool) {
	var first int64
	err := backoff.Do(ctx, backoff.Default, func(_ int, err error, _ time.Duration) error {
		if ctx.Err() != nil {
			return nil // stopped: Do returns ctx's error, nothing to log
		}
		log.Warn("cannot read the offsets to restore to; retrying", "err", err)
		s.env.noteTaskErr(s.p, fmt.Errorf("reading the offsets of %s-%d: %w", s.env.topics.Market, s.p, err))
		return nil
	}, func(ctx context.Context) (err error) {
		first, end, err = r.Bounds(ctx)
		return err
	})
	if err != nil {
		return 0, false
	}
	if r.Next < first {
		// A new store, or one older than the log's retention: the log
		// holds nothing before first.
		r.Next = first
	}
	return end, true
}

// restoreDone marks the restore complete, the market to be read on from
// resumeAt, and counts it.
func (s *stateTask) restoreDone(began time.Time, restoredRecords, resumeAt int64, log *slog.Logger) {
	w := s.env
	secs := time.Since(began).Seconds()
	if !s.isStandby() {
		// Stats and joiner_restore_seconds cover what kept an active task
		// from processing; a standby's catch-up is counted by reason only.
		w.metrics.RestoreSeconds.Observe(secs)
		w.restoredRecords.Add(restoredRecords)
	}
	s.resumeAt = resumeAt
	close(s.restored)
	w.taskGauges()
	attrs := []any{"records", restoredRecords, "seconds", secs, "applied_offset", s.appliedOffset(), "bulk", s.bulk}
	if s.bulk {
		attrs = append(attrs, "store_seconds", s.loadCommits.Seconds())
	}
	log.Info("restore complete", attrs...)
}

// tail prunes the restored task's history every pruneInterval and, unless
// the task is merged (its process task reads the market then), tails the
// market from r until ctx is done.
func (s *stateTask) tail(ctx context.Context, r *partitionReader, dlqFrom int64, log *slog.Logger) {
	s.prunedCut = math.MinInt64
	prune := time.NewTicker(s.env.pruneInterval())
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

// restore reads r up to end and applies what it reads, the next fetches
// running while a batch is applied, or for a long restore bulk-loads it
// (Config.BulkRestoreMin). It leaves r at the offset after the last record the
// store holds, and returns the number of records read and false when ctx
// is done or the store closed.
func (s *stateTask) restore(ctx context.Context, r *partitionReader, end, dlqFrom int64, log *slog.Logger) (int64, bool) {
	w := s.env
	if r.Next >= end {
		return 0, true
	}
	if m := w.limits.BulkRestoreMin; m >= 0 && end-r.Next >= m {
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
	if err := s.storeRetrying(ctx, "applying market records failed; retrying", func(ctx context.Context) error {
		return s.applyDecoded(ctx, d)
	}); err != nil {
		return err
	}
	s.advance(d.last+1, d.maxTs)
	return nil
}

// storeRetrying calls fn until it succeeds, each failure logged (msg,
// with attrs) and noted as the task's last error, with backoff. It fails
// only when ctx is done or the store was closed (errTaskStopped).
func (s *stateTask) storeRetrying(ctx context.Context, msg string, fn func(ctx context.Context) error, attrs ...any) error {
	return backoff.Do(ctx, backoff.Default, func(_ int, err error, _ time.Duration) error {
		s.env.log.Warn(msg, append(append([]any{"task", s.p}, attrs...), "err", err)...)
		s.env.noteTaskErr(s.p, err)
		return nil
	}, func(ctx context.Context) error {
		err := taskStoppedErr(fn(ctx))
		if err != nil && (ctx.Err() != nil || errors.Is(err, errTaskStopped)) {
			return backoff.Permanent(err)
		}
		return err
	})
}

// step fetches once and applies what it got. It returns the number of
// records read and false when ctx is done or the store closed.
func (s *stateTask) step(ctx context.Context, r *partitionReader, dlqFrom int64, log *slog.Logger) (int, bool) {
	recs, _, ok := s.env.fetchRetrying(ctx, r, log)
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
	w := s.env
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
				d.dead = append(d.dead, newDeadLetter(w.topics.Market, s.p, *rec, err))
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
	w := s.env
	w.metrics.Records.WithLabelValues(w.topics.Market).Add(float64(d.n))
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
