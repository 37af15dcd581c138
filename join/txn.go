package join

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/joiner-dev/joiner/internal/backoff"
	"github.com/joiner-dev/joiner/produce"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/segmentio/kafka-go"
)

// # Exactly-once processing
//
// Under exactly-once (Processor.EnableExactlyOnce) the worker has one
// transactional producer (its transactional id is TransactionalID of the
// group and the instance id), and every commit is one Kafka transaction:
//
//   - every alert and dead letter any task wrote since the last commit
//     (the outboxes write through the committer, inside the open
//     transaction);
//   - the offsets the commit would have committed (the acknowledged
//     notifications, the applied market), sent with TxnOffsetCommit and
//     the member's generation, member id and instance id (KIP-447), so
//     that the group refuses them once the member lost its tasks;
//   - then EndTxn commit, and a new transaction begins.
//
// The outboxes and the commit exclude each other (txnGate): a write and
// the advance of its task's acknowledged offset happen inside one
// transaction, so the offsets a transaction commits cover exactly the
// records it holds. Nothing is committed outside a transaction.
//
// Any failure inside a transaction (a write that fails past the
// producer's retries, offsets the group refuses, a commit that fails, a
// fenced producer) aborts it; every task then stops writing and the
// member restarts its tasks through the group (group.Member.Restart:
// Handler.Lost, then Handler.Assigned), so that they start again from the
// group's committed offsets. The versioned stores need no rollback: the
// same notifications give the same alerts. A producer fenced by a newer
// one with the same transactional id is replaced by a new one (whose
// InitProducerID fences the other in turn); a second live process with
// the same instance id is fenced by the group (FENCED_INSTANCE_ID), which
// stops the worker with group.ErrFenced.

// The defaults of exactly-once processing: the commit interval (one
// transaction per interval, as Kafka Streams' exactly_once_v2) and the
// transaction timeout.
const (
	DefaultExactlyOnceCommitInterval = 100 * time.Millisecond
	DefaultTransactionTimeout        = 10 * time.Second
)

// Transactional is the transactional producer of exactly-once processing:
// *produce.Producer with Config.TransactionalID, InitProducerID called.
type Transactional interface {
	Writer
	Begin() error
	SendOffsets(ctx context.Context, group string, generation int32, memberID, instanceID string, offsets []produce.Offset) error
	Commit(ctx context.Context) error
	Abort(ctx context.Context) error
}

// ExactlyOnce configures exactly-once processing (EnableExactlyOnce).
type ExactlyOnce struct {
	// Producer is the first transactional producer, initialized
	// (InitProducerID done). Required.
	Producer Transactional
	// NewProducer makes and initializes a new transactional producer with
	// the same transactional id, after the current one was fenced or lost
	// its state. Required.
	NewProducer func(ctx context.Context) (Transactional, error)
	// Group is the consumer group whose offsets the transactions commit.
	// Required.
	Group string
	// TransactionTimeout bounds the wait of a commit for the writes in
	// flight, as the coordinator bounds an open transaction. Default:
	// DefaultTransactionTimeout.
	TransactionTimeout time.Duration
}

// TransactionalID is the transactional id of the exactly-once producer of
// instance in group: "joiner-<group>-<instance>". A restarted worker
// (same group and instance id) takes the same id, so its InitProducerID
// fences its previous incarnation and aborts the transaction it left
// open.
func TransactionalID(group, instance string) string {
	return "joiner-" + group + "-" + instance
}

// txnMember is what the committer needs of the membership beyond
// Membership: *group.Member.
type txnMember interface {
	Generation() (generation int32, memberID, instanceID string, ok bool)
	Restart(reason error)
}

// Outcomes of joiner_transactions_total.
const (
	TxnCommit = "commit"
	TxnAbort  = "abort"
)

// txnMetrics are the exactly-once metrics, exported (at 0) under either
// guarantee.
type txnMetrics struct {
	transactions *prometheus.CounterVec // joiner_transactions_total{outcome}
	seconds      prometheus.Histogram   // joiner_transaction_seconds
	fenced       prometheus.Counter     // joiner_producer_fenced_total
	open         prometheus.Gauge       // joiner_transaction_open_records
}

