package join

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/joiner-dev/joiner/murmur2"
	"github.com/joiner-dev/joiner/record"
)

// processTask joins the notifications of partition p with prices. It owns
// its partition reader; acked is the next offset whose alert has not been
// acknowledged, read by the committer.
type processTask struct {
	w *Processor
	p int
	// st is the task's own state when this member holds it too; then the
	// task reads both partitions merged (runMerged).
	st      *stateTask
	stopped chan struct{}
	acked   atomic.Int64 // -1 until the first batch is acknowledged
	// ackedTs is the greatest timestamp of the acknowledged notifications.
	ackedTs atomic.Int64
	// gate pauses this task's batches when it is revoked (worker.go).
	gate *gate
}

func newProcessTask(w *Processor, p int, st *stateTask) *processTask {
	t := &processTask{w: w, p: p, st: st, stopped: make(chan struct{}), gate: newGate()}
	t.acked.Store(-1)
	t.ackedTs.Store(-1)
	return t
}

// ack records that the alerts of the notifications before offset next,
// the newest at tsMs, are acknowledged.
func (t *processTask) ack(next, tsMs int64) {
	t.ackedTs.Store(max(t.ackedTs.Load(), tsMs))
	t.acked.Store(next)
}

func (t *processTask) run(ctx context.Context) {
	defer close(t.stopped)
	w := t.w
	log := w.log.With("task", t.p, "topic", w.cfg.Topics.Notifications)
	start, err := w.committedOffset(ctx, w.cfg.Topics.Notifications, t.p)
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
		nr := newPartitionReader(w.cfg.Client, w.cfg.Topics.Notifications, t.p, start, w.cfg.FetchMaxWait)
		head := t.headStart(fctx, &wg, nr)
		select {
		case <-t.st.restored:
		case <-t.st.stopped:
			return
		case <-ctx.Done():
			return
		}
		log.Info("processing notifications merged with the market", "from_offset", start, "market_offset", t.st.resumeAt)
		t.runMerged(ctx, fctx, &wg, t.st, nr, head, log)
		return
	}
	log.Info("processing notifications; their prices live on other tasks", "from_offset", start)
	r := newPartitionReader(w.cfg.Client, w.cfg.Topics.Notifications, t.p, start, w.cfg.FetchMaxWait)
	lag := w.metrics.TaskLag.WithLabelValues(taskLabel(t.p))
	lookupFailures := 0
	for attempt := 0; ctx.Err() == nil; {
		recs, err := r.fetch(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Warn("fetch failed; retrying", "err", err)
			w.metrics.FetchErrors.Inc()
			_ = sleep(ctx, backoff(attempt))
			attempt++
			continue
		}
		attempt = 0
		if r.hwm >= 0 {
			lag.Set(float64(max(r.hwm-r.next, 0)))
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
			r.next = recs[0].Offset
			if errors.Is(err, errLookup) {
				log.Warn("cannot look prices up; retrying the batch", "from_offset", r.next, "err", err)
				if sleep(ctx, backoff(lookupFailures)) != nil {
					return
				}
				lookupFailures++
			}
			continue
		}
		lookupFailures = 0
		t.ack(r.next, maxTs(recs))
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

// pending is a chunk's decoded notifications, already the alerts they
// become (joinAll fills in the prices), with the task of each one's symbol.
type pending struct {
	alerts []record.Alert
	tasks  []int
}

// decode splits records into notifications to join and dead letters.
//
// The notifications are decoded without copying (DecodeNotificationShared):
// their strings alias the fetched values, which package fetch copies out
// of kafka-go's buffers into slabs that it never reuses or writes again,
// so they stay valid and unchanged for as long as they are referenced.
// The strings live in the alerts until the chunk is written; a symbol
// given to a store is interned first (lookupIn), so that no long-lived
// cache pins a slab.
func (t *processTask) decode(recs []fetchedRecord) (good pending, dead []deadLetter) {
	w := t.w
	w.metrics.Records.WithLabelValues(w.cfg.Topics.Notifications).Add(float64(len(recs)))
	parts := w.partitions()
	good = pending{alerts: make([]record.Alert, 0, len(recs)), tasks: make([]int, 0, len(recs))}
	prices := make([]float64, len(recs)) // the alerts' price slots (setPrice)
	for _, rec := range recs {
		n, err := record.DecodeNotificationShared(rec.Value, w.cfg.MaxRecordBytes)
		if err != nil {
			dead = append(dead, newDeadLetter(w.cfg.Topics.Notifications, t.p, rec, err))
			continue
		}
		price := &prices[len(good.alerts)]
		good.alerts = append(good.alerts, record.Alert{Notification: n, NotificationTsMs: rec.Time.UnixMilli(), Price: price, Worker: w.cfg.InstanceID})
		good.tasks = append(good.tasks, murmur2.Partition([]byte(n.Symbol), parts))
	}
	return good, dead
}

// handle joins one fetched batch of a task whose state is not local, and
// writes its alerts and dead letters. It returns an error only when ctx
// ended before they were acknowledged.
func (t *processTask) handle(ctx context.Context, recs []fetchedRecord) error {
	good, dead := t.decode(recs)
	alerts, err := t.joinAll(ctx, good)
	if err != nil {
		return err
	}
	return t.flush(ctx, alerts, dead)
}

// joinAll looks up the price of each notification as of its timestamp.
// Local lookups are store reads, after the store has been read past the
// notifications (or to its end; bounded by MaxTaskIdle). The task's own
// store when it runs merged is already there. Remote lookups are HTTP
// calls, made concurrently (bounded) so that a batch costs about one round
// trip; the owner does the same wait.
func (t *processTask) joinAll(ctx context.Context, good pending) ([]record.Alert, error) {
	w := t.w
	newest := map[int]int64{}
	for i, q := range good.tasks {
		if t.st == nil || q != t.p {
			newest[q] = max(newest[q], good.alerts[i].NotificationTsMs)
		}
	}
	for q, ts := range newest {
		if st := w.stateTask(q); st != nil {
			if err := st.waitFor(ctx, ts, w.cfg.MaxTaskIdle); err != nil && ctx.Err() != nil {
				return nil, err
			}
		}
	}
	sem := make(chan struct{}, remoteConcurrency)
	var (
		wg      sync.WaitGroup
		errOnce sync.Once
		failed  error
	)
	fail := func(err error) { errOnce.Do(func() { failed = err }) }
	// The state tasks of the chunk's symbols, looked up once per chunk.
	states := map[int]*stateTask{}
	for i, q := range good.tasks {
		a := &good.alerts[i]
		st, ok := states[q]
		if !ok {
			st = w.stateTask(q)
			states[q] = st
		}
		if st != nil {
			if err := w.lookupIn(ctx, a, st, q, a.Symbol, a.NotificationTsMs); err != nil {
				fail(err)
			}
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := w.lookup(ctx, a, q, a.Symbol, a.NotificationTsMs); err != nil {
				fail(err)
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return good.alerts, failed
}

// remoteConcurrency bounds the remote lookups in flight per task.
const remoteConcurrency = 32

// waitActive waits until the membership is active, or ctx is done.
func (w *Processor) waitActive(ctx context.Context) error {
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
