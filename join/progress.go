package join

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
)

// progress is what watchProgress knows of one process task: its lag and
// whether it is stalled (has lag and acknowledged nothing for
// Config.StallTimeout). The atomics are read by Ready; the rest is owned
// by the watcher.
type progress struct {
	// start is the offset the task started processing from, -1 for the
	// partition's first offset; started is set once it does (a merged
	// task starts once its state is restored).
	start   atomic.Int64
	started atomic.Bool
	stalled atomic.Bool
	lag     atomic.Int64

	init  bool
	pos   int64     // the position seen last
	since time.Time // when pos last changed, or the lag was last 0
	end   int64     // the last end offset read
}

// begin records that the task processes from offset start (-1: the
// partition's first offset).
func (pr *progress) begin(start int64) {
	pr.start.Store(start)
	pr.started.Store(true)
}

// position is the next offset of the task whose alert is not acknowledged,
// or false before the task processes. A task that started at the
// partition's first offset and acknowledged nothing yet reads it.
func (t *processTask) position(ctx context.Context) (int64, bool, error) {
	if next := t.acked.Load(); next >= 0 {
		return next, true, nil
	}
	if !t.prog.started.Load() {
		return 0, false, nil
	}
	if start := t.prog.start.Load(); start >= 0 {
		return start, true, nil
	}
	first, err := listOffset(ctx, t.env.client, t.env.topics.Notifications, t.p, kafka.FirstOffset)
	if err != nil {
		return 0, false, err
	}
	t.prog.start.CompareAndSwap(-1, first)
	return first, true, nil
}

// progressInterval is how often watchProgress reads the end offsets: a
// quarter of the stall timeout, at most a second.
func (w *Processor) progressInterval() time.Duration {
	return min(w.limits.StallTimeout/4, time.Second)
}

// watchProgress sets joiner_task_lag_records and joiner_task_stalled of
// every process task every progressInterval until ctx is done: the lag is
// the notifications partition's end offset minus the task's position, read
// whether or not the task takes notifications. A task with lag whose
// position has not moved for StallTimeout is stalled: logged at ERROR,
// joiner_task_stalled 1, and /readyz fails, until it moves again.
func (w *Processor) watchProgress(ctx context.Context) {
	every(ctx, w.progressInterval(), func() {
		w.checkGrowth(ctx)
		w.checkProgress(ctx, time.Now())
	})
}

// checkProgress is one round of watchProgress, at now.
func (w *Processor) checkProgress(ctx context.Context, now time.Time) {
	w.mu.RLock()
	procs := make([]*processTask, 0, len(w.procs))
	for _, t := range w.procs {
		procs = append(procs, t)
	}
	w.mu.RUnlock()
	lctx, cancel := context.WithTimeout(ctx, w.progressInterval())
	defer cancel()
	// The positions first, then the ends of all their partitions in one
	// request.
	var (
		tasks []*processTask
		pos   []int64
		req   []kafka.OffsetRequest
	)
	for _, t := range procs {
		p, ok, err := t.position(lctx)
		if !ok {
			if err != nil && ctx.Err() == nil {
				w.metrics.FetchErrors.Inc()
			}
			continue // not processing yet (restoring: /readyz says so)
		}
		tasks, pos = append(tasks, t), append(pos, p)
		req = append(req, kafka.OffsetRequest{Partition: t.p, Timestamp: kafka.LastOffset})
	}
	if len(tasks) == 0 {
		return
	}
	ends := map[int]int64{}
	topic := w.cfg.Topics.Notifications
	res, err := w.cfg.Client.ListOffsets(lctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: req}})
	if err == nil {
		for _, po := range res.Topics[topic] {
			if po.Error == nil {
				ends[po.Partition] = po.LastOffset
			}
		}
	}
	if ctx.Err() != nil {
		return
	}
	for i, t := range tasks {
		end, ok := ends[t.p]
		switch {
		case ok:
			t.prog.end = end
		case !t.prog.init:
			w.metrics.FetchErrors.Inc()
			continue
		default:
			w.metrics.FetchErrors.Inc()
			end = t.prog.end // the last one known; the task cannot read either
		}
		lag := max(end-pos[i], 0)
		w.mu.RLock()
		current := w.procs[t.p] == t
		if current {
			w.metrics.TaskLag.WithLabelValues(taskLabel(t.p)).Set(float64(lag))
			if !t.prog.init {
				// Exported at 0 from the task's first reading on, so a
				// dashboard and JoinerTaskStalled see the series.
				w.metrics.TaskStalled.WithLabelValues(taskLabel(t.p)).Set(0)
			}
			t.counters.nLag.Store(lag)
		}
		w.mu.RUnlock()
		if current {
			t.observeProgress(pos[i], lag, now)
		}
	}
}

// observeProgress takes the position and lag read at now.
func (t *processTask) observeProgress(pos, lag int64, now time.Time) {
	w, pr := t.env, &t.prog
	pr.lag.Store(lag)
	if !pr.init || pos != pr.pos || lag == 0 {
		pr.init, pr.pos, pr.since = true, pos, now
		if pr.stalled.Swap(false) {
			w.metrics.TaskStalled.WithLabelValues(taskLabel(t.p)).Set(0)
			w.log.Info("task progresses again", "task", t.p, "topic", w.topics.Notifications, "offset", pos, "lag", lag)
		}
		return
	}
	if now.Sub(pr.since) >= w.limits.StallTimeout && !pr.stalled.Swap(true) {
		w.metrics.TaskStalled.WithLabelValues(taskLabel(t.p)).Set(1)
		w.log.Error("task makes no progress: notifications wait unprocessed; /readyz fails until it moves (check the worker log for what it waits for: the market, a lookup, the output)",
			"task", t.p, "topic", w.topics.Notifications, "offset", pos, "lag", lag, "for", now.Sub(pr.since).Round(time.Millisecond))
	}
}

// stalledLocked returns why the stalled process tasks fail readiness, ""
// when none is; w.mu is held.
func (w *Processor) stalledLocked() string {
	var ps []int
	var lag int64
	for p, t := range w.procs {
		if t.prog.stalled.Load() {
			ps = append(ps, p)
			lag += t.prog.lag.Load()
		}
	}
	if len(ps) == 0 {
		return ""
	}
	slices.Sort(ps)
	return fmt.Sprintf("tasks %v made no progress for %v with %d notifications unprocessed", ps, w.limits.StallTimeout, lag)
}