func newTxnMetrics(reg prometheus.Registerer) txnMetrics {
	f := promauto.With(reg)
	m := txnMetrics{
		transactions: f.NewCounterVec(prometheus.CounterOpts{
			Name: "joiner_transactions_total",
			Help: "Transactions ended under exactly-once processing, by outcome (commit, abort); 0 under at-least-once.",
		}, []string{"outcome"}),
		seconds: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "joiner_transaction_seconds",
			Help:    "Time from a transaction's begin to its commit under exactly-once processing.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 12),
		}),
		fenced: f.NewCounter(prometheus.CounterOpts{
			Name: "joiner_producer_fenced_total",
			Help: "Times this worker's transactional producer was fenced by a newer one with its transactional id (it is replaced, and the tasks restart from the committed offsets).",
		}),
		open: f.NewGauge(prometheus.GaugeOpts{
			Name: "joiner_transaction_open_records",
			Help: "Records (alerts and dead letters) written in the open transaction under exactly-once, not yet committed: read_committed consumers see them at its commit, never if it aborts. 0 under at-least-once.",
		}),
	}
	m.transactions.WithLabelValues(TxnCommit)
	m.transactions.WithLabelValues(TxnAbort)
	return m
}

// eosState is the Processor's exactly-once state: nil committer under
// at-least-once.
type eosState struct {
	c *txnCommitter
}

// errRewinding refuses writes between an abort and the restart of the
// tasks: what they would write belongs to a position the abort undid.
var errRewinding = errors.New("join: the transaction was aborted; the tasks restart from the committed offsets")

// txnCommitter owns the transactional producer and the open transaction.
type txnCommitter struct {
	cfg  ExactlyOnce
	gate txnGate

	mu    sync.Mutex
	p     Transactional
	began time.Time
	dirty bool // records written in the open transaction
	// records counts them (joiner_transaction_open_records).
	records int
	failed  error // a write failed: the transaction must abort
	rewind  error // aborted; set until the tasks restarted (Lost)
	// unopened is why no transaction is open (a Begin failed, and so did
	// the producer's replacement): nothing is written until the next
	// commit tick begins one.
	unopened error
	open     bool // a transaction is begun and not ended
	// held are the tasks between a write and its ack (txnHold).
	held map[*processTask]bool
	m    *txnMetrics
}

// endedLocked records that the open transaction ended (committed or
// aborted): none of its records is pending any more. c.mu is held.
func (c *txnCommitter) endedLocked() {
	c.records = 0
	c.m.open.Set(0)
}

// EnableExactlyOnce turns exactly-once processing on (see the package
// comment above, txn.go). Call it before Run. Alerts and dead letters are
// then written by cfg.Producer (Config.Writer is not used), and the
// inputs must be read read_committed (Config.Client a
// fetch.NewCommittedMux or a fetch.CommittedClient).
func (w *Processor) EnableExactlyOnce(cfg ExactlyOnce) error {
	if cfg.Producer == nil || cfg.NewProducer == nil || cfg.Group == "" {
		return errors.New("join: ExactlyOnce needs Producer, NewProducer and Group")
	}
	if cfg.TransactionTimeout <= 0 {
		cfg.TransactionTimeout = DefaultTransactionTimeout
	}
	if err := cfg.Producer.Begin(); err != nil {
		return fmt.Errorf("join: beginning the first transaction: %w", err)
	}
	c := &txnCommitter{cfg: cfg, p: cfg.Producer, began: time.Now(), open: true, m: &w.metrics.txn}
	w.eos.c = c
	w.writer = c
	return nil
}

// ExactlyOnceEnabled reports whether EnableExactlyOnce was called.
func (w *Processor) ExactlyOnceEnabled() bool { return w.eos.c != nil }

// WriteMessages writes msgs in the open transaction.
func (c *txnCommitter) WriteMessages(ctx context.Context, msgs ...kafka.Message) error {
	c.mu.Lock()
	p, bad := c.p, c.unusableLocked()
	if bad == nil {
		c.dirty = true
		c.records += len(msgs)
		c.m.open.Set(float64(c.records))
	}
	c.mu.Unlock()
	if bad != nil {
		return bad
	}
	return p.WriteMessages(ctx, msgs...)
}

func (c *txnCommitter) unusableLocked() error {
	switch {
	case c.unopened != nil:
		return c.unopened
	case c.rewind != nil:
		return errRewinding
	}
	return nil
}

