// Package join is the task processor of joiner. A Processor receives its
// assignment from the group membership loop and runs, for each task p it is
// given, a state task (restore and tail market-p into the task's Pebble
// store) and a process task (read notifications-p, hold each batch until
// the market is read past it, join every notification with its symbol's
// price, write the enriched alerts, and dead-letter malformed records).
// Joins are counted as local, remote or miss.
//
// For each standby task it is given (Assignment.Standby, warm-ups
// included) it runs a standby state task: it tails market-p into the
// task's store, but never processes notifications, never dead-letters,
// serves no lookups and is never committed. When the task becomes active
// here the store goes on, so only the tail after the standby's offset is
// restored (counted as a failover); when it goes back to standby, the
// store stays and only the process task stops.
//
// Rebalances are cooperative (group.Handler: the group revokes a moving
// task from its old owner in one generation and gives it to its new owner
// only in a later one): tasks keep running from Rebalancing (which
// commits) to Assigned, which pauses only the tasks that stop here, each
// at its own gate: their batches in flight finish (bounded) or are
// abandoned unwritten, their final offsets are committed in the new
// generation, and their stores are deleted or handed to the task's new
// role. Tasks that stay never pause. Lost stops everything at once.
//
// Delivery is at least once: alerts are acknowledged by Kafka before the
// offsets of the notifications that produced them are committed, and a
// store holds its prices and the market offset they came from in one batch.
// Under exactly-once (EnableExactlyOnce, txn.go) every commit is one Kafka
// transaction holding the alerts, the dead letters and the offsets.
//
// The files, by stage:
//
//	input*.go    the edges: Fetcher and Writer, the partition reader, offset resets
//	env.go       the task environment: what the Processor hands its tasks
//	taskplan.go  the task manager: what an assignment changes (Assigned carries it out)
//	restore.go   state tasks: their lifecycle and roles; restore and tail market-p into the store
//	restore_load.go    the bulk load of a long restore
//	restore_budget.go  the worker-wide budget of the ticks bulk restores hold
//	restore_copy.go    dead-lettering the ticks a promoted standby copy skipped
//	restore_wait.go    waiting for a task's state to be read past a notification
//	restore_faults.go  stores that fail to open
//	merge.go     the aligned merge of market-p and notifications-p of a merged task
//	process.go   process tasks: decode, hold, join every notification of a batch
//	lookup.go    the price as of a time: local (PriceAsOf) and remote (the owner's /v1/prices)
//	repartition.go  partition count changes: a moved symbol's earlier tasks are asked too
//	planconfirm.go  no join before an uncached read confirmed the plan's partition counts
//	output.go    alerts and dead letters: the outbox and the writes
//	commit.go    the commit loop, committed and start offsets
//	txn.go       exactly-once: one transaction per commit, abort and rewind
//	gate.go      a process task's gate, closed when the task is revoked
//	worker.go    the Processor: configuration, rebalance (Assigned), Held and Owned
//	progress.go  each task's lag from its partition's end, and stalls (no progress with lag)
//	status.go    readiness, Stats and the assignment view
//	taskstatus.go  each task's state for the status page, the rebalance history
//
// Record formats live in package record, the HTTP API in package httpapi.
package join

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/joiner-dev/joiner/group"
	"github.com/joiner-dev/joiner/murmur2"
	"github.com/joiner-dev/joiner/record"
	"github.com/joiner-dev/joiner/statestore"
	"github.com/prometheus/client_golang/prometheus"
)

