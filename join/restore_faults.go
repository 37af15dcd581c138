package join

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/joiner-dev/joiner/internal/backoff"
	"github.com/joiner-dev/joiner/statestore"
)

// Store faults on the join side. A task whose store cannot be opened is
// not processed on this member: neither its state task nor its process
// task starts, so none of its notifications are consumed or committed here
// (before this, its notifications were joined against no state and every
// one became a miss). Its store is retried with backoff, then moved aside
// and rebuilt in a fresh dir (another state dir if the first is unusable);
// if that fails too the task is failed: joiner_tasks{role="failed"},
// /readyz 503 naming it, an ERROR, and the member stops claiming it and
// rejoins so the leader gives it to another member. A store that cannot
// open because its disk is full (statestore.IsDiskFull: under the minimum
// free space, ENOSPC, EDQUOT) or whose open did not return in time is not
// retried nor rebuilt: the task is failed at once (failsAtOnce).

// storeOpenAttempts is how many times a failed open is retried (with
// backoff) before the store is moved aside and rebuilt.
const storeOpenAttempts = 3

// storeFaults is the Processor's record of tasks whose store failed.
type storeFaults struct {
	mu      sync.Mutex
	pending map[int]error       // failed in Assigned, retry not started yet
	retries map[int]*storeRetry // retrying now
	failed  map[int]string      // gave up: task → why
	errs    map[int]error       // the latest error of each retrying task
}

type storeRetry struct {
	p       int
	stopped chan struct{}
}

// storeFaultLocked records that task p's store failed to open during
// Assigned (w.mu is held, read-locked); retryStores starts its retry.
func (w *Processor) storeFaultLocked(p int, err error) {
	f := &w.faults
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pending == nil {
		f.pending = map[int]error{}
	}
	f.pending[p] = err
	w.log.Error("cannot open the task store; the task is not processed on this member until it can",
		"task", p, "err", err)
}

// stopStoreRetries stops every retry in flight and forgets failed tasks:
// the new assignment opens each of its tasks again. Called first thing in
// Assigned, before w.mu is taken.
func (w *Processor) stopStoreRetries() {
	f := &w.faults
	f.mu.Lock()
	retries := f.retries
	f.retries, f.pending, f.errs = nil, nil, nil // failed stays: the member still cannot run those tasks
	f.mu.Unlock()
	for _, r := range retries {
		w.stopTask(r, r.stopped)
	}
	w.updateFailedGauge()
}

// retryStores starts the retries of the stores that failed in Assigned.
// Called at the end of Assigned, without w.mu.
func (w *Processor) retryStores() {
	f := &w.faults
	w.mu.RLock()
	f.mu.Lock()
	for p := range f.failed {
		if w.states[p] != nil { // it opened after all
			delete(f.failed, p)
		}
	}
	w.mu.RUnlock()
	pending := f.pending
	f.pending = nil
	var started []*storeRetry
	for p, err := range pending {
		if f.retries == nil {
			f.retries, f.errs = map[int]*storeRetry{}, map[int]error{}
		}
		r := &storeRetry{p: p, stopped: make(chan struct{})}
		f.retries[p], f.errs[p] = r, err
		started = append(started, r)
	}
	f.mu.Unlock()
	for _, r := range started {
		w.startTask(r, func(ctx context.Context) { w.retryStore(ctx, r, pending[r.p]) })
	}
}

// failsAtOnce reports whether a store's open failed for a reason that a
// retry or a rebuild on this member does not cure: a full disk (which a
// restore would only fill further) or an open that did not return.
func failsAtOnce(err error) bool {
	return statestore.IsDiskFull(err) || errors.Is(err, statestore.ErrOpenTimeout) || errors.Is(err, statestore.ErrOpenStuck)
}

