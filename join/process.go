package join

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/joiner-dev/joiner/internal/backoff"
	"github.com/joiner-dev/joiner/murmur2"
	"github.com/joiner-dev/joiner/record"
	"github.com/joiner-dev/joiner/statestore"
	"github.com/segmentio/kafka-go"
)

// processTask joins the notifications of partition p with prices. It owns
// its partition reader; acked is the next offset whose alert has not been
// acknowledged, read by the committer.
type processTask struct {
	env *taskEnv
	p   int
	// st is the task's own state when this member holds it too; then the
	// task reads both partitions merged (runMerged).
	st      *stateTask
	stopped chan struct{}
	acked   atomic.Int64 // -1 until the first batch is acknowledged
	// ackedTs is the greatest timestamp of the acknowledged notifications.
	ackedTs atomic.Int64
	// gate pauses this task's batches when it is revoked (worker.go).
	gate *gate
	// latest holds, for a merged task, the newest version in its store of
	// the symbols it has joined, so that the common join (a notification
	// newer than its symbol's newest tick) reads no store. The merge is
	// the only writer of the store once it is restored (the state task
	// only prunes, which keeps every newest version), and it brings
	// latest up to date with every tick it applies (applied). Owned by
	// the merge's goroutine. It holds symbols of this task only, with
	// latestParts partitions: when their count changes it is emptied.
	latest      map[string]*latestPrice
	latestParts int
	// prog is the task's lag and stall state (progress.go).
	prog progress

	// counters are the task's counts for TaskStatus (taskstatus.go).
	counters taskCounters
}

// latestPrice is a symbol's newest version in a merged task's store, and
// the fields its price adds to an alert, encoded once for the alerts that
// join it (empty until one does); with hasPrev, prev is the version just
// before it (no version of the symbol lies between the two), so that a
// notification between them, the common join with a grace, reads no
// store either.
type latestPrice struct {
	tick       statestore.Tick
	fields     []byte // record.AppendPriceFields of tick
	prev       statestore.Tick
	prevFields []byte
	hasPrev    bool
}

// priceFields returns the alert fields of c's price.
func (c *latestPrice) priceFields() []byte {
	if len(c.fields) == 0 {
		c.fields = record.AppendPriceFields(c.fields, c.tick.Price, c.tick.TimestampMs)
	}
	return c.fields
}

// prevFields returns the alert fields of the version before c's.
func (c *latestPrice) prevPriceFields() []byte {
	if len(c.prevFields) == 0 {
		c.prevFields = record.AppendPriceFields(c.prevFields, c.prev.Price, c.prev.TimestampMs)
	}
	return c.prevFields
}

// newer reports whether version a comes after b: a later timestamp, or
// the same one later in the partition.
func newer(a, b statestore.Tick) bool {
	return a.TimestampMs > b.TimestampMs || (a.TimestampMs == b.TimestampMs && a.Offset > b.Offset)
}

// rememberLatest puts the store's newest version of symbol in t.latest.
func (t *processTask) rememberLatest(symbol string) {
	tick, ok, err := t.st.store.Latest(symbol)
	if err != nil || !ok {
		return
	}
	if t.latest == nil {
		t.latest = map[string]*latestPrice{}
	}
	t.latest[tick.Symbol] = &latestPrice{tick: tick} // the store's string: symbol may alias a fetched record
}

// applied brings t.latest up to date with ticks just applied to the
// task's store.
func (t *processTask) applied(ticks []statestore.Tick) {
	if len(t.latest) == 0 {
		return
	}
	for _, k := range ticks {
		c, ok := t.latest[k.Symbol]
		switch {
		case !ok:
		case newer(k, c.tick):
			k.Symbol = c.tick.Symbol // the map's own copy
			c.prev, c.prevFields, c.hasPrev = c.tick, append(c.prevFields[:0], c.fields...), true
			c.tick, c.fields = k, c.fields[:0]
		case c.hasPrev && newer(k, c.prev):
			// A late tick between the two.
			k.Symbol = c.tick.Symbol
			c.prev, c.prevFields = k, c.prevFields[:0]
		}
		// Older than prev (or than the newest, before prev is known):
		// the store answers the notifications it concerns.
	}
}

func newProcessTask(env *taskEnv, p int, st *stateTask) *processTask {
	t := &processTask{env: env, p: p, st: st, stopped: make(chan struct{}), gate: newGate()}
	t.acked.Store(-1)
	t.ackedTs.Store(-1)
	t.prog.start.Store(-1)
	t.counters.nLag.Store(-1)
	return t
}