// txnHold is called by a task's flush before it writes: under
// exactly-once it waits while a commit runs and keeps commits out until
// txnRelease (the task's ack) or txnDrop (a failed write), so that a
// write and the advance of the task's acknowledged offset fall in one
// transaction. It fails while the tasks must rewind.
func (w *taskEnv) txnHold(ctx context.Context, t *processTask) error {
	c := w.eos.c
	if c == nil {
		return nil
	}
	if err := c.gate.enter(ctx); err != nil {
		return err
	}
	c.mu.Lock()
	bad := c.unusableLocked()
	if bad == nil {
		if c.held == nil {
			c.held = map[*processTask]bool{}
		}
		c.held[t] = true
	}
	c.mu.Unlock()
	if bad != nil {
		c.gate.leave()
	}
	return bad
}

// txnRelease ends t's hold (txnHold), if any.
func (w *taskEnv) txnRelease(t *processTask) {
	c := w.eos.c
	if c == nil {
		return
	}
	c.mu.Lock()
	held := c.held[t]
	delete(c.held, t)
	c.mu.Unlock()
	if held {
		c.gate.leave()
	}
}

// txnDrop ends t's hold after its write failed with err: some of it may
// be in the transaction, unacknowledged, so the transaction must abort.
func (w *taskEnv) txnDrop(t *processTask, err error) {
	if w.txnFailed(err) {
		w.txnRelease(t)
	}
}

// txnFailed records, under exactly-once, that a write failed with err
// past the producer's retries, and reports whether it did: the write is
// not retried, the open transaction aborts at the next commit and the
// tasks restart from the committed offsets.
func (w *taskEnv) txnFailed(err error) bool {
	c := w.eos.c
	if c == nil {
		return false
	}
	c.mu.Lock()
	if c.failed == nil {
		c.failed = err
	}
	c.mu.Unlock()
	return true
}

// txnPause, under exactly-once, stops the outboxes' writes until the
// returned func is called: a commit's offsets and the records of its
// transaction must match. w.commitMu is held.
func (w *Processor) txnPause(ctx context.Context) func() {
	c := w.eos.c
	if c == nil {
		return func() {}
	}
	gctx, cancel := context.WithTimeout(ctx, c.cfg.TransactionTimeout)
	defer cancel()
	if err := c.gate.close(gctx); err != nil {
		c.mu.Lock()
		if c.failed == nil {
			c.failed = fmt.Errorf("the writes in flight did not finish within the transaction timeout (%v): %w", c.cfg.TransactionTimeout, err)
		}
		c.mu.Unlock()
		return func() {}
	}
	return c.gate.open
}

// txnPending reports whether, under exactly-once, the open transaction
// has records or a failure to end even with no offsets to commit.
func (w *Processor) txnPending() bool {
	c := w.eos.c
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dirty || c.failed != nil
}

// commitOffsets commits offsets: with the group under at-least-once, in
// the open transaction (which it ends and begins again) under
// exactly-once. w.commitMu is held, and under exactly-once txnPause's
// exclusion.
func (w *Processor) commitOffsets(ctx context.Context, offsets map[string]map[int]int64) error {
	c := w.eos.c
	if c == nil {
		return w.member.Commit(ctx, offsets)
	}
	return c.commit(ctx, w, offsets)
}

func (c *txnCommitter) commit(ctx context.Context, w *Processor, offsets map[string]map[int]int64) error {
	c.mu.Lock()
	unopened := c.unopened != nil && c.rewind == nil
	c.mu.Unlock()
	if unopened {
		// The tasks' writes were refused since (their outboxes ended):
		// once a transaction begins, they restart from the committed
		// offsets.
		if err := c.begin(ctx, w); err != nil {
			return err
		}
		c.mu.Lock()
		c.rewind = errors.New("a transaction began again after none could")
		c.mu.Unlock()
		if m, ok := w.member.(txnMember); ok {
			m.Restart(errors.New("exactly-once: a transaction began again after none could; the tasks restart from the committed offsets"))
		}
		return nil
	}
	c.mu.Lock()
	p, failed, bad := c.p, c.failed, c.unusableLocked()
	c.mu.Unlock()
	if bad != nil {
		return bad
	}
	if failed != nil {
		return c.abort(ctx, w, failed)
	}
	if len(offsets) > 0 {
		m, ok := w.member.(txnMember)
		if !ok {
			return c.abort(ctx, w, fmt.Errorf("join: exactly-once needs a membership with generations (%T)", w.member))
		}
		gen, memberID, instance, valid := m.Generation()
		if !valid {
			// Between the JoinGroup and the SyncGroup of a rebalance: the
			// transaction stays open, committed after the assignment.
			return fmt.Errorf("join: commit: the member holds no generation (rebalancing); the transaction stays open")
		}
		if err := p.SendOffsets(ctx, c.cfg.Group, gen, memberID, instance, producerOffsets(offsets)); err != nil {
			return c.abort(ctx, w, fmt.Errorf("sending the offsets of generation %d: %w", gen, err))
		}
	}
	if err := p.Commit(ctx); err != nil {
		return c.abort(ctx, w, fmt.Errorf("committing the transaction: %w", err))
	}
	c.mu.Lock()
	w.metrics.txn.seconds.Observe(time.Since(c.began).Seconds())
	c.dirty, c.open = false, false
	c.endedLocked()
	c.mu.Unlock()
	w.metrics.txn.transactions.WithLabelValues(TxnCommit).Inc() // (after: a scrape that sees it sees the records gauge at 0)
	if err := c.begin(ctx, w); err != nil {
		return err
	}
	return nil
}