func (w *Processor) retryStore(ctx context.Context, r *storeRetry, err error) {
	defer close(r.stopped)
	p := r.p
	if failsAtOnce(err) {
		w.failTask(p, err)
		return
	}
	// Not backoff.Do: the first attempt was Assigned's, so each retry
	// waits (and says how long) before it, and after storeOpenAttempts
	// the store is rebuilt instead of given up on.
	for attempt := range storeOpenAttempts {
		d := backoff.Default.Delay(attempt)
		w.log.Warn("retrying to open the task store", "task", p, "attempt", attempt+1, "of", storeOpenAttempts, "in", d, "err", err)
		if backoff.Sleep(ctx, d) != nil {
			return
		}
		var store *statestore.Store
		if store, err = w.cfg.Stores.OpenTaskContext(ctx, p); err == nil {
			w.adoptStore(ctx, p, store)
			return
		}
		if ctx.Err() != nil {
			return
		}
		if failsAtOnce(err) {
			w.failTask(p, err)
			return
		}
		w.setRetryErr(p, err)
	}
	w.log.Warn("the task store stays unusable; moving it aside and rebuilding it from Kafka in a fresh dir", "task", p, "err", err)
	store, rerr := w.cfg.Stores.Rebuild(p)
	if rerr == nil {
		w.adoptStore(ctx, p, store)
		return
	}
	w.failTask(p, fmt.Errorf("open: %w; rebuild: %w", err, rerr))
}

func (w *Processor) setRetryErr(p int, err error) {
	w.faults.mu.Lock()
	if w.faults.errs != nil {
		w.faults.errs[p] = err
	}
	w.faults.mu.Unlock()
}

// adoptStore starts the tasks of p on store, if p is still assigned here
// and has no state task yet; otherwise it closes store.
func (w *Processor) adoptStore(ctx context.Context, p int, store *statestore.Store) {
	w.mu.Lock()
	inState := slices.Contains(w.assignment.Topics[w.cfg.Topics.Market], p)
	inProc := slices.Contains(w.assignment.Topics[w.cfg.Topics.Notifications], p)
	if ctx.Err() != nil || !inState || w.states[p] != nil {
		w.mu.Unlock()
		if err := store.Close(); err != nil && !errors.Is(err, statestore.ErrClosed) {
			w.log.Warn("closing task store", "task", p, "err", err)
		}
		return
	}
	st := newStateTask(&w.taskEnv, p, store, inProc)
	w.states[p] = st
	var pt *processTask
	if inProc && w.procs[p] == nil {
		pt = newProcessTask(&w.taskEnv, p, st)
		w.procs[p] = pt
	}
	w.mu.Unlock()
	w.faults.mu.Lock()
	delete(w.faults.retries, p)
	delete(w.faults.errs, p)
	delete(w.faults.failed, p)
	w.faults.mu.Unlock()
	w.updateFailedGauge()
	w.restores.Add(1)
	w.startTask(st, st.run)
	if pt != nil {
		w.startTask(pt, pt.run)
	}
	w.updateTaskGauges()
	w.log.Info("the task store is usable again; the task starts on this member", "task", p, "dir", store.Dir())
}

// failTask gives up on p on this member.
func (w *Processor) failTask(p int, err error) {
	f := &w.faults
	f.mu.Lock()
	if f.failed == nil {
		f.failed = map[int]string{}
	}
	f.failed[p] = err.Error()
	delete(f.retries, p)
	delete(f.errs, p)
	f.mu.Unlock()
	w.updateFailedGauge()
	w.log.Error("task failed on this member: its store cannot be used here; releasing it so that the group moves it to another member",
		"task", p, "disk_full", statestore.IsDiskFull(err), "errno", statestore.Errno(err), "err", err)
	if r, ok := w.member.(interface{ Release(task int) }); ok {
		r.Release(p)
	}
}

func (w *Processor) updateFailedGauge() {
	w.faults.mu.Lock()
	n := len(w.faults.failed)
	w.faults.mu.Unlock()
	w.metrics.Tasks.WithLabelValues("failed").Set(float64(n))
}

// storeFaultReason is the /readyz reason for failed and retrying stores,
// or "".
func (w *Processor) storeFaultReason() string {
	f := &w.faults
	f.mu.Lock()
	defer f.mu.Unlock()
	var parts []string
	if len(f.failed) > 0 {
		ps := make([]int, 0, len(f.failed))
		for p := range f.failed {
			ps = append(ps, p)
		}
		slices.Sort(ps)
		for _, p := range ps {
			parts = append(parts, fmt.Sprintf("task %d failed: %s", p, f.failed[p]))
		}
	}
	retrying := make([]int, 0, len(f.retries)+len(f.pending))
	for p := range f.retries {
		retrying = append(retrying, p)
	}
	for p := range f.pending {
		retrying = append(retrying, p)
	}
	if len(retrying) > 0 {
		slices.Sort(retrying)
		parts = append(parts, fmt.Sprintf("task stores %v cannot be opened; retrying", retrying))
	}
	return strings.Join(parts, "; ")
}
