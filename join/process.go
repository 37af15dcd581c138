package join

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/joiner-dev/joiner/murmur2"
)

// processTask joins the notifications of partition p with prices. It owns
// its partition reader; acked is the next offset whose alert has not been
// acknowledged, read by the committer.
type processTask struct {
	w *Worker
	p int
	// st is the task's own state when this member holds it too; then the
	// task reads both partitions merged (runMerged).
	st      *stateTask
	stopped chan struct{}
	acked   atomic.Int64 // -1 until the first batch is acknowledged
}

func newProcessTask(w *Worker, p int, st *stateTask) *processTask {
	t := &processTask{w: w, p: p, st: st, stopped: make(chan struct{})}
	t.acked.Store(-1)
	return t
}

func (t *processTask) run(ctx context.Context) {
	defer close(t.stopped)
	w := t.w
	log := w.log.With("task", t.p, "topic", w.cfg.NotificationsTopic)
	start, err := w.committedOffset(ctx, w.cfg.NotificationsTopic, t.p)
	if err != nil {
		return
	}
	if t.st != nil {
		// The task's own state restores first: only then do notifications
		// start, merged with the market in timestamp order.
		select {
		case <-t.st.restored:
		case <-t.st.stopped:
			return
		case <-ctx.Done():
			return
		}
		log.Info("processing notifications merged with the market", "from_offset", start, "market_offset", t.st.resumeAt)
		t.runMerged(ctx, t.st, start, log)
		return
	}
	log.Info("processing notifications; their prices live on other tasks", "from_offset", start)
	r := newPartitionReader(w.cfg.Client, w.cfg.NotificationsTopic, t.p, start, w.cfg.FetchMaxWait)
	lag := w.metrics.TaskLag.WithLabelValues(taskLabel(t.p))
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
		if err := w.gate.enter(ctx); err != nil {
			return
		}
		err = t.handle(ctx, recs)
		w.gate.leave()
		if err != nil {
			// Not acknowledged: read the batch again.
			r.next = recs[0].Offset
			continue
		}
		t.acked.Store(r.next)
	}
}

// pending is a decoded notification waiting for its price.
type pending struct {
	n    Notification
	task int // the symbol's task
	ts   int64
}

// decode splits records into notifications to join and dead letters.
func (t *processTask) decode(recs []record) (good []pending, dead []deadLetter) {
	w := t.w
	w.metrics.Records.WithLabelValues(w.cfg.NotificationsTopic).Add(float64(len(recs)))
	parts := w.partitions()
	for _, rec := range recs {
		n, err := DecodeNotification(rec.Value, w.cfg.MaxRecordBytes)
		if err != nil {
			dead = append(dead, newDeadLetter(w.cfg.NotificationsTopic, t.p, rec, err))
			continue
		}
		good = append(good, pending{n, murmur2.Partition([]byte(n.Symbol), parts), rec.Time.UnixMilli()})
	}
	return good, dead
}

// handle joins one fetched batch of a task whose state is not local, and
// writes its alerts and dead letters. It returns an error only when ctx
// ended before they were acknowledged.
func (t *processTask) handle(ctx context.Context, recs []record) error {
	w := t.w
	good, dead := t.decode(recs)
	// Hold the batch until each local task it needs has been read past its
	// notifications (or to its end), bounded by MaxTaskIdle.
	maxTs := map[int]int64{}
	for _, g := range good {
		maxTs[g.task] = max(maxTs[g.task], g.ts)
	}
	for q, ts := range maxTs {
		if st := w.stateTask(q); st != nil {
			if err := st.waitFor(ctx, ts, w.cfg.MaxTaskIdle); err != nil && ctx.Err() != nil {
				return err
			}
		}
	}
	alerts, err := t.joinAll(ctx, good)
	if err != nil {
		return err
	}
	return t.flush(ctx, alerts, dead)
}

// joinAll looks up the price of each notification. Local lookups are store
// reads; remote ones are HTTP calls, made concurrently (bounded) so that a
// batch costs about one round trip.
func (t *processTask) joinAll(ctx context.Context, good []pending) ([]Alert, error) {
	w := t.w
	alerts := make([]Alert, len(good))
	sem := make(chan struct{}, remoteConcurrency)
	var wg sync.WaitGroup
	for i, g := range good {
		alerts[i] = Alert{Notification: g.n, NotificationTsMs: g.ts, Worker: w.cfg.InstanceID}
		a := &alerts[i]
		if w.stateTask(g.task) != nil {
			a.Result, a.Price, a.PriceTsMs = w.lookup(ctx, g.task, g.n.Symbol, g.ts)
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			a.Result, a.Price, a.PriceTsMs = w.lookup(ctx, g.task, g.n.Symbol, g.ts)
		}()
	}
	wg.Wait()
	return alerts, ctx.Err()
}

// flush writes alerts and dead letters, waits for Kafka to acknowledge
// them, and counts the joins.
func (t *processTask) flush(ctx context.Context, alerts []Alert, dead []deadLetter) error {
	w := t.w
	if err := w.writeOut(ctx, alerts, dead); err != nil {
		return err
	}
	for _, a := range alerts {
		w.countJoin(a.Result)
	}
	w.metrics.Alerts.Add(float64(len(alerts)))
	return nil
}

// remoteConcurrency bounds the remote lookups in flight per task.
const remoteConcurrency = 32

// lookup finds the price of symbol, whose task is q: in the local store
// when this member holds q, otherwise from q's owner.
func (w *Worker) lookup(ctx context.Context, q int, symbol string, tsMs int64) (Result, *float64, int64) {
	if st := w.stateTask(q); st != nil {
		tick, ok, err := st.get(symbol)
		if err == nil && ok {
			return ResultLocal, &tick.Price, tick.TimestampMs
		}
		if err == nil {
			return ResultMiss, nil, 0
		}
		// The task left this member meanwhile: ask its new owner.
	}
	owner, ok := w.owner(q)
	if !ok || owner.InstanceID == w.cfg.InstanceID || owner.Addr == "" {
		return ResultMiss, nil, 0
	}
	p, found, err := w.remote.lookup(ctx, owner.Addr, symbol, tsMs)
	if err != nil {
		if ctx.Err() == nil {
			w.metrics.RemoteLookupErrs.Inc()
			w.log.Warn("remote price lookup failed; counting a miss", "symbol", symbol, "task", q, "owner", owner.InstanceID, "err", err)
		}
		return ResultMiss, nil, 0
	}
	if !found {
		return ResultMiss, nil, 0
	}
	return ResultRemote, &p.Price, p.TsMs
}

// deadLetter is a malformed input record on its way to the dead-letter
// topic.
type deadLetter struct {
	topic     string
	partition int
	rec       record
	reason    string
	err       string
}

func newDeadLetter(topic string, p int, rec record, err error) deadLetter {
	reason := ReasonInvalidValue
	var re *RecordError
	if errors.As(err, &re) {
		reason = re.Reason
	}
	return deadLetter{topic: topic, partition: p, rec: rec, reason: reason, err: err.Error()}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only our own plain structs are marshalled
	}
	return b
}