// ack records that the alerts of the notifications before offset next,
// the newest at tsMs, are acknowledged.
func (t *processTask) ack(next, tsMs int64) {
	t.ackedTs.Store(max(t.ackedTs.Load(), tsMs))
	t.acked.Store(next)
	t.env.txnRelease(t) // exactly-once: the write and its ack are in one transaction
}

func (t *processTask) run(ctx context.Context) {
	defer close(t.stopped)
	w := t.env
	log := w.log.With("task", t.p, "topic", w.topics.Notifications)
	start, err := w.committedOffset(ctx, w.topics.Notifications, t.p)
	if err != nil {
		return
	}
	if t.st != nil {
		// The task's own state restores first: only then are notifications
		// joined, merged with the market in timestamp order. Meanwhile
		// their first fetch and the market's end check are made (see
		// headStart), so the first chunk is joined as soon as the state is
		// there.
		fctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		defer func() {
			cancel()
			wg.Wait()
		}()
		nr := w.reader(w.topics.Notifications, t.p, start)
		head := t.headStart(fctx, &wg, nr)
		select {
		case <-t.st.restored:
		case <-t.st.stopped:
			return
		case <-ctx.Done():
			return
		}
		log.Info("processing notifications merged with the market", "from_offset", start, "market_offset", t.st.resumeAt)
		t.prog.begin(start)
		t.runMerged(ctx, fctx, &wg, t.st, nr, head, log)
		return
	}
	log.Info("processing notifications; their prices live on other tasks", "from_offset", start)
	t.prog.begin(start)
	r := w.reader(w.topics.Notifications, t.p, start)
	lookupFailures := 0
	for ctx.Err() == nil {
		recs, _, ok := w.fetchRetrying(ctx, r, log)
		if !ok {
			return
		}
		if len(recs) == 0 {
			continue
		}
		if err := t.gate.enter(ctx); err != nil {
			return
		}
		err = t.handle(ctx, recs)
		t.gate.leave()
		if err != nil {
			// Not acknowledged: read the batch again.
			r.Next = recs[0].Offset
			if errors.Is(err, errLookup) {
				if !errors.Is(err, errRepartitioning) {
					log.Warn("cannot look prices up; retrying the batch", "from_offset", r.Next, "err", err)
				}
				w.noteTaskErr(t.p, err)
				// Not backoff.Do: the retry is the fetch loop's next pass (the batch is read again from r.Next), and a success resets it.
				if backoff.Sleep(ctx, backoff.Default.Delay(lookupFailures)) != nil {
					return
				}
				lookupFailures++
			}
			continue
		}
		lookupFailures = 0
		t.ack(r.Next, maxTs(recs))
	}
}

// maxTs is the greatest record timestamp of recs, in Unix ms.
func maxTs(recs []fetchedRecord) int64 {
	ts := int64(-1)
	for _, r := range recs {
		ts = max(ts, r.Time.UnixMilli())
	}
	return ts
}

// handle joins one fetched batch of a task whose state is not local, and
// writes its alerts and dead letters. It returns an error only when ctx
// ended before they were acknowledged.
func (t *processTask) handle(ctx context.Context, recs []fetchedRecord) error {
	var e encoded
	dead, err := t.joinInto(ctx, &e, recs)
	if err != nil {
		return err
	}
	return t.flush(ctx, &outScratch{onErr: func(err error) { t.env.noteTaskErr(t.p, err) }}, []*encoded{&e}, dead)
}