// producerOffsets flattens offsets for SendOffsets.
func producerOffsets(offsets map[string]map[int]int64) []produce.Offset {
	var out []produce.Offset
	for topic, ps := range offsets {
		for p, o := range ps {
			out = append(out, produce.Offset{Topic: topic, Partition: p, Offset: o})
		}
	}
	return out
}

// begin begins the next transaction, replacing a producer that cannot.
func (c *txnCommitter) begin(ctx context.Context, w *Processor) error {
	c.mu.Lock()
	p := c.p
	c.mu.Unlock()
	err := p.Begin()
	if err != nil {
		w.log.Warn("cannot begin a transaction; replacing the producer", "err", err)
		if err = c.replace(ctx, w); err == nil {
			c.mu.Lock()
			p = c.p
			c.mu.Unlock()
			err = p.Begin()
		}
	}
	c.mu.Lock()
	c.began, c.open = time.Now(), err == nil
	if err != nil {
		c.unopened = fmt.Errorf("join: cannot begin a transaction: %w", err)
	} else {
		c.unopened = nil
	}
	c.mu.Unlock()
	return err
}

// replace makes a new producer (whose InitProducerID fences the old one
// and aborts what it left open).
func (c *txnCommitter) replace(ctx context.Context, w *Processor) error {
	ctx, cancel := context.WithTimeout(ctx, 2*c.cfg.TransactionTimeout)
	defer cancel()
	// Hand-written rather than backoff.Do: it gives up after 3 attempts
	// (the next commit tick tries again) and logs each differently.
	for attempt := 0; ; attempt++ {
		p, err := c.cfg.NewProducer(ctx)
		if err == nil {
			c.mu.Lock()
			c.p = p
			c.mu.Unlock()
			return nil
		}
		if ctx.Err() != nil || attempt >= 2 {
			err = fmt.Errorf("join: cannot make a new transactional producer: %w", err)
			w.log.Error("exactly-once: no transactional producer; nothing is written until one can be made (retried every commit interval)", "err", err)
			return err
		}
		w.log.Warn("cannot make a new transactional producer; retrying", "err", err)
		if backoff.Sleep(ctx, backoff.Default.Delay(attempt)) != nil {
			return ctx.Err()
		}
	}
}

// abort aborts the open transaction because of cause, makes every task
// stop writing, and asks the group to restart the tasks from the
// committed offsets (Lost, then Assigned; txnLost begins the next
// transaction). It returns cause, wrapped.
func (c *txnCommitter) abort(ctx context.Context, w *Processor, cause error) error {
	c.mu.Lock()
	p := c.p
	c.rewind = cause
	c.mu.Unlock()
	aerr := p.Abort(ctx)
	c.mu.Lock()
	c.open = false
	c.mu.Unlock()
	w.metrics.txn.transactions.WithLabelValues(TxnAbort).Inc()
	fenced := errors.Is(cause, produce.ErrFenced) || errors.Is(aerr, produce.ErrFenced)
	if fenced {
		w.metrics.txn.fenced.Inc()
	}
	w.metrics.CommitErrors.Inc()
	w.log.Warn("exactly-once: transaction aborted; every task restarts from the committed offsets",
		"err", cause, "abort_err", aerr, "fenced", fenced)
	if errors.Is(aerr, produce.ErrFenced) || errors.Is(aerr, produce.ErrTxnState) {
		// Fenced, or the coordinator lost the transaction: a new
		// producer fences whatever the old one left open. (An abort
		// that failed otherwise, e.g. the brokers unreachable, keeps the
		// producer: the next Begin replaces it if it must.)
		if err := c.replace(ctx, w); err != nil {
			cause = errors.Join(cause, err)
		}
	}
	c.mu.Lock()
	c.dirty, c.failed = false, nil
	c.endedLocked()
	c.mu.Unlock()
	if m, ok := w.member.(txnMember); ok && !w.shuttingDown() {
		// (At shutdown the tasks stop anyway: their next owners start
		// from the committed offsets.)
		m.Restart(fmt.Errorf("exactly-once: transaction aborted: %w", cause))
	}
	return fmt.Errorf("join: exactly-once: transaction aborted: %w", cause)
}

