package join

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/joiner-dev/joiner/group"
	"github.com/joiner-dev/joiner/internal/backoff"
	"github.com/segmentio/kafka-go"
)

// Start positions of Config.StartOffset: where a notifications partition
// with no committed offset starts.
const (
	StartEarliest = "earliest"
	StartLatest   = "latest"
)

// uncommittedStart is where topic-p starts when the group has no committed
// offset for it: -1 (the partition's first offset) for the market topic and
// for StartEarliest, the partition's end for notifications with
// StartLatest. It retries the end-offset lookup until ctx is done.
func (w *taskEnv) uncommittedStart(ctx context.Context, topic string, p int) (int64, error) {
	if topic != w.topics.Notifications || w.startOffset != StartLatest {
		return -1, nil
	}
	var end int64
	err := backoff.Do(ctx, backoff.Default, func(_ int, err error, _ time.Duration) error {
		w.metrics.FetchErrors.Inc()
		w.log.Warn("cannot read the end offset for --start-offset latest; retrying", "topic", topic, "partition", p, "err", err)
		return nil
	}, func(ctx context.Context) (err error) {
		end, err = listOffset(ctx, w.client, topic, p, kafka.LastOffset)
		if err != nil && ctx.Err() != nil {
			return backoff.Permanent(ctx.Err())
		}
		return err
	})
	if err != nil {
		return 0, err
	}
	w.log.Info("no committed offset; starting at the end (--start-offset latest)", "topic", topic, "partition", p, "offset", end)
	return end, nil
}

func validStartOffset(s string) error {
	switch s {
	case "", StartEarliest, StartLatest:
		return nil
	}
	return fmt.Errorf("join: Config.StartOffset %q: want %q or %q", s, StartEarliest, StartLatest)
}

// committedOffset returns the group's committed offset of topic-p, -1 when
// none, retrying until ctx is done.
func (w *taskEnv) committedOffset(ctx context.Context, topic string, p int) (int64, error) {
	var offs map[int]int64
	err := backoff.Do(ctx, backoff.Default, func(_ int, err error, _ time.Duration) error {
		w.log.Warn("cannot fetch the committed offset; retrying", "topic", topic, "partition", p, "err", err)
		return nil
	}, func(ctx context.Context) (err error) {
		offs, err = w.member.FetchOffsets(ctx, topic, []int{p})
		if err != nil && ctx.Err() != nil {
			return backoff.Permanent(ctx.Err())
		}
		return err
	})
	if err != nil {
		return 0, err
	}
	if o, ok := offs[p]; ok && o >= 0 {
		return o, nil
	}
	return w.uncommittedStart(ctx, topic, p)
}

// commitLoop commits processed offsets every CommitInterval until ctx is
// done.
func (w *Processor) commitLoop(ctx context.Context) {
	every(ctx, w.cfg.CommitInterval, func() {
		_ = w.commit(ctx) // counted and logged inside; retried next tick
	})
}

// every calls f every d until ctx is done.
func every(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}

// commit commits the acknowledged notification offsets and the applied
// market offsets of the active tasks that changed since the last commit.
// Standby tasks (Processor.standbys) are never committed.
func (w *Processor) commit(ctx context.Context) error {
	w.commitMu.Lock()
	defer w.commitMu.Unlock()
	defer w.txnPause(ctx)() // exactly-once: no write until the transaction ends (txn.go)
	w.mu.RLock()
	offsets, notifTs := w.offsetsLocked(w.procs, w.states)
	w.addHandoverLocked(offsets, notifTs)
	w.mu.RUnlock()
	return w.commitLocked(ctx, offsets, notifTs)
}

// addHandoverLocked adds to offsets (and notifTs) those of the tasks that
// Assigned has taken out of the running ones but not committed finally
// yet: paused at a handover, their batches in flight are still written
// (under exactly-once, into the open transaction), so a commit meanwhile
// must hold their offsets too. Without them, a transaction would make
// their alerts visible while their offsets stay behind, and if the final
// commit then failed (the generation gone), their next owner would write
// those alerts again. w.commitMu and w.mu are held.
func (w *Processor) addHandoverLocked(offsets map[string]map[int]int64, notifTs map[*stateTask]int64) {
	pm, sm := map[int]*processTask{}, map[int]*stateTask{}
	for p, h := range w.handover {
		if h.final {
			continue
		}
		if h.pt != nil {
			pm[p] = h.pt
		}
		if h.st != nil {
			sm[p] = h.st
		}
	}
	if len(pm)+len(sm) == 0 {
		return
	}
	more, ts := w.offsetsLocked(pm, sm)
	mergeOffsets(offsets, notifTs, more, ts)
}