// Config configures a Processor. Zero values take the defaults shown.
type Config struct {
	// Client reads the input topics (a *kafka.Client). Required.
	Client Fetcher
	// Writer writes alerts and dead letters (node gives it a
	// produce.Producer); a *kafka.Writer's Topic must be empty (each
	// message names its topic).
	// Required.
	Writer Writer
	// Stores opens the per-task stores. Required.
	Stores *statestore.Manager
	// InstanceID is this member's stable id. Required.
	InstanceID string

	// Topics names the topics; empty names take record's defaults.
	Topics record.Topics
	// Fields names the symbol member of ticks and notifications and the
	// price member of ticks; empty names take record's defaults.
	Fields record.Fields
	// Grace is how far past a notification's timestamp the market must be
	// read before the notification is joined (a tick written up to Grace
	// after newer ones is still seen), or, when the market is confirmed at
	// its end, how long after the notification's timestamp (by the wall
	// clock) that confirmation must be. Default: 0 (none).
	Grace time.Duration

	// MaxTaskIdle bounds how long a notification is held waiting for the
	// market to be read past its timestamp. Default: 1s.
	MaxTaskIdle time.Duration
	// CommitInterval is how often processed offsets are committed.
	// Default: 1s.
	CommitInterval time.Duration
	// FetchMaxWait is the long-poll time of a fetch. Default: 250ms.
	FetchMaxWait time.Duration
	// MaxRecordBytes bounds an input record value; larger ones are
	// dead-lettered. Default: DefaultMaxRecordBytes.
	MaxRecordBytes int
	// MaxMessageBytes are the max.message.bytes of the output topics
	// (node reads them at start), by topic; a topic it does not name is
	// taken to allow DefaultMaxMessageBytes. An alert larger than its
	// topic allows is dead-lettered (record.ReasonAlertTooLarge), a dead
	// letter larger than its topic allows is truncated (see
	// Processor.writeOutWith).
	MaxMessageBytes map[string]int
	// RemoteTimeout bounds one remote price lookup, retries included.
	// Default: 5s.
	RemoteTimeout time.Duration
	// StallTimeout: a task with unprocessed notifications that acknowledges
	// none for this long is stalled: logged at ERROR, joiner_task_stalled
	// 1 and /readyz failing until it moves. Default: 1m.
	StallTimeout time.Duration
	// HistoryRetention is how much price history a task keeps before its
	// newest committed notification: every version newer than that, plus
	// the newest one at or before it. A notification older than the kept
	// history is joined with the oldest kept price and counted as late.
	// Default: 1h.
	HistoryRetention time.Duration
	// BulkRestoreMin: a restore of at least this many market records
	// bulk-loads the task's store (statestore.Loader: the ticks sorted in
	// memory, about 40 bytes each, and ingested as tables, at about a
	// quarter of the CPU of applying them batch by batch); a shorter one,
	// like the catch-up of a task that stayed, applies its batches.
	// Default: DefaultBulkRestoreMin; negative (BulkRestoreNever): never.
	BulkRestoreMin int64
	// PartitionCheckInterval is the least time between two reads of the
	// input topics' partition counts that confirm the plan for the
	// notifications about to be joined (planconfirm.go): a live
	// notification waits for the next one. Default:
	// DefaultPartitionCheckInterval.
	PartitionCheckInterval time.Duration
	// HTTPClient makes remote lookups. Default: a client with keep-alives.
	HTTPClient *http.Client
	// StartOffset is where a notifications partition with no committed
	// offset starts: StartEarliest (the default) or StartLatest.
	StartOffset string

	// Registerer receives the worker's metrics. Default: a new registry,
	// returned by Registry.
	Registerer prometheus.Registerer
	// Logger. Default: slog.Default().
	Logger *slog.Logger
}

// Membership is what a Processor needs of the group: *group.Member.
type Membership interface {
	Run(ctx context.Context) error
	Commit(ctx context.Context, offsets map[string]map[int]int64) error
	FetchOffsets(ctx context.Context, topic string, partitions []int) (map[int]int64, error)
	// Active reports whether the coordinator confirmed this member's
	// generation less than a session timeout ago. Alerts are written only
	// while it is true: a member paused past its session may have been
	// replaced, and learns it at its next heartbeat.
	Active() bool
}

