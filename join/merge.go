package join

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/joiner-dev/joiner/internal/backoff"
	"github.com/segmentio/kafka-go"
)

// fetched is one fetch of a prefetching reader: its records (possibly
// none), the reader's position and high watermark after it, and when the
// fetch was sent.
type fetched struct {
	recs []fetchedRecord
	next int64
	hwm  int64
	sent time.Time
}

// prefetch reads r in a goroutine owned by the caller (wg) until ctx is
// done, handing every fetch, empty ones too, to the returned channel,
// which holds up to depth fetches not yet taken.
func (w *taskEnv) prefetch(ctx context.Context, wg *sync.WaitGroup, r *partitionReader, depth int, log *slog.Logger) <-chan fetched {
	ch := make(chan fetched, depth)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			recs, sent, ok := w.fetchRetrying(ctx, r, log)
			if !ok {
				return
			}
			select {
			case ch <- fetched{recs: recs, next: r.Next, hwm: r.HWM, sent: sent}:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch
}

// fetchRetrying fetches once from r (fetch.Reader.FetchRetrying), a
// failure logged, counted and retried with backoff. It returns the records
// and when the fetch that returned them was sent, or false when ctx is
// done.
func (w *taskEnv) fetchRetrying(ctx context.Context, r *partitionReader, log *slog.Logger) ([]fetchedRecord, time.Time, bool) {
	recs, sent, err := r.FetchRetrying(ctx, func(err error) {
		log.Warn("fetch failed; retrying", "topic", r.Topic, "offset", r.Next, "err", err)
		w.metrics.FetchErrors.Inc()
		w.noteTaskErr(r.Partition, fmt.Errorf("fetching %s-%d at offset %d: %w", r.Topic, r.Partition, r.Next, err))
	})
	return recs, sent, err == nil
}

// Bounds of the merge: how many records one side buffers before its reader
// waits, and how many notifications are joined in one chunk, whose alerts
// are written while the next chunk is joined.
const (
	mergeBufferRecords = 20000
	mergeChunk         = 2000
	// firstChunk bounds a task's first chunk: its first alerts are
	// written after a few hundred notifications are joined, not a full
	// chunk.
	firstChunk = 250
)

// runMerged processes a task whose state is local: it reads market-p and
// notifications-p merged in record-timestamp order. A tick is applied
// before the notifications with the same or a later timestamp, a
// notification is joined before the ticks with a later one. When one side
// has nothing buffered, the other waits until that side is known to be at
// its end (an end offset read after the wait began), or MaxTaskIdle has
// passed. So a notification produced after a tick of its symbol always
// finds that tick, and does not see ticks newer than itself unless the
// market got ahead during an idle wait.
//
// nr reads the notifications; head is its first fetch with the market's
// end check made after it (headStart), both made while the state
// restored. The goroutines of the task (owned by wg) stop when fctx ends,
// which the caller does when runMerged returns.
func (t *processTask) runMerged(ctx, fctx context.Context, wg *sync.WaitGroup, st *stateTask, nr *partitionReader, head <-chan headFetch, log *slog.Logger) {
	w := t.env
	mCh := w.prefetch(fctx, wg, w.reader(w.topics.Market, t.p, st.resumeAt), 1, log)
	m := newMerger(t, st)
	m.free = make(chan *encoded, w.outboxDepth()+2)
	m.out = t.startOutbox(fctx, wg, m.free)
	// The first fetch comes before any later one (nr is headStart's until
	// it has answered), and its end check is taken as if it had been asked
	// for now.
	select {
	case h := <-head:
		if h.fetched {
			m.takeNotifications(h.f)
		}
		if h.checked {
			m.takeEndCheck(h.e)
		}
	case <-ctx.Done():
		return
	}
	nCh := w.prefetch(fctx, wg, nr, 1, log)
	ends := make(chan endCheck, 1)
	lookupFailures := 0
	for {
		if err := m.enterGate(ctx); err != nil {
			return
		}
		err := m.pass(ctx)
		t.gate.leave()
		if errors.Is(err, errLookup) && ctx.Err() == nil {
			if !m.lookupFailed(ctx, err, lookupFailures, mCh, nCh, ends, log) {
				return
			}
			lookupFailures++
			continue
		}
		if err != nil {
			return // ctx ended, or the store closed under us: the task is stopping
		}
		lookupFailures = 0
		if !m.awaitInput(ctx, fctx, wg, mCh, nCh, ends, log) {
			return
		}
	}
}

// lookupFailed handles a pass that failed (err) on a lookup, the
// failures-th in a row: what was joined before the failure is written;
// the rest waits in the buffers. Meanwhile the market goes on: another
// task (here or on another member) may be waiting for it to be read past
// its own notifications, perhaps the very task this lookup waits for. So
// the retry is not a sleep (nor backoff.Do) but a delay spent reading the
// market (readMarketFor). It returns false when ctx is done or the store
// closed.
func (m *merger) lookupFailed(ctx context.Context, err error, failures int, mCh, nCh <-chan fetched, ends <-chan endCheck, log *slog.Logger) bool {
	m.t.env.noteTaskErr(m.t.p, err)
	delay := backoff.Default.Delay(failures)
	switch {
	case errors.Is(err, errRepartitioning):
		delay = 100 * time.Millisecond
	case errors.Is(err, errNotReadPast):
		delay = crossTaskRetry.Delay(failures)
		if failures == crossTaskWarnAfter {
			log.Warn("notifications of other tasks' symbols wait for those tasks' markets; retrying, this task's market goes on", "err", err)
		}
	default:
		log.Warn("cannot look prices up; retrying", "err", err)
	}
	return m.readMarketFor(ctx, delay, mCh, nCh, ends)
}

// awaitInput waits for more input, or decides that the side the merge
// waits for is at its end (asking for its end offset in a goroutine owned
// by wg, stopped by fctx), or that the wait expired (MaxTaskIdle). It
// returns false when ctx is done.
func (m *merger) awaitInput(ctx, fctx context.Context, wg *sync.WaitGroup, mCh, nCh <-chan fetched, ends chan endCheck, log *slog.Logger) bool {
	idle := time.Duration(-1)
	graceWake := false // the timeout is the head's grace, not MaxTaskIdle
	if (len(m.mbuf) == 0) != (len(m.nbuf) == 0) {
		if m.otherSideFetchedToEnd() {
			m.force = true
			return true
		}
		due := m.graceDue() // notifications younger than the grace: no end check yet
		if !m.checked && due.IsZero() {
			// Ask for the other side's end without holding up the
			// merge: its answer is taken below if the wait is still
			// the same.
			m.checked = true
			m.checkEndAsync(fctx, wg, ends)
		}
		if m.waitStart.IsZero() {
			m.waitStart = time.Now()
		}
		idle = m.t.env.limits.MaxTaskIdle - time.Since(m.waitStart)
		if !due.IsZero() {
			// Wake up when the head is due, to check the end then;
			// the wait for the market to pass it goes on.
			if d := time.Until(due); d < idle {
				idle, graceWake = d, true
			}
		} else if idle <= 0 {
			m.idleExpired(ctx, mCh, nCh, log)
			return true
		}
	}
	var (
		timeout <-chan time.Time
		timer   *time.Timer
	)
	if idle >= 0 {
		timer = time.NewTimer(idle)
		timeout = timer.C
		defer timer.Stop()
	}
	mIn, nIn := mCh, nCh
	if len(m.mbuf) >= mergeBufferRecords {
		mIn = nil
	}
	if len(m.nbuf) >= mergeBufferRecords {
		nIn = nil
	}
	// A batch for the side being waited for ends the wait; one for the
	// other side does not restart it.
	select {
	case f := <-mIn:
		m.takeMarket(f)
	case f := <-nIn:
		m.takeNotifications(f)
	case e := <-ends:
		m.takeEndCheck(e)
	case <-timeout:
		if !graceWake {
			m.idleExpired(ctx, mCh, nCh, log)
		}
	case <-ctx.Done():
	}
	return ctx.Err() == nil
}

// A batch that failed because another task's market was not read past
// one of its notifications yet is retried after crossTaskRetry's delay
// (its warning logged once it failed crossTaskWarnAfter times in a row).
var crossTaskRetry = backoff.Policy{Min: 20 * time.Millisecond, Max: time.Second}

const crossTaskWarnAfter = 10

// readMarketFor spends d, while a failed lookup waits to be retried,
// reading the market and applying every tick read at once, ahead of the
// buffered notifications (ticks are versions: applying them early changes
// no as-of join), and buffering the notifications fetched. So a task's
// market never stops because its notifications wait for another task,
// and no two tasks can wait on each other's markets for ever. It returns
// false when ctx is done or the store closed.
func (m *merger) readMarketFor(ctx context.Context, d time.Duration, mCh, nCh <-chan fetched, ends <-chan endCheck) bool {
	if !m.applyAhead(ctx) {
		return false
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		nIn := nCh
		if len(m.nbuf) >= mergeBufferRecords {
			nIn = nil
		}
		select {
		case f := <-mCh:
			m.takeMarket(f)
			if !m.applyAhead(ctx) {
				return false
			}
		case f := <-nIn:
			m.takeNotifications(f)
		case e := <-ends:
			m.takeEndCheck(e)
		case <-timer.C:
			return true
		case <-ctx.Done():
			return false
		}
	}
}

// applyAhead applies every buffered tick, within the task's gate, and
// records the newest timestamp applied ahead (mAheadTs): notifications
// older than it are joinable without more market (pass).
func (m *merger) applyAhead(ctx context.Context) bool {
	if len(m.mbuf) == 0 {
		return true
	}
	if m.enterGate(ctx) != nil {
		return false
	}
	defer m.t.gate.leave()
	ticks, err := m.st.applyTicks(ctx, m.mbuf, m.st.dlqFrom)
	if err != nil {
		return false
	}
	m.t.applied(ticks)
	m.mAheadTs = max(m.mAheadTs, maxTs(m.mbuf))
	m.mbuf = nil
	return true
}

// merger holds the buffered input of one merged task.
type merger struct {
	t  *processTask
	st *stateTask

	mbuf, nbuf   []fetchedRecord
	mNext, nNext int64 // the readers' positions after their last fetch
	// mAheadTs is the newest timestamp of the ticks applied ahead of the
	// notifications while a lookup waited (readMarketFor), 0 before.
	mAheadTs int64
	// out writes the alerts of joined chunks in order while the merge goes
	// on; nil writes them synchronously (tests).
	out chan<- chunk

	// The current wait: when it began, whether the other side's end was
	// checked, and whether the buffered side may go ahead regardless.
	waitStart time.Time
	checked   bool
	force     bool
	// stallLogged: this wait for the market was logged already.
	stallLogged bool
	// wait numbers the waits, so that the answer of an end check made for
	// an earlier one is not taken for the current one.
	wait uint64

	// nCleared: the notifications before this offset may be joined
	// without waiting for the market, which was confirmed at its end
	// after they were appended (all its ticks before them are applied
	// once mbuf is empty). The proof: an end-offset request of the market
	// sent after a notifications fetch answered, the market read to the
	// end it found, clears the notifications below that answer's high
	// watermark (takeEndCheck). On a backlog the first proof clears all of
	// it.
	nCleared int64
	// nHwm is the greatest high watermark of the notifications fetches
	// taken.
	nHwm int64
	// With a grace (Config.Grace, in ms), a notification confirmed by the
	// market's end goes ahead only if its timestamp is at or before
	// clearedBefore, for nCleared, or forceBefore, for force: the time of
	// the check that confirmed the end minus the grace. Without a grace
	// both are unbounded.
	grace                      int64
	clearedBefore, forceBefore int64
	// For the ticks: when the newest buffered batch was received, and
	// when the latest notifications fetch that reached its high watermark
	// was sent. Notifications at their end by a fetch sent after the
	// ticks were received hold nothing older: the ticks need not wait
	// (see otherSideFetchedToEnd).
	mRecv    time.Time
	nEndSent time.Time

	// chunks counts the chunks handed to the outbox (or written).
	chunks int
	// free holds the encoded batches the outbox has written, for reuse.
	free chan *encoded
}

// newMerger is the merger of process task t over its state st.
func newMerger(t *processTask, st *stateTask) merger {
	m := merger{t: t, st: st, mNext: st.resumeAt, nNext: -1}
	m.grace = max(t.env.limits.Grace.Milliseconds(), 0)
	return m
}

// confirmedBefore is the newest notification time a market end
// confirmed by a check sent at sent lets go ahead: sent minus the grace.
func (m *merger) confirmedBefore(sent time.Time) int64 {
	return sent.UnixMilli() - m.grace
}

// confirmed reports whether a notification at tsMs may go ahead on a
// market end confirmed for the notifications up to before
// (clearedBefore, forceBefore): always without a grace.
func (m *merger) confirmed(tsMs, before int64) bool {
	return m.grace == 0 || tsMs <= before
}

// graceDue is when, by the clock, the notification at the head of nbuf
// may be confirmed by the market's end (zero without a grace or when it
// is due already).
func (m *merger) graceDue() time.Time {
	if m.grace == 0 || len(m.nbuf) == 0 {
		return time.Time{}
	}
	due := time.UnixMilli(m.nbuf[0].Time.UnixMilli() + m.grace)
	if !time.Now().Before(due) {
		return time.Time{}
	}
	return due
}

// newEncoded returns an empty encoded batch: one the outbox has written,
// else a new one.
func (m *merger) newEncoded() *encoded {
	select {
	case e := <-m.free:
		return e
	default:
		return &encoded{}
	}
}

// chunkLimit is how many notifications the next chunk holds at most.
func (m *merger) chunkLimit() int {
	if m.chunks == 0 {
		return firstChunk
	}
	return mergeChunk
}

func (m *merger) progressed() {
	if m.stallLogged {
		m.t.counters.waitSince.Store(0) // the wait for the market is over
	}
	m.waitStart, m.checked, m.stallLogged = time.Time{}, false, false
	m.wait++
}

// otherSideFetchedToEnd reports whether buffered ticks may go ahead
// because the notifications were fetched to their end by a fetch sent
// after the ticks were received: every notification produced before them
// is then read (the same proof as otherSideAtEnd's end offset, without
// asking). Notifications are cleared by nCleared instead.
func (m *merger) otherSideFetchedToEnd() bool {
	return len(m.mbuf) > 0 && len(m.nbuf) == 0 && !m.nEndSent.IsZero() && m.nEndSent.After(m.mRecv)
}

// takeEndCheck takes the answer of an end check. For the market, the
// notifications below the high watermark known when it was sent are
// cleared if the market was read to the end it found; if some buffered
// ones are still not cleared, the next wait asks again. For the
// notifications, the buffered ticks go ahead if the check is for this
// wait, was sent after they were received, and the notifications were
// read to the end it found.
func (m *merger) takeEndCheck(e endCheck) {
	if e.market {
		if e.atEnd(m) {
			m.nCleared = max(m.nCleared, e.coverN)
			m.clearedBefore = max(m.clearedBefore, m.confirmedBefore(e.sent))
			m.checked = false
		}
		return
	}
	switch {
	case e.wait != m.wait:
	case !e.sent.After(m.mRecv):
		m.checked = false // ticks came in since: ask again
	case e.atEnd(m):
		m.force = true
	}
}

// endCheck is the answer of an asynchronous end check made for wait:
// the end offset of the side that had nothing buffered.
type endCheck struct {
	wait   uint64
	market bool
	sent   time.Time
	// coverN, for the market, is the notifications' high watermark known
	// when the check was sent.
	coverN int64
	end    int64
	err    error
}

// atEnd reports whether the side checked has been read to the end found.
func (e endCheck) atEnd(m *merger) bool {
	next := m.nNext
	if e.market {
		next = m.mNext
	}
	return e.err == nil && next >= 0 && next >= e.end
}

// checkEndAsync reads the end offset of the side with nothing buffered in
// a goroutine owned by wg and sends the answer to ends.
func (m *merger) checkEndAsync(ctx context.Context, wg *sync.WaitGroup, ends chan<- endCheck) {
	w := m.t.env
	e := endCheck{wait: m.wait, market: len(m.mbuf) == 0, coverN: m.nHwm}
	topic := w.topics.Notifications
	if e.market {
		topic = w.topics.Market
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		e.sent = time.Now()
		e.end, e.err = listOffset(ctx, w.client, topic, m.t.p, kafka.LastOffset)
		if e.err != nil && ctx.Err() == nil {
			w.metrics.FetchErrors.Inc() // the wait goes on; MaxTaskIdle still bounds it
		}
		select {
		case ends <- e:
		case <-ctx.Done():
		}
	}()
}

// headFetch is a task's first notifications fetch, when fetched, and,
// when checked, the market's end offset read after it was answered.
type headFetch struct {
	f                fetched
	e                endCheck
	fetched, checked bool
}

// headStart makes the first fetch of nr and reads the market's end offset
// after it, in a goroutine owned by wg, while the task's state restores:
// if the restore reached that end, the market proves every notification
// below the fetch's high watermark joinable (takeEndCheck), and the first
// chunk is joined as soon as the state is restored instead of a fetch and
// an end-offset request later. (The restore's own end is no such proof:
// it may have been read before the notifications were.) One fetch only,
// so the restores are not slowed by a prefetch; if it or the check fails,
// the merge fetches and asks as usual.
func (t *processTask) headStart(ctx context.Context, wg *sync.WaitGroup, nr *partitionReader) <-chan headFetch {
	w := t.env
	out := make(chan headFetch, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		var h headFetch
		defer func() { out <- h }()
		h.f.sent = time.Now()
		recs, err := nr.Fetch(ctx)
		if err != nil {
			if ctx.Err() == nil {
				w.metrics.FetchErrors.Inc()
			}
			return
		}
		h.f.recs, h.f.next, h.f.hwm, h.fetched = recs, nr.Next, nr.HWM, true
		h.e = endCheck{market: true, coverN: h.f.hwm, sent: time.Now()}
		h.e.end, h.e.err = listOffset(ctx, w.client, w.topics.Market, t.p, kafka.LastOffset)
		if h.e.err != nil && ctx.Err() == nil {
			w.metrics.FetchErrors.Inc() // the merge asks again
		}
		h.checked = h.e.err == nil
	}()
	return out
}

// enterGate passes the rebalance gate. The time spent waiting at it does
// not count as idle: a pause is not evidence that the other side has
// nothing more.
func (m *merger) enterGate(ctx context.Context) error {
	began := time.Now()
	if err := m.t.gate.enter(ctx); err != nil {
		return err
	}
	if !m.waitStart.IsZero() {
		m.waitStart = m.waitStart.Add(time.Since(began))
	}
	return nil
}

func (m *merger) takeMarket(f fetched) {
	m.mNext = f.next
	m.st.rc.hwm.Store(f.hwm)
	// A market fetch that reached its high watermark proves nothing about
	// the notifications: a broker that just became the partition's leader
	// answers fetches with its stale high watermark, below ticks that the
	// old leader acknowledged (TestIntegrationClusterLeaderStopped saw 6 of
	// 640 alerts join an older price when that was taken as a proof). The
	// end-offset check (takeEndCheck) is the proof: Kafka refuses
	// ListOffsets until the new leader's high watermark caught up (KIP-207).
	if len(f.recs) > 0 {
		if len(m.mbuf) == 0 {
			m.progressed()
		}
		m.mRecv = time.Now()
		m.mbuf = appendRecords(m.mbuf, f.recs)
	}
}

func (m *merger) takeNotifications(f fetched) {
	if (f.hwm >= 0 && f.hwm < m.nHwm) || (len(f.recs) > 0 && f.recs[0].Offset < m.nNext) {
		// The log went back (a recreated topic, see taskEnv.offsetReset):
		// what was cleared are offsets of the old log.
		m.nCleared, m.nHwm = 0, 0
	}
	m.nNext = f.next
	if f.hwm >= 0 && f.next >= f.hwm && f.sent.After(m.nEndSent) {
		m.nEndSent = f.sent
	}
	m.nHwm = max(m.nHwm, f.hwm)
	if len(f.recs) > 0 {
		if len(m.nbuf) == 0 {
			m.progressed()
		}
		m.nbuf = appendRecords(m.nbuf, f.recs)
	}
	// joiner_task_lag_records is set by watchProgress, from the end
	// offset and what was acknowledged, whether or not this merge takes
	// anything.
}

// appendRecords appends a fetch's records to a merge buffer: an empty
// buffer takes the fetch's slice itself (the merge owns it), the usual
// case when each pass consumes what it was given, instead of copying it.
func appendRecords(buf, recs []fetchedRecord) []fetchedRecord {
	if len(buf) == 0 {
		return recs
	}
	return append(buf, recs...)
}

// idleExpired ends an idle wait. It first takes every batch already
// fetched (without waiting for more): a batch fetched while the merge loop
// was busy, or paused, is never overtaken. Then, if one side is still
// empty:
//   - ticks waiting for notifications go ahead (they are versions: applying
//     them early changes no join);
//   - notifications waiting for the market go ahead only if the market is
//     confirmed at its end now; otherwise (the market is behind, or cannot
//     be read: no leader, broker down) they keep waiting, and the wait is
//     logged once. A join before the market is read could miss a tick.
func (m *merger) idleExpired(ctx context.Context, mCh, nCh <-chan fetched, log *slog.Logger) {
	for {
		select {
		case f := <-mCh:
			m.takeMarket(f)
			continue
		case f := <-nCh:
			m.takeNotifications(f)
			continue
		default:
		}
		break
	}
	switch {
	case len(m.mbuf) > 0 && len(m.nbuf) == 0:
		m.force = true
	case len(m.nbuf) > 0 && len(m.mbuf) == 0:
		sent := time.Now()
		if m.otherSideAtEnd(ctx) {
			m.force = true
			m.forceBefore = m.confirmedBefore(sent)
			return
		}
		m.t.counters.waitTsMs.Store(m.nbuf[0].Time.UnixMilli())
		if !m.stallLogged {
			m.t.counters.waitSince.Store(m.waitStart.UnixNano())
			m.stallLogged = true
			log.Warn("notifications wait for the market to be read past their time; they are not joined before (the market partition may have no leader)",
				"notification_ts_ms", m.nbuf[0].Time.UnixMilli(), "market_next_offset", m.mNext, "waited", time.Since(m.waitStart).Round(time.Millisecond))
		}
		m.waitStart = time.Now() // check again after another MaxTaskIdle
	}
}

// otherSideAtEnd reports whether the side with nothing buffered has been
// read to the end offset it has now.
func (m *merger) otherSideAtEnd(ctx context.Context) bool {
	w := m.t.env
	topic, next := w.topics.Market, m.mNext
	if len(m.nbuf) == 0 {
		topic, next = w.topics.Notifications, m.nNext
	}
	end, err := listOffset(ctx, w.client, topic, m.t.p, kafka.LastOffset)
	if err != nil {
		w.metrics.FetchErrors.Inc()
		return false // wait; MaxTaskIdle still bounds it
	}
	return next >= 0 && next >= end
}

// pass consumes the buffers as far as the merge order allows: ticks are
// applied to the store, notifications joined in runs of at most
// mergeChunk, and their alerts handed to the outbox in chunks of about
// mergeChunk (and at the end of the pass), which it writes while the next
// chunk is joined (without an outbox: written and acknowledged before the
// pass goes on).
func (m *merger) pass(ctx context.Context) error {
	var (
		c passChunk
		// joinedCleared: notifications cleared by nCleared were joined;
		// the ones left start a new wait.
		joinedCleared bool
	)
	c.acked, c.ackedTs = -1, -1
	for {
		var err error
		switch {
		case len(m.mbuf) > 0 && len(m.nbuf) > 0:
			// With a grace, a notification waits for the ticks up to
			// its time plus the grace.
			head := m.nbuf[0].Time.UnixMilli() + m.grace
			if k := prefix(m.mbuf, func(ts int64) bool { return ts <= head }); k > 0 {
				err = m.apply(ctx, m.mbuf[:k])
			} else {
				tick := m.mbuf[0].Time.UnixMilli() - m.grace
				err = m.join(ctx, &c, m.nbuf[:prefix(m.nbuf[:min(len(m.nbuf), m.chunkLimit())], func(ts int64) bool { return ts < tick })])
			}
		case len(m.nbuf) > 0 && m.nbuf[0].Time.UnixMilli() < m.mAheadTs-m.grace:
			// The market was read past these (and the grace) while a
			// lookup waited.
			ahead := m.mAheadTs - m.grace
			err = m.join(ctx, &c, m.nbuf[:prefix(m.nbuf[:min(len(m.nbuf), m.chunkLimit())], func(ts int64) bool { return ts < ahead })])
		case len(m.nbuf) > 0 && m.force && m.confirmed(m.nbuf[0].Time.UnixMilli(), m.forceBefore):
			err = m.join(ctx, &c, m.nbuf[:prefix(m.nbuf[:min(len(m.nbuf), m.chunkLimit())], func(ts int64) bool { return m.confirmed(ts, m.forceBefore) })])
		case len(m.nbuf) > 0 && m.nbuf[0].Offset < m.nCleared && m.confirmed(m.nbuf[0].Time.UnixMilli(), m.clearedBefore):
			// The market was at its end after these were appended (and,
			// with a grace, at least the grace after their time).
			cleared := m.nbuf[:min(len(m.nbuf), m.chunkLimit())]
			for i, r := range cleared {
				if r.Offset >= m.nCleared || !m.confirmed(r.Time.UnixMilli(), m.clearedBefore) {
					cleared = cleared[:i]
					break
				}
			}
			joinedCleared = true
			err = m.join(ctx, &c, cleared)
		case len(m.mbuf) > 0 && m.force:
			err = m.apply(ctx, m.mbuf)
		default:
			// Forced or not, the side that went ahead is drained.
			if m.force || joinedCleared || (len(m.mbuf) == 0 && len(m.nbuf) == 0) {
				m.force = false
				m.progressed()
			}
			return m.flush(ctx, &c)
		}
		if err != nil {
			return err
		}
	}
}

// passChunk is the chunk a pass is joining: its alerts and dead letters,
// and the offset after its last notification (-1: none yet) with the
// newest timestamp in it.
type passChunk struct {
	alerts         *encoded
	dead           []deadLetter
	acked, ackedTs int64
}

// flush hands chunk c to the outbox (without one: writes and acknowledges
// it) and starts the next.
func (m *merger) flush(ctx context.Context, c *passChunk) error {
	t := m.t
	if c.acked < 0 {
		return nil
	}
	out := chunk{alerts: c.alerts, dead: c.dead, next: c.acked, ts: c.ackedTs}
	c.alerts, c.dead, c.acked = nil, nil, -1
	m.chunks++
	if m.out == nil {
		if err := t.flush(ctx, nil, []*encoded{out.alerts}, out.dead); err != nil {
			return err
		}
		t.ack(out.next, out.ts)
		return nil
	}
	// The chunk stays in flight for the rebalance gate until the
	// outbox has it acknowledged.
	t.gate.hold()
	select {
	case m.out <- out:
		return nil
	case <-ctx.Done():
		t.gate.leave()
		return ctx.Err()
	}
}

// join joins the notifications recs, the head of nbuf, into chunk c; on
// a failed lookup, what c holds is flushed first.
func (m *merger) join(ctx context.Context, c *passChunk, recs []fetchedRecord) error {
	if c.alerts == nil {
		c.alerts = m.newEncoded()
	}
	bad, err := m.t.joinInto(ctx, c.alerts, recs)
	if errors.Is(err, errLookup) {
		if ferr := m.flush(ctx, c); ferr != nil {
			return ferr
		}
		return err
	}
	if err != nil {
		return err
	}
	c.dead = append(c.dead, bad...)
	c.acked = recs[len(recs)-1].Offset + 1
	c.ackedTs = max(c.ackedTs, maxTs(recs))
	m.nbuf = m.nbuf[len(recs):]
	// The joins between two ticks are often a handful of
	// notifications: they go out together, one chunk per pass or
	// per mergeChunk, not one write per run between ticks.
	if c.alerts.len()+len(c.dead) >= m.chunkLimit() {
		return m.flush(ctx, c)
	}
	return nil
}

// apply applies the ticks recs, the head of mbuf, to the store.
func (m *merger) apply(ctx context.Context, recs []fetchedRecord) error {
	ticks, err := m.st.applyTicks(ctx, recs, m.st.dlqFrom)
	if err != nil {
		return err
	}
	m.t.applied(ticks)
	m.mbuf = m.mbuf[len(recs):]
	return nil
}

// prefix is the length of the longest prefix of recs whose timestamps
// satisfy ok.
func prefix(recs []fetchedRecord, ok func(tsMs int64) bool) int {
	for i, r := range recs {
		if !ok(r.Time.UnixMilli()) {
			return i
		}
	}
	return len(recs)
}