// joinInto decodes recs, joins each notification with its price as of its
// time and appends its alert to e, in order; malformed records are
// returned as dead letters. On an error e is left as it was.
//
// The notifications of the task's own symbols, when it holds their state
// (it runs merged), are decoded, looked up and encoded one by one: their
// alert is never held on the heap. The others (another task's symbols)
// are decoded into alerts, joined concurrently (joinAll) and encoded
// after them; a symbol's alerts stay in order, since all of one symbol
// are of one kind.
func (t *processTask) joinInto(ctx context.Context, e *encoded, recs []fetchedRecord) ([]deadLetter, error) {
	w := t.env
	parts, past := w.peers.mapping()
	if err := t.planReady(ctx, parts, recs); err != nil {
		return nil, err
	}
	w.metrics.Records.WithLabelValues(w.topics.Notifications).Add(float64(len(recs)))
	mark := e.mark()
	e.grow(recs, len(w.instanceID))
	if parts != t.latestParts {
		clear(t.latest) // its symbols were this task's with the old count
		t.latestParts = parts
	}
	var (
		dead   []deadLetter
		others otherJoins
		price  float64
		// misrouted counts the notifications not in their symbol's
		// partition.
		misrouted int
	)
	for _, rec := range recs {
		e.src = rec.Offset
		if rawAlerts { // a diagnostic build only (rawalerts_on.go)
			k := len(e.buf)
			e.buf = append(e.buf, rec.Key...)
			v := len(e.buf)
			e.buf = append(e.buf, rec.Value...)
			e.endAlert(k, v, record.ResultLocal)
			continue
		}
		// The fetched value is never written again (package fetch carves
		// it from a buffer of its own), so the notification's strings
		// may alias it; the alert holds them until it is encoded.
		n, err := w.dec.Notification(rec.Value)
		if err == nil {
			err = record.CheckNotificationKey(rec.Key, n.Symbol)
		}
		if err != nil {
			dead = append(dead, newDeadLetter(w.topics.Notifications, t.p, rec, err))
			continue
		}
		nTsMs := rec.Time.UnixMilli()
		// The common join: a symbol of this task (t.latest holds no
		// other, and no symbol that moved between tasks) newer than its
		// newest price, whose alert fields are encoded once.
		c, ok := t.latest[n.Symbol]
		if ok && t.joinLatest(e, c, &n, rec.Headers, nTsMs) {
			continue
		}
		a := record.Alert{Notification: record.Notification{Symbol: n.Symbol}, NotificationTsMs: nTsMs, Worker: w.instanceID}
		q := murmur2.Partition([]byte(n.Symbol), parts)
		if q != t.p {
			// Its key was not partitioned with murmur2 by symbol (another
			// partitioner, or another key): joined all the same, from
			// the task of its symbol (joinAll). Counted once joined (a
			// failed batch is joined again).
			misrouted++
		}
		var more []int
		if len(past) > 0 || q != t.p {
			more = extraTasks(n.Symbol, q, t.p, t.st != nil, past)
		}
		if t.st == nil || q != t.p || len(more) > 0 {
			others.add(a, n, rec, q, more)
			continue
		}
		if err := w.lookupIn(ctx, &a, &price, t.st, q, a.Symbol, a.NotificationTsMs, true); err != nil {
			e.rollback(mark)
			return nil, err
		}
		if !ok && a.Price != nil {
			t.rememberLatest(a.Symbol)
		}
		e.addJoined(w.alerts, &n, rec.Headers, &a)
	}
	if len(others.alerts) > 0 {
		if err := t.joinAll(ctx, others.alerts, others.tasks, others.extras); err != nil {
			e.rollback(mark)
			return nil, err
		}
		for i := range others.alerts {
			e.src = others.offs[i]
			e.addJoined(w.alerts, &others.notes[i], others.heads[i], &others.alerts[i])
		}
	}
	w.metrics.Misrouted.Add(float64(misrouted))
	return dead, nil
}

// joinLatest makes the common joins of a merged task from c, its
// symbol's newest prices: a notification at nTsMs at or after the newest
// version, or between it and the one before (which pruning keeps while it
// is newer than the cut). It reports whether it joined the notification.
func (t *processTask) joinLatest(e *encoded, c *latestPrice, n *record.NotificationValue, headers []kafka.Header, nTsMs int64) bool {
	var fields []byte
	switch {
	case c.tick.TimestampMs <= nTsMs:
		fields = c.priceFields()
	case c.hasPrev && c.prev.TimestampMs <= nTsMs && t.st.keeps(c.prev.TimestampMs):
		fields = c.prevPriceFields()
	default:
		return false
	}
	t.st.noteJoined(nTsMs)
	e.addPriced(t.env.alerts, n, headers, nTsMs, fields, record.ResultLocal)
	return true
}

// otherJoins are the notifications of a batch joined from other tasks
// than the batch's own (joinAll), with what their alerts are encoded
// from once joined.
type otherJoins struct {
	alerts []record.Alert
	notes  []record.NotificationValue
	heads  [][]kafka.Header
	offs   []int64
	tasks  []int   // the task of each alert's symbol
	extras [][]int // per alert: more tasks to consult (repartition.go)
}

func (o *otherJoins) add(a record.Alert, n record.NotificationValue, rec fetchedRecord, q int, more []int) {
	o.alerts, o.notes, o.heads = append(o.alerts, a), append(o.notes, n), append(o.heads, rec.Headers)
	o.offs = append(o.offs, rec.Offset)
	o.tasks = append(o.tasks, q)
	o.extras = append(o.extras, more)
}