// Processor is one member's task processor. It implements group.Handler.
type Processor struct {
	// taskEnv is what the tasks are handed (env.go): the metrics, the
	// loggers, the output and the group's committed offsets are in it.
	taskEnv

	cfg Config
	reg *prometheus.Registry // nil when Config.Registerer was given

	faults storeFaults // tasks whose store failed (restore_faults.go)

	// ctx is the context tasks run under; done is Run's ctx.Done(). Set
	// by Run.
	ctx  context.Context
	done <-chan struct{}

	mu         sync.RWMutex
	assigned   bool
	assignment group.Assignment
	states     map[int]*stateTask // active state tasks
	standbys   map[int]*stateTask // standby and warm-up state tasks
	procs      map[int]*processTask
	// lastParts is the partition count of the last plan, and pastParts
	// the earlier counts planned with (repartition.go); kept across a lost
	// membership.
	lastParts int
	pastParts []int
	// grownFrom is the partition count of the current plan once both
	// input topics were seen with more (checkGrowth), else 0.
	grownFrom atomic.Int64
	cancels   map[any]context.CancelFunc
	tasks     sync.WaitGroup

	// The join and moved counts of Stats are read from metrics; these two
	// have no metric of the same meaning.
	restores  atomic.Int64             // state tasks started
	commitMu  sync.Mutex               // serializes commits
	committed map[string]map[int]int64 // last successful commit; guarded by commitMu

	statusState // taskstatus.go

	// confirm confirms the plan's partition counts for the notifications
	// joined (planconfirm.go), nil when the client cannot; rounds are its
	// goroutines.
	confirm *planConfirm
	rounds  sync.WaitGroup
}

// NewProcessor validates cfg and builds a Processor.
func NewProcessor(cfg Config) (*Processor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	w := &Processor{
		cfg:      cfg,
		states:   map[int]*stateTask{},
		standbys: map[int]*stateTask{},
		procs:    map[int]*processTask{},
		cancels:  map[any]context.CancelFunc{},
	}
	reg := cfg.Registerer
	if reg == nil {
		w.reg = prometheus.NewRegistry()
		reg = w.reg
	}
	w.taskEnv.init(cfg, cfg.Logger.With("instance", cfg.InstanceID), NewMetrics(reg))
	w.peers = w
	w.status = &w.statusState
	w.taskGauges = w.updateTaskGauges
	w.registerFaultMetrics(reg)
	w.loadPartitionCounts()
	var err error
	if w.confirm, err = newPlanConfirm(cfg.Client, cfg.PartitionCheckInterval); err != nil {
		w.log.Error("cannot read the input topics' partition counts uncached; joins are not held for a partition change the cached metadata does not show yet", "err", err)
	}
	w.remote = &remoteClient{http: cfg.HTTPClient, timeout: cfg.RemoteTimeout, hist: w.metrics.RemoteLookup}
	return w, nil
}

// Run runs the worker as a member of the group until ctx is done, then
// stops every task and returns. It owns the membership loop, the committer
// and every task goroutine, and waits for all of them.
func (w *Processor) Run(ctx context.Context, m Membership) error {
	w.member = m
	w.done = ctx.Done()
	// Tasks run until stopAll cancels them, not until ctx ends: at
	// shutdown, the batches in flight finish and are committed first.
	var cancelTasks context.CancelFunc
	w.ctx, cancelTasks = context.WithCancel(context.WithoutCancel(ctx))
	defer cancelTasks()
	commitCtx, stopCommitter := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.commitLoop(commitCtx)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.watchProgress(commitCtx)
	}()
	err := m.Run(ctx)
	// m.Run has left the group (its Rebalancing call committed after the
	// tasks stopped). Stop whatever is left.
	w.stopAll()
	stopCommitter()
	wg.Wait()
	cancelTasks() // a confirmation round may still wait (planconfirm.go)
	w.rounds.Wait()
	w.confirm.close()
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("worker %s: %w", w.cfg.InstanceID, err)
	}
	return nil
}

