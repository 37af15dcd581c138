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
//	restore*.go  state tasks: restore and tail market-p into the store; stores that fail to open
//	merge.go     the aligned merge of market-p and notifications-p of a merged task
//	process.go   process tasks: decode, hold, join every notification of a batch
//	lookup.go    the price as of a time: local (PriceAsOf) and remote (the owner's /v1/prices)
//	repartition.go  partition count changes: a moved symbol's earlier tasks are asked too
//	output.go    alerts and dead letters: the outbox and the writes
//	commit.go    the commit loop, committed and start offsets
//	txn.go       exactly-once: one transaction per commit, abort and rewind
//	gate.go      a process task's gate, closed when the task is revoked
//	worker.go    the Processor: configuration, assignment diff, rebalance, Held and Owned
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
	"github.com/joiner-dev/joiner/internal/lograte"
	"github.com/joiner-dev/joiner/murmur2"
	"github.com/joiner-dev/joiner/record"
	"github.com/joiner-dev/joiner/statestore"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
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
	// Default: DefaultBulkRestoreMin; negative: never.
	BulkRestoreMin int64
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
	cfg     Config
	log     *slog.Logger
	metrics *Metrics
	alerts  *record.AlertEncoder // of this worker's alerts
	dec     *record.Decoder      // of its input records
	lateLog *lograte.Limiter     // late ticks, per task
	reg     *prometheus.Registry // nil when Config.Registerer was given
	remote  *remoteClient
	// outLog logs dead letters and output failures, one line per kind
	// per interval.
	outLog *lograte.Limiter
	// outBlocked counts the writes failing with an error no retry fixes,
	// and outFault is the latest such error (/readyz,
	// joiner_output_blocked); guarded by outMu.
	outMu      sync.Mutex
	outBlocked int
	outFault   string

	member Membership
	eos    eosState // exactly-once processing (txn.go)

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
	restoredRecords atomic.Int64             // market records read by completed restores
	restores        atomic.Int64             // state tasks started
	commitMu        sync.Mutex               // serializes commits
	committed       map[string]map[int]int64 // last successful commit; guarded by commitMu

	statusState // taskstatus.go
}

func isKafkaWriterWithTopic(w Writer) bool {
	kw, ok := w.(*kafka.Writer)
	return ok && kw.Topic != ""
}

// Validate reports the first problem of c: a required field left empty,
// a *kafka.Writer with a Topic, or an unknown StartOffset. NewWorker calls
// it; zero values of the other fields take their defaults.
func (c *Config) Validate() error {
	switch {
	case c.Client == nil:
		return errors.New("join: Config.Client is required")
	case c.Writer == nil:
		return errors.New("join: Config.Writer is required")
	case isKafkaWriterWithTopic(c.Writer):
		return errors.New("join: Config.Writer.Topic must be empty: alerts and dead letters go to different topics")
	case c.Stores == nil:
		return errors.New("join: Config.Stores is required")
	case c.InstanceID == "":
		return errors.New("join: Config.InstanceID is required")
	case c.Grace < 0:
		return fmt.Errorf("join: Config.Grace is %v; want 0 (none) or a positive duration", c.Grace)
	}
	return validStartOffset(c.StartOffset)
}