// mergeOffsets adds more (and its notification timestamps ts) to offsets
// and notifTs.
func mergeOffsets(offsets map[string]map[int]int64, notifTs map[*stateTask]int64, more map[string]map[int]int64, ts map[*stateTask]int64) {
	for topic, ps := range more {
		if offsets[topic] == nil {
			offsets[topic] = map[int]int64{}
		}
		for p, o := range ps {
			offsets[topic][p] = o
		}
	}
	for st, v := range ts {
		notifTs[st] = max(notifTs[st], v)
	}
}

// commitFinal commits the last offsets of tasks Assigned has stopped
// (revoked, or restarted in another role): they are no longer in w.procs
// and w.states, so commit does not see them. The committed offsets they
// leave are forgotten, so that a task assigned here again commits afresh.
//
// Under exactly-once it then waits until the group shows the stopped
// tasks' offsets (txnAwaitVisible), so that their next owners start from
// them.
func (w *Processor) commitFinal(ctx context.Context, procs []*processTask, states []*stateTask) error {
	handed, err := w.commitStopped(ctx, procs, states)
	if err == nil {
		w.txnAwaitVisible(ctx, handed)
	}
	return err
}

// commitStopped commits the final offsets of commitFinal and returns those
// of the stopped tasks.
func (w *Processor) commitStopped(ctx context.Context, procs []*processTask, states []*stateTask) (map[string]map[int]int64, error) {
	pm := make(map[int]*processTask, len(procs))
	for _, t := range procs {
		pm[t.p] = t
	}
	sm := make(map[int]*stateTask, len(states))
	for _, s := range states {
		sm[s.p] = s
	}
	w.commitMu.Lock()
	defer w.commitMu.Unlock()
	defer w.txnPause(ctx)()
	offsets, notifTs := w.offsetsLocked(pm, sm)
	handed := map[string]map[int]int64{}
	mergeOffsets(handed, nil, offsets, nil) // a copy: txnAddRunning adds to offsets
	w.txnAddRunning(offsets, notifTs)       // exactly-once: the transaction holds their writes too
	err := w.commitLocked(ctx, offsets, notifTs)
	for p := range pm {
		delete(w.committed[w.cfg.Topics.Notifications], p)
	}
	for p := range sm {
		delete(w.committed[w.cfg.Topics.Market], p)
	}
	// Committed finally (or given up): later commits leave them out, so
	// that none commits their offsets again once they are handed over.
	w.mu.Lock()
	for p, h := range w.handover {
		if pm[p] != nil || sm[p] != nil {
			h.final = true
			w.handover[p] = h
		}
	}
	w.mu.Unlock()
	return handed, err
}

// offsetsLocked returns the offsets of procs and states not committed yet,
// and the timestamps of the notifications they cover per merged task.
// w.commitMu is held, and w.mu when the maps are the Processor's.
func (w *Processor) offsetsLocked(procs map[int]*processTask, states map[int]*stateTask) (map[string]map[int]int64, map[*stateTask]int64) {
	offsets := map[string]map[int]int64{}
	add := func(topic string, p int, next int64) {
		if next < 0 || w.committed[topic][p] == next {
			return
		}
		if offsets[topic] == nil {
			offsets[topic] = map[int]int64{}
		}
		offsets[topic][p] = next
	}
	// The timestamps of the notifications committed, per merged task, for
	// the pruning of its history once the commit succeeds.
	notifTs := map[*stateTask]int64{}
	for p, t := range procs {
		ts := t.ackedTs.Load()
		next := t.acked.Load()
		add(w.cfg.Topics.Notifications, p, next)
		if t.st != nil && next >= 0 {
			notifTs[t.st] = ts
		}
	}
	for p, st := range states {
		// Only a restored task knows where the market stands; its offset
		// never goes below what the group has committed (a store restored
		// from scratch starts below it). Standbys never get here.
		if st.isStandby() {
			continue
		}
		if next, ok := st.marketCommit(); ok {
			add(w.cfg.Topics.Market, p, next)
		}
	}
	return offsets, notifTs
}

// commitLocked commits offsets; w.commitMu is held.
func (w *Processor) commitLocked(ctx context.Context, offsets map[string]map[int]int64, notifTs map[*stateTask]int64) error {
	if (len(offsets) == 0 && !w.txnPending()) || w.member == nil {
		return nil
	}
	if err := w.commitOffsets(ctx, offsets); err != nil { // txn.go
		if !errors.Is(err, group.ErrRebalancing) {
			w.metrics.CommitErrors.Inc()
			w.log.Warn("offset commit failed; retrying at the next interval", "err", err)
		}
		return err
	}
	for st, ts := range notifTs {
		st.committedTs.Store(max(st.committedTs.Load(), ts))
	}
	if w.committed == nil {
		w.committed = map[string]map[int]int64{}
	}
	for topic, ps := range offsets {
		if w.committed[topic] == nil {
			w.committed[topic] = map[int]int64{}
		}
		for p, o := range ps {
			w.committed[topic][p] = o
		}
	}
	return nil
}