// Assigned implements group.Handler: start new tasks, stop gone ones, keep
// the others running untouched.
//
// A task this member stops processing (revoked, or restarted in another
// role) is paused alone: its gate closes, its batches in flight finish
// (bounded by pauseTimeout and ctx) or are abandoned unwritten, it stops,
// and its final offsets are committed in this generation before Assigned
// returns; then its store is closed and deleted, or handed over when the
// task stays here in another role (a standby, or an active task from a
// standby). Each such task observes joiner_rebalance_pause_seconds once.
// The tasks that stay never pause.
func (w *Processor) Assigned(ctx context.Context, a group.Assignment) {
	w.stopStoreRetries()
	w.metrics.Rebalances.Inc()
	if a.Leader {
		w.metrics.TasksMoved.Add(float64(a.Moved))
	}
	if a.Error != "" {
		w.log.Error("the group leader could not plan an assignment; this member holds no tasks until it can", "generation", a.Generation, "err", a.Error)
	}
	// Work out the changes, and take the tasks that stop out of the
	// running ones.
	w.mu.Lock()
	prev := w.assignment
	plan := planTasks(w.runningLocked(), wantedOf(a, w.cfg.Topics))
	stop := w.detachLocked(&plan)
	w.mu.Unlock()
	w.metrics.TasksRevoked.Add(float64(len(plan.revoked)))
	w.metrics.TasksAssigned.Add(float64(len(plan.assigned)))
	w.recordRebalance(prev, a, plan.assigned, plan.revoked)

	// Pause the active tasks that stop, commit their final offsets, then
	// dispose of their stores: kept for a role they take here, else
	// closed and deleted.
	began := time.Now()
	w.pause(ctx, stop.procs)
	w.stopTasks(ctx, stop)
	kept := w.dispose(&plan, stop)
	for range plan.paused() {
		w.metrics.RebalancePause.Observe(time.Since(began).Seconds())
	}
	if plan.stops() {
		w.log.Info("tasks revoked", "state", plan.stopState, "process", plan.stopProc, "standby", plan.stopStandby,
			"paused_seconds", time.Since(began).Seconds())
	}

	// Start the new tasks.
	states, standbys := w.startTasks(ctx, a, &plan, kept)
	w.log.Info("assignment applied", "generation", a.Generation, "leader", a.Leader, "moved", a.Moved,
		"state_tasks", a.Topics[w.cfg.Topics.Market], "process_tasks", a.Topics[w.cfg.Topics.Notifications], "standby_tasks", plan.standby, "warmup_tasks", a.Warmup,
		"new_state_tasks", taskIDs(states), "new_standby_tasks", taskIDs(standbys))
}

// stoppingTasks are the tasks an assignment stops (taskPlan).
type stoppingTasks struct {
	procs            []*processTask
	states, standbys []*stateTask
}

// detachLocked takes the tasks plan stops out of the running ones, sets
// the roles of the standbys that stay, and lists the paused tasks on the
// status page until they are handed over; w.mu is held.
func (w *Processor) detachLocked(plan *taskPlan) stoppingTasks {
	var stop stoppingTasks
	for _, p := range plan.stopProc {
		stop.procs = append(stop.procs, w.procs[p])
		delete(w.procs, p)
	}
	for _, p := range plan.stopState {
		stop.states = append(stop.states, w.states[p])
		delete(w.states, p)
	}
	for _, p := range plan.stopStandby {
		stop.standbys = append(stop.standbys, w.standbys[p])
		delete(w.standbys, p)
	}
	for p, warm := range plan.roles {
		w.standbys[p].setRole(warm)
	}
	w.handover = map[int]handoverTask{}
	for _, t := range stop.procs {
		w.handover[t.p] = handoverTask{pt: t, st: t.st}
	}
	for _, t := range stop.states {
		h := w.handover[t.p]
		h.st = t
		w.handover[t.p] = h
	}
	return stop
}