// joinAll looks up the price of each alert's notification as of its
// timestamp, in place; tasks[i] is the task of alerts[i]'s symbol, and
// extras[i] (possibly nil) more tasks that may hold ticks of it (moved
// symbols, misrouted notifications: repartition.go), whose newest as-of
// version wins.
// Local lookups are store reads, after the store has been read past the
// notifications (or to its end). The task's own store when it runs merged
// is already there. Remote lookups are HTTP calls, made concurrently
// (bounded) so that a batch costs about one round trip; the owner does the
// same wait.
//
// Every wait is bounded. A merged task (a merge loop, whose own market
// does not advance while it waits) waits crossTaskWait at most, here and
// at a remote owner, and asks an owner once: on expiry the batch fails
// with an error wrapping errLookup and ErrNotReadPast, and runMerged
// retries it later while it reads its own market on. An unmerged task
// waits up to RemoteTimeout (its own retries of the batch follow).
func (t *processTask) joinAll(ctx context.Context, alerts []record.Alert, tasks []int, extras [][]int) error {
	w := t.env
	merged := t.st != nil
	if err := t.waitForTasks(ctx, alerts, tasks, extras); err != nil {
		return err
	}
	// The prices are kept in one array per call, not one allocation per
	// alert.
	prices := make([]float64, len(alerts))
	var (
		wg      sync.WaitGroup
		sem     chan struct{}
		errOnce sync.Once
		failed  error
	)
	fail := func(err error) { errOnce.Do(func() { failed = err }) }
	// lookup sets alerts[i] from task q, then takes the newest of its
	// extra tasks' versions.
	lookup := func(i int, st *stateTask, q int) error {
		a, price := &alerts[i], &prices[i]
		if err := w.lookupIn(ctx, a, price, st, q, a.Symbol, a.NotificationTsMs, merged); err != nil {
			return err
		}
		for _, c := range extras[i] {
			b := record.Alert{Notification: a.Notification, NotificationTsMs: a.NotificationTsMs, Worker: a.Worker}
			var bp float64
			if err := w.lookup(ctx, &b, &bp, c, a.Symbol, a.NotificationTsMs, merged); err != nil {
				return err
			}
			if newerJoin(a, &b) {
				*price = bp
				a.Result, a.PriceTsMs, a.Price = b.Result, b.PriceTsMs, nil
				if b.Price != nil {
					a.Price = price
				}
			}
		}
		return nil
	}
	// The state task of the last symbol's task: a chunk of a merged task
	// is mostly its own.
	lastTask, lastState := -1, (*stateTask)(nil)
	for i, q := range tasks {
		if q != lastTask {
			lastTask, lastState = q, w.peers.stateTask(q)
		}
		if st := lastState; st != nil && !remoteExtras(w, extras[i]) {
			if err := lookup(i, st, q); err != nil {
				fail(err)
			}
			continue
		}
		if sem == nil {
			sem = make(chan struct{}, remoteConcurrency)
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := lookup(i, w.peers.stateTask(q), q); err != nil {
				fail(err)
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	return failed
}

// waitForTasks waits until the state tasks held here of the other tasks
// the alerts are joined from (tasks[i] and extras[i] for alerts[i]) are
// read past the newest of their notifications: up to RemoteTimeout, or
// crossTaskWait for a merged task (joinAll).
func (t *processTask) waitForTasks(ctx context.Context, alerts []record.Alert, tasks []int, extras [][]int) error {
	w := t.env
	limit := w.limits.RemoteTimeout
	if t.st != nil {
		limit = crossTaskWait
	}
	var newest map[int]int64
	wait := func(q int, ts int64) {
		if t.st == nil || q != t.p {
			if newest == nil {
				newest = map[int]int64{}
			}
			newest[q] = max(newest[q], ts)
		}
	}
	for i, q := range tasks {
		wait(q, alerts[i].NotificationTsMs)
		for _, c := range extras[i] {
			wait(c, alerts[i].NotificationTsMs)
		}
	}
	for q, ts := range newest {
		if st := w.peers.stateTask(q); st != nil {
			if err := st.waitFor(ctx, ts, w.limits.MaxTaskIdle, limit); err != nil {
				switch {
				case ctx.Err() != nil:
					return ctx.Err()
				case errors.Is(err, errNotReadPast):
					return fmt.Errorf("%w: %w", errLookup, err)
				}
				// The task stopped here: lookupIn asks its new owner.
			}
		}
	}
	return nil
}

// remoteExtras reports whether one of tasks is not held here (its lookup
// is an HTTP call, made concurrently).
func remoteExtras(w *taskEnv, tasks []int) bool {
	for _, c := range tasks {
		if w.peers.stateTask(c) == nil {
			return true
		}
	}
	return false
}

// remoteConcurrency bounds the remote lookups in flight per task.
const remoteConcurrency = 32

// waitActive waits until the membership is active, or ctx is done.
func (w *taskEnv) waitActive(ctx context.Context) error {
	if w.member == nil || w.member.Active() {
		return nil
	}
	w.log.Warn("the group has not confirmed this member for a session timeout (was the process paused?); holding alerts until a heartbeat answers")
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !w.member.Active() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}