// withDefaults returns c with every zero field set to the default its
// doc comment names: the one place join's defaults are applied.
func (c Config) withDefaults() Config {
	c.Topics = c.Topics.WithDefaults()
	c.Fields = c.Fields.WithDefaults()
	defDur := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	defDur(&c.MaxTaskIdle, time.Second)
	defDur(&c.CommitInterval, time.Second)
	defDur(&c.FetchMaxWait, 250*time.Millisecond)
	defDur(&c.RemoteTimeout, 5*time.Second)
	defDur(&c.HistoryRetention, time.Hour)
	defDur(&c.StallTimeout, time.Minute)
	if c.BulkRestoreMin == 0 {
		c.BulkRestoreMin = restoreLoadMin
	}
	if c.MaxRecordBytes <= 0 {
		c.MaxRecordBytes = record.DefaultMaxRecordBytes
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: time.Minute}}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// NewProcessor validates cfg and builds a Processor.
func NewProcessor(cfg Config) (*Processor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	w := &Processor{
		cfg:      cfg,
		log:      cfg.Logger.With("instance", cfg.InstanceID),
		alerts:   record.NewAlertEncoder(cfg.InstanceID),
		dec:      record.NewDecoder(cfg.Fields, cfg.MaxRecordBytes),
		lateLog:  lograte.New(cfg.Logger.With("instance", cfg.InstanceID), lograte.DefaultInterval),
		outLog:   lograte.New(cfg.Logger.With("instance", cfg.InstanceID), lograte.DefaultInterval),
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
	w.metrics = NewMetrics(reg)
	w.registerFaultMetrics(reg)
	w.loadPartitionCounts()
	w.remote = &remoteClient{http: cfg.HTTPClient, timeout: cfg.RemoteTimeout, hist: w.metrics.RemoteLookup}
	return w, nil
}

// Run runs the worker as a member of the group until ctx is done, then
// stops every task and returns. It owns the membership loop, the committer
// and every task goroutine, and waits for all of them.
func (w *Processor) Run(ctx context.Context, m Membership) error {
	defer w.forgetOffsetResets()
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
	wantState := a.Topics[w.cfg.Topics.Market]
	wantProc := a.Topics[w.cfg.Topics.Notifications]

	// A task whose state and notifications are both here runs merged; a
	// task that changes between merged and not is restarted. A task that
	// is active here is not a standby here too.
	inState, inProc := taskSet(wantState), taskSet(wantProc)
	colocated := func(p int) bool { return inState[p] && inProc[p] }
	inStandby, warm := map[int]bool{}, taskSet(a.Warmup)
	var wantStandby []int
	for _, p := range a.Standby {
		if !inState[p] && !inProc[p] && !inStandby[p] {
			inStandby[p] = true
			wantStandby = append(wantStandby, p)
		}
	}
	w.mu.Lock()
	wasActive := w.activeLocked()
	prev := w.assignment
	var stopProcs []*processTask
	for p, t := range w.procs {
		if !inProc[p] || (t.st != nil) != colocated(p) {
			stopProcs = append(stopProcs, t)
			delete(w.procs, p)
		}
	}
	var stopStates []*stateTask
	for p, t := range w.states {
		if !inState[p] || t.merged != colocated(p) {
			stopStates = append(stopStates, t)
			delete(w.states, p)
		}
	}
	var stopStandbys []*stateTask
	for p, t := range w.standbys {
		if !inStandby[p] {
			stopStandbys = append(stopStandbys, t)
			delete(w.standbys, p)
		} else {
			t.setRole(warm[p])
		}
	}
	// The tasks paused below stay on the status page until they are
	// handed over.
	w.handover = map[int]handoverTask{}
	for _, t := range stopProcs {
		w.handover[t.p] = handoverTask{pt: t, st: t.st}
	}
	for _, t := range stopStates {
		h := w.handover[t.p]
		h.st = t
		w.handover[t.p] = h
	}
	w.mu.Unlock()
	nowActive := map[int]bool{}
	for p := range inState {
		nowActive[p] = true
	}
	for p := range inProc {
		nowActive[p] = true
	}
	var revoked, assigned []int
	for p := range wasActive {
		if !nowActive[p] {
			revoked = append(revoked, p)
		}
	}
	for p := range nowActive {
		if !wasActive[p] {
			assigned = append(assigned, p)
		}
	}
	w.metrics.TasksRevoked.Add(float64(len(revoked)))
	w.metrics.TasksAssigned.Add(float64(len(assigned)))
	w.recordRebalance(prev, a, assigned, revoked)

	// Pause the active tasks that stop, commit them, then dispose of their
	// stores: kept for a role they take here, else closed and deleted.
	began := time.Now()
	w.pause(ctx, stopProcs)
	for _, t := range stopProcs {
		w.stopTask(t, t.stopped)
		w.metrics.TaskLag.DeleteLabelValues(taskLabel(t.p))
		w.metrics.TaskStalled.DeleteLabelValues(taskLabel(t.p))
	}
	for _, t := range stopStates {
		w.stopTask(t, t.stopped)
	}
	if len(stopProcs)+len(stopStates) > 0 {
		if err := w.commitFinal(ctx, stopProcs, stopStates); err != nil {
			w.log.Warn("committing the offsets of stopped tasks failed; their next owners may process some notifications again",
				"state", taskIDs(stopStates), "process", taskIDs(stopProcs), "err", err)
		}
	}
	for _, t := range stopStandbys {
		w.stopTask(t, t.stopped)
		w.metrics.StandbyLag.DeleteLabelValues(taskLabel(t.p))
	}
	// kept are the stores handed from a stopped task to the new one of
	// the same task; copies are those that were standby or warm-up copies.
	kept, copies := map[int]*statestore.Store{}, map[int]bool{}
	for _, t := range slices.Concat(stopStates, stopStandbys) {
		if inState[t.p] || inStandby[t.p] {
			kept[t.p] = t.store
			copies[t.p] = t.isStandby()
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
	paused := map[int]bool{}
	for _, t := range stopProcs {
		paused[t.p] = true
	}
	for _, t := range stopStates {
		paused[t.p] = true
	}
	for range paused {
		w.metrics.RebalancePause.Observe(time.Since(began).Seconds())
	}
	if len(stopProcs)+len(stopStates)+len(stopStandbys) > 0 {
		w.log.Info("tasks revoked", "state", taskIDs(stopStates), "process", taskIDs(stopProcs), "standby", taskIDs(stopStandbys),
			"paused_seconds", time.Since(began).Seconds())
	}

	// Build the new tasks, publish them with the assignment in one step
	// (so /readyz never sees a half-applied assignment), then start them.
	var newStates, newStandbys []*stateTask
	var newProcs []*processTask
	fresh := map[int]*stateTask{}
	storeOf := func(p int) (*statestore.Store, error) {
		if s := kept[p]; s != nil {
			delete(kept, p)
			return s, nil
		}
		return w.openStore(ctx, p)
	}
	w.mu.RLock()
	for _, p := range wantState {
		if _, ok := w.states[p]; ok {
			continue
		}
		store, err := storeOf(p)
		if err != nil {
			w.storeFaultLocked(p, err)
			continue
		}
		st := newStateTask(w, p, store, colocated(p))
		st.fromCopy = copies[p]
		newStates = append(newStates, st)
		fresh[p] = st
	}
	for _, p := range wantProc {
		if _, ok := w.procs[p]; ok {
			continue
		}
		var st *stateTask
		if colocated(p) {
			if st = w.states[p]; st == nil {
				st = fresh[p]
			}
			if st == nil {
				continue // its store failed to open: not processed here (restore_faults.go)
			}
		}
		newProcs = append(newProcs, newProcessTask(w, p, st))
	}
	for _, p := range wantStandby {
		if _, ok := w.standbys[p]; ok {
			continue
		}
		store, err := storeOf(p)
		if err != nil {
			// A standby is an optimisation: without it the task's next
			// owner restores more. It is tried again at the next rebalance.
			w.log.Warn("cannot open the store of a standby task; this member keeps no copy of it", "task", p, "err", err)
			continue
		}
		newStandbys = append(newStandbys, newStandbyTask(w, p, store, warm[p]))
	}
	w.mu.RUnlock()
	for p, s := range kept { // not taken by a new task (cannot happen): do not leak it open
		if err := s.Close(); err != nil && !errors.Is(err, statestore.ErrClosed) {
			w.log.Warn("closing task store", "task", p, "err", err)
		}
	}
	w.mu.Lock()
	w.notePartitionsLocked(a.Partitions, a.Error)
	w.assigned = true
	w.assignment = a
	w.handover = nil
	for _, st := range newStates {
		w.states[st.p] = st
	}
	for _, st := range newStandbys {
		w.standbys[st.p] = st
	}
	for _, pt := range newProcs {
		w.procs[pt.p] = pt
	}
	w.mu.Unlock()
	w.restores.Add(int64(len(newStates)))
	for _, st := range slices.Concat(newStates, newStandbys) {
		w.startTask(st, st.run)
	}
	for _, pt := range newProcs {
		w.startTask(pt, pt.run)
	}
	w.retryStores()
	w.updateTaskGauges()
	w.log.Info("assignment applied", "generation", a.Generation, "leader", a.Leader, "moved", a.Moved,
		"state_tasks", wantState, "process_tasks", wantProc, "standby_tasks", wantStandby, "warmup_tasks", a.Warmup,
		"new_state_tasks", taskIDs(newStates), "new_standby_tasks", taskIDs(newStandbys))
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