// stopTasks stops the tasks of stop (the process tasks paused), and
// commits the final offsets of the active ones in this generation.
func (w *Processor) stopTasks(ctx context.Context, stop stoppingTasks) {
	for _, t := range stop.procs {
		w.stopTask(t, t.stopped)
		w.metrics.TaskLag.DeleteLabelValues(taskLabel(t.p))
		w.metrics.TaskStalled.DeleteLabelValues(taskLabel(t.p))
	}
	for _, t := range stop.states {
		w.stopTask(t, t.stopped)
	}
	if len(stop.procs)+len(stop.states) > 0 {
		if err := w.commitFinal(ctx, stop.procs, stop.states); err != nil {
			w.log.Warn("committing the offsets of stopped tasks failed; their next owners may process some notifications again",
				"state", taskIDs(stop.states), "process", taskIDs(stop.procs), "err", err)
		}
	}
	for _, t := range stop.standbys {
		w.stopTask(t, t.stopped)
		w.metrics.StandbyLag.DeleteLabelValues(taskLabel(t.p))
	}
}

// dispose returns the stores of the stopped state and standby tasks that
// plan hands over to the task's new role here, and closes and deletes
// the others.
func (w *Processor) dispose(plan *taskPlan, stop stoppingTasks) map[int]*statestore.Store {
	kept := map[int]*statestore.Store{}
	for _, t := range slices.Concat(stop.states, stop.standbys) {
		if _, ok := plan.handover[t.p]; ok {
			kept[t.p] = t.store
			continue
		}
		if err := t.close(); err != nil {
			w.log.Warn("closing task store", "task", t.p, "err", err)
		}
		// The task's owner (and its standbys) hold its state now. Dropping
		// this copy bounds the disk and keeps the tasks reported after a
		// restart (Config.Owned, Held) to the ones this member really held.
		if err := w.cfg.Stores.RemoveTask(t.p); err != nil {
			w.log.Warn("removing the store of a revoked task", "task", t.p, "err", err)
		}
	}
	return kept
}

// paused are the tasks whose active tasks the plan pauses (each observes
// joiner_rebalance_pause_seconds once).
func (p *taskPlan) paused() map[int]bool {
	out := taskSet(p.stopProc)
	for _, q := range p.stopState {
		out[q] = true
	}
	return out
}