// txnLost is called by Lost once every task stopped: the open
// transaction holds writes of stopped tasks, whose offsets are not
// committed, so it is aborted, and the next one begins; writes are
// allowed again (the tasks assigned next start from the committed
// offsets).
func (w *Processor) txnLost(ctx context.Context) {
	c := w.eos.c
	if c == nil {
		return
	}
	w.commitMu.Lock()
	defer w.commitMu.Unlock()
	c.mu.Lock()
	p, dirty, open := c.p, c.dirty || c.failed != nil, c.open
	c.mu.Unlock()
	if open && dirty {
		w.metrics.txn.transactions.WithLabelValues(TxnAbort).Inc()
		err := p.Abort(ctx)
		if errors.Is(err, produce.ErrFenced) || errors.Is(err, produce.ErrTxnState) {
			if errors.Is(err, produce.ErrFenced) {
				w.metrics.txn.fenced.Inc()
			}
			w.log.Warn("exactly-once: aborting the transaction of the lost tasks failed; replacing the producer", "err", err)
			_ = c.replace(ctx, w)
		} else if err != nil {
			w.log.Warn("exactly-once: aborting the transaction of the lost tasks failed", "err", err)
		} else {
			w.log.Info("exactly-once: the lost tasks' transaction aborted; their next owners start from the committed offsets")
		}
		open = false
	}
	c.mu.Lock()
	c.dirty, c.failed, c.rewind, c.open = false, nil, nil, open
	if !open {
		c.endedLocked()
	}
	c.mu.Unlock()
	if !open {
		_ = c.begin(ctx, w) // on failure, the next commit tick begins one
	}
}

// txnGate lets any number of outbox writes run together, or one commit
// alone; writers wait while a commit runs.
type txnGate struct {
	mu      sync.Mutex
	writers int
	closed  bool
	change  chan struct{} // closed (and replaced) at every change
}

func (g *txnGate) changed() {
	if g.change != nil {
		close(g.change)
	}
	g.change = make(chan struct{})
}

func (g *txnGate) wait(ctx context.Context) error {
	if g.change == nil {
		g.change = make(chan struct{})
	}
	ch := g.change
	g.mu.Unlock()
	defer g.mu.Lock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *txnGate) enter(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.closed {
		if err := g.wait(ctx); err != nil {
			return err
		}
	}
	g.writers++
	return nil
}

func (g *txnGate) leave() {
	g.mu.Lock()
	g.writers--
	if g.writers == 0 && g.closed {
		g.changed()
	}
	g.mu.Unlock()
}

// close waits until no writer is inside and keeps new ones out until
// open; on ctx's end it gives up (the gate stays open).
func (g *txnGate) close(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.closed {
		if err := g.wait(ctx); err != nil {
			return err
		}
	}
	g.closed = true
	for g.writers > 0 {
		if err := g.wait(ctx); err != nil {
			g.closed = false
			g.changed()
			return err
		}
	}
	return nil
}

func (g *txnGate) open() {
	g.mu.Lock()
	g.closed = false
	g.changed()
	g.mu.Unlock()
}

// txnAddRunning adds to offsets (and notifTs) those of the running
// tasks, under exactly-once: commitFinal's transaction holds their writes
// since the last commit too, so it must hold their offsets, or an abort
// of the next transaction would rewind them below records already
// committed. w.commitMu is held.
func (w *Processor) txnAddRunning(offsets map[string]map[int]int64, notifTs map[*stateTask]int64) {
	if w.eos.c == nil {
		return
	}
	w.mu.RLock()
	more, ts := w.offsetsLocked(w.procs, w.states)
	w.mu.RUnlock()
	mergeOffsets(offsets, notifTs, more, ts)
}