// startTasks builds the new tasks of plan on their stores (kept: handed
// over; else opened), publishes them with the assignment a in one step
// (so /readyz never sees a half-applied assignment), then starts them. It
// returns the state and standby tasks started.
func (w *Processor) startTasks(ctx context.Context, a group.Assignment, plan *taskPlan, kept map[int]*statestore.Store) (states, standbys []*stateTask) {
	opened := w.openNewStores(ctx, a, plan, kept)
	for p, r := range opened { // taken below; the rest is closed with kept
		if r.err == nil {
			kept[p] = r.store
		}
	}
	storeOf := func(p int) (*statestore.Store, error) {
		if s := kept[p]; s != nil {
			delete(kept, p)
			return s, nil
		}
		if r, ok := opened[p]; ok && r.err != nil {
			return nil, r.err
		}
		return w.openStore(ctx, p)
	}
	var procs []*processTask
	fresh := map[int]*stateTask{}
	w.mu.RLock()
	for _, s := range plan.startState {
		store, err := storeOf(s.p)
		if err != nil {
			w.storeFaultLocked(s.p, err)
			continue
		}
		st := newStateTask(&w.taskEnv, s.p, store, s.merged)
		st.fromCopy = s.fromCopy
		states = append(states, st)
		fresh[s.p] = st
	}
	for _, s := range plan.startProc {
		var st *stateTask
		if s.merged {
			if st = w.states[s.p]; st == nil {
				st = fresh[s.p]
			}
			if st == nil {
				continue // its store failed to open: not processed here (restore_faults.go)
			}
		}
		procs = append(procs, newProcessTask(&w.taskEnv, s.p, st))
	}
	for _, s := range plan.startStandby {
		store, err := storeOf(s.p)
		if err != nil {
			// A standby is an optimisation: without it the task's next
			// owner restores more. It is tried again at the next rebalance.
			w.log.Warn("cannot open the store of a standby task; this member keeps no copy of it", "task", s.p, "err", err)
			continue
		}
		standbys = append(standbys, newStandbyTask(&w.taskEnv, s.p, store, s.warm))
	}
	w.mu.RUnlock()
	for p, s := range kept { // not taken by a new task (cannot happen): do not leak it open
		if err := s.Close(); err != nil && !errors.Is(err, statestore.ErrClosed) {
			w.log.Warn("closing task store", "task", p, "err", err)
		}
	}
	w.mu.Lock()
	w.notePartitionsLocked(a.Partitions, a.PastPartitions, a.Error)
	w.assigned = true
	w.assignment = a
	w.handover = nil
	for _, st := range states {
		w.states[st.p] = st
	}
	for _, st := range standbys {
		w.standbys[st.p] = st
	}
	for _, pt := range procs {
		w.procs[pt.p] = pt
	}
	w.mu.Unlock()
	w.restores.Add(int64(len(states)))
	for _, st := range slices.Concat(states, standbys) {
		w.startTask(st, st.run)
	}
	for _, pt := range procs {
		w.startTask(pt, pt.run)
	}
	w.retryStores()
	w.updateTaskGauges()
	return states, standbys
}

// Held returns every task whose store this member holds, active, standby
// or left on disk, with the next market offset the store lacks (its
// applied offset + 1): group.Config.Held, reported to the leader before
// each JoinGroup for lag-aware placement. Open stores are read live, closed
// ones once (statestore.Manager.Held). Tasks that failed on this member
// are left out. Nil when the stores cannot be listed.
func (w *Processor) Held() map[int]int64 {
	held, err := w.cfg.Stores.Held()
	if err != nil {
		w.log.Warn("cannot list the task stores held here; the group leader places tasks without their lags", "err", err)
		return nil
	}
	w.faults.mu.Lock()
	for p := range w.faults.failed {
		delete(held, p)
	}
	w.faults.mu.Unlock()
	return held
}

// Owned returns the tasks whose store on disk this member used as their
// active owner, ascending: group.Config.Owned, reported after a restart
// (instead of statestore.Manager.Tasks, which also lists standby copies,
// which are reported through Held only). Nil when the stores cannot be
// listed.
func (w *Processor) Owned() []int {
	tasks, err := w.cfg.Stores.ActiveTasks()
	if err != nil {
		w.log.Warn("cannot list the task stores held here", "err", err)
		return nil
	}
	return tasks
}

// activeLocked returns the tasks this member runs as active (a state or a
// process task); w.mu is held.
func (w *Processor) activeLocked() map[int]bool {
	out := make(map[int]bool, len(w.states)+len(w.procs))
	for p := range w.states {
		out[p] = true
	}
	for p := range w.procs {
		out[p] = true
	}
	return out
}

// pause closes the gates of ts and waits for their batches in flight,
// for at most pauseTimeout (and ctx): a batch stuck on an unavailable
// Kafka must not hold the rebalance up (it is then abandoned by its
// task's stop: its alerts may be written twice, never lost).
func (w *Processor) pause(ctx context.Context, ts []*processTask) {
	if len(ts) == 0 {
		return
	}
	for _, t := range ts {
		t.gate.shut()
	}
	pctx, cancel := context.WithTimeout(ctx, pauseTimeout)
	defer cancel()
	var stuck []int
	for _, t := range ts {
		if !t.gate.close(pctx) {
			stuck = append(stuck, t.p)
		}
	}
	if len(stuck) > 0 {
		w.log.Warn("batches still in flight when their tasks were revoked; their alerts may be written again by the next owner", "tasks", stuck)
	}
}

// Rebalancing implements group.Handler: commit what has been processed
// while this generation still can. The tasks keep running through the
// rebalance: the group withholds a moving task until its owner gave it up
// (Assigned pauses only the tasks that stop). When the worker is shutting
// down, every task is paused and stopped first so the commit is final.
func (w *Processor) Rebalancing(ctx context.Context) {
	if w.shuttingDown() {
		w.mu.RLock()
		procs := make([]*processTask, 0, len(w.procs))
		for _, t := range w.procs {
			procs = append(procs, t)
		}
		w.mu.RUnlock()
		w.pause(ctx, procs)
		w.stopAll()
	}
	if err := w.commit(ctx); err != nil {
		w.log.Info("the commit at the rebalance failed; it is retried, and the next owners may process some notifications again", "err", err)
	}
}

// Lost implements group.Handler: the membership was lost, so other members
// may already process this member's tasks. Every task stops at once: the
// batches in flight are abandoned unwritten (their contexts end), nothing
// is committed, and the stores are closed but kept on disk (they are
// versioned, so a task assigned here again restores only what it lacks and
// resumes from the group's committed offsets). Standby tasks stop too.
func (w *Processor) Lost(ctx context.Context, err error) {
	w.mu.Lock()
	n := len(w.procs)
	lost := sortedKeys(w.activeLocked())
	w.mu.Unlock()
	w.metrics.TasksLost.Add(float64(n))
	w.log.Warn("group membership lost: stopping every task without writing or committing more; tasks assigned again restart from the committed offsets",
		"tasks", n, "err", err)
	w.stopAll()
	w.txnLost(ctx)
	w.addHistory(RebalanceEvent{At: time.Now(), Generation: w.currentAssignment().Generation, Moved: []TaskMove{},
		Reason: fmt.Sprintf("membership lost (%v): every task stopped without committing", err), Assigned: []int{}, Revoked: lost})
	w.mu.Lock()
	w.states = map[int]*stateTask{}
	w.standbys = map[int]*stateTask{}
	w.procs = map[int]*processTask{}
	w.assigned = false
	w.assignment = group.Assignment{}
	w.mu.Unlock()
	w.commitMu.Lock()
	w.committed = nil
	w.commitMu.Unlock()
	w.metrics.TaskLag.Reset()
	w.metrics.TaskStalled.Reset()
	w.metrics.StandbyLag.Reset()
	w.updateTaskGauges()
}

func (w *Processor) shuttingDown() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// pauseTimeout bounds how long a rebalance waits for batches in flight.
const pauseTimeout = 5 * time.Second

// openNewStores opens the stores of the tasks plan starts that kept has
// none for, a few at once (openStores): one at a time, a thousand of them
// outlast the group's session. Their memtables are sized for every store
// the worker holds once a is applied (statestore.Manager.Expect).
func (w *Processor) openNewStores(ctx context.Context, a group.Assignment, plan *taskPlan, kept map[int]*statestore.Store) map[int]openedStore {
	var toOpen []int
	for _, s := range plan.startState {
		if kept[s.p] == nil {
			toOpen = append(toOpen, s.p)
		}
	}
	for _, s := range plan.startStandby {
		if kept[s.p] == nil {
			toOpen = append(toOpen, s.p)
		}
	}
	w.cfg.Stores.Expect(len(a.Topics[w.cfg.Topics.Market]) + len(a.Standby))
	return w.openStores(ctx, toOpen)
}

// openedStore is one store opened by openStores.
type openedStore struct {
	store *statestore.Store
	err   error
}

// openStoresAtOnce is how many stores openStores opens in parallel.
const openStoresAtOnce = 8

// openStores opens the stores of ps, openStoresAtOnce at a time, and
// returns each one's store or error.
func (w *Processor) openStores(ctx context.Context, ps []int) map[int]openedStore {
	out := make(map[int]openedStore, len(ps))
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, openStoresAtOnce)
	for _, p := range ps {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			s, err := w.openStore(ctx, p)
			mu.Lock()
			out[p] = openedStore{s, err}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// openStore opens the store of p, giving up when ctx ends (a signal while
// Pebble hangs on a full disk must still stop the worker).
func (w *Processor) openStore(ctx context.Context, p int) (*statestore.Store, error) {
	return w.cfg.Stores.OpenTaskContext(ctx, p) // rebuilds are counted by the Manager (faults.go)
}

func (w *Processor) startTask(key any, run func(context.Context)) {
	ctx, cancel := context.WithCancel(w.ctx)
	w.mu.Lock()
	w.cancels[key] = cancel
	w.mu.Unlock()
	w.tasks.Add(1)
	go func() {
		defer w.tasks.Done()
		run(ctx)
	}()
}

func (w *Processor) stopTask(key any, stopped <-chan struct{}) {
	w.mu.Lock()
	cancel := w.cancels[key]
	delete(w.cancels, key)
	w.mu.Unlock()
	if cancel != nil {
		cancel()
		<-stopped
	}
}

// stopAll stops every task, waits for them and closes the stores.
func (w *Processor) stopAll() {
	w.mu.Lock()
	for _, c := range w.cancels {
		c()
	}
	w.cancels = map[any]context.CancelFunc{}
	w.mu.Unlock()
	w.tasks.Wait()
	w.mu.Lock()
	states := make([]*stateTask, 0, len(w.states)+len(w.standbys))
	for _, st := range w.states {
		states = append(states, st)
	}
	for _, st := range w.standbys {
		states = append(states, st)
	}
	w.mu.Unlock()
	for _, st := range states {
		if err := st.close(); err != nil {
			w.log.Warn("closing task store", "task", st.p, "err", err)
		}
	}
}

func taskIDs[T interface{ id() int }](ts []T) []int {
	out := make([]int, 0, len(ts))
	for _, t := range ts {
		out = append(out, t.id())
	}
	slices.Sort(out)
	return out
}

func (s *stateTask) id() int   { return s.p }
func (t *processTask) id() int { return t.p }

func (w *Processor) stateTask(p int) *stateTask {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.states[p]
}

func (w *Processor) partitions() int {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return max(w.assignment.Partitions, 1)
}

// countJoin counts one join in joiner_joins_total, which Stats reads.
func (w *Processor) countJoin(r record.Result) {
	w.metrics.Joins.WithLabelValues(string(r)).Inc()
}

func (w *Processor) updateTaskGauges() {
	w.mu.RLock()
	defer w.mu.RUnlock()
	restoring := 0
	for _, st := range w.states {
		if !st.isRestored() {
			restoring++
		}
	}
	warmups := 0
	for _, st := range w.standbys {
		if st.roleName() == roleWarmup {
			warmups++
		}
	}
	w.metrics.Tasks.WithLabelValues("active").Set(float64(len(w.procs)))
	w.metrics.Tasks.WithLabelValues("restoring").Set(float64(restoring))
	w.metrics.Tasks.WithLabelValues(roleStandby).Set(float64(len(w.standbys)))
	w.metrics.Tasks.WithLabelValues(roleWarmup).Set(float64(warmups))
}

// SymbolTask is the task (partition index) of symbol among n partitions.
func SymbolTask(symbol string, n int) int { return murmur2.Partition([]byte(symbol), n) }

// taskSet returns the tasks ps as a set.
func taskSet(ps []int) map[int]bool {
	m := make(map[int]bool, len(ps))
	for _, p := range ps {
		m[p] = true
	}
	return m
}
