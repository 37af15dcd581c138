package join

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/group"
	"github.com/joiner-dev/joiner/produce"
	"github.com/joiner-dev/joiner/record"
	"github.com/joiner-dev/joiner/statestore"
	"github.com/segmentio/kafka-go"
)

// fakeTxnBroker is a broker's transactions and a group's offsets: writes
// and offsets of a transaction become visible only when it commits.
type fakeTxnBroker struct {
	mu        sync.Mutex
	visible   []kafka.Message
	offsets   map[string]map[int]int64 // the group's committed offsets
	producers int                      // made by newProducer
	// failCommit fails the next Commit with it; failBegins fails that
	// many Begins (and producers' InitProducerID) with produce.ErrTxnState.
	failCommit error
	failBegins int
	// staleFetches: that many FetchOffsets answer with the offsets from
	// before the last commit (its markers not written yet).
	staleFetches int
	before       map[string]map[int]int64
	fetches      int
}

type fakeTxnProducer struct {
	b       *fakeTxnBroker
	open    bool
	pending []kafka.Message
	offs    []produce.Offset
	fenced  bool
}

func (p *fakeTxnProducer) Begin() error {
	p.b.mu.Lock()
	defer p.b.mu.Unlock()
	if p.b.failBegins > 0 {
		p.b.failBegins--
		return produce.ErrTxnState
	}
	if p.fenced {
		return produce.ErrFenced
	}
	if p.open {
		return produce.ErrTxnState
	}
	p.open = true
	return nil
}

func (p *fakeTxnProducer) WriteMessages(_ context.Context, msgs ...kafka.Message) error {
	p.b.mu.Lock()
	defer p.b.mu.Unlock()
	if !p.open || p.fenced {
		return produce.ErrTxnState
	}
	for _, m := range msgs {
		m.Key, m.Value = bytes.Clone(m.Key), bytes.Clone(m.Value)
		p.pending = append(p.pending, m)
	}
	return nil
}

func (p *fakeTxnProducer) SendOffsets(_ context.Context, _ string, gen int32, _, _ string, offs []produce.Offset) error {
	p.b.mu.Lock()
	defer p.b.mu.Unlock()
	if !p.open || gen <= 0 {
		return produce.ErrTxnState
	}
	p.offs = append(p.offs, offs...)
	return nil
}

func (p *fakeTxnProducer) Commit(context.Context) error {
	p.b.mu.Lock()
	defer p.b.mu.Unlock()
	if err := p.b.failCommit; err != nil {
		p.b.failCommit = nil
		if errors.Is(err, produce.ErrFenced) {
			p.fenced = true
		}
		return err
	}
	if !p.open {
		return produce.ErrTxnState
	}
	p.b.visible = append(p.b.visible, p.pending...)
	p.b.before = map[string]map[int]int64{}
	for topic, ps := range p.b.offsets {
		p.b.before[topic] = map[int]int64{}
		for part, o := range ps {
			p.b.before[topic][part] = o
		}
	}
	for _, o := range p.offs {
		p.b.setOffset(o.Topic, o.Partition, o.Offset)
	}
	p.pending, p.offs, p.open = nil, nil, false
	return nil
}

func (p *fakeTxnProducer) Abort(context.Context) error {
	p.b.mu.Lock()
	defer p.b.mu.Unlock()
	p.pending, p.offs, p.open = nil, nil, false
	if p.fenced {
		return produce.ErrFenced
	}
	return nil
}

func (b *fakeTxnBroker) setOffset(topic string, p int, o int64) {
	if b.offsets == nil {
		b.offsets = map[string]map[int]int64{}
	}
	if b.offsets[topic] == nil {
		b.offsets[topic] = map[int]int64{}
	}
	b.offsets[topic][p] = o
}

func (b *fakeTxnBroker) newProducer(context.Context) (Transactional, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failBegins > 0 {
		b.failBegins--
		return nil, errors.New("the coordinator is not available")
	}
	b.producers++
	return &fakeTxnProducer{b: b}, nil
}

func (b *fakeTxnBroker) alerts() []kafka.Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []kafka.Message
	for _, m := range b.visible {
		if m.Topic == record.DefaultAlertsTopic {
			out = append(out, m)
		}
	}
	return out
}

func (b *fakeTxnBroker) pendingAlerts(p *Processor) int {
	c := p.eos.c
	c.mu.Lock()
	fp := c.p.(*fakeTxnProducer)
	c.mu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(fp.pending)
}

// txnMemberFake is a group member with generations whose Restart stops
// and restarts the handler's tasks, as group.Member does (Lost, then
// Assigned of the same tasks in a new generation), and whose committed
// offsets are the broker's.
type txnMemberFake struct {
	b       *fakeTxnBroker
	w       *Processor
	mu      sync.Mutex
	gen     int32
	a       group.Assignment
	restart chan error
	started chan struct{}
}

func (m *txnMemberFake) Run(ctx context.Context) error {
	close(m.started)
	for {
		select {
		case <-ctx.Done():
			m.w.Rebalancing(context.WithoutCancel(ctx))
			return nil
		case err := <-m.restart:
			m.w.Lost(ctx, err)
			m.mu.Lock()
			m.gen++
			m.a.Generation = m.gen
			a := m.a
			m.mu.Unlock()
			m.w.Assigned(ctx, a)
		}
	}
}
func (m *txnMemberFake) Commit(_ context.Context, o map[string]map[int]int64) error {
	m.b.mu.Lock()
	defer m.b.mu.Unlock()
	for t, ps := range o {
		for p, off := range ps {
			m.b.setOffset(t, p, off)
		}
	}
	return nil
}
func (m *txnMemberFake) FetchOffsets(_ context.Context, topic string, ps []int) (map[int]int64, error) {
	m.b.mu.Lock()
	defer m.b.mu.Unlock()
	m.b.fetches++
	offsets := m.b.offsets
	if m.b.staleFetches > 0 {
		m.b.staleFetches--
		offsets = m.b.before
	}
	out := map[int]int64{}
	for _, p := range ps {
		if o, ok := offsets[topic][p]; ok {
			out[p] = o
		}
	}
	return out, nil
}
func (m *txnMemberFake) Active() bool { return true }
func (m *txnMemberFake) Generation() (int32, string, string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gen, "member", "w", true
}
func (m *txnMemberFake) Restart(reason error) {
	select {
	case m.restart <- reason:
	default:
	}
}

// newTxnRig runs an exactly-once Processor on fakes (a transactional
// broker, a group member whose Restart is Lost then Assigned), until the
// test ends.
func newTxnRig(t *testing.T) (*Processor, *fakeFetcher, *fakeTxnBroker, *txnMemberFake, context.Context) {
	t.Helper()
	stores, err := statestore.Open(statestore.Options{Dirs: []string{t.TempDir()}, Group: "g", CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stores.Close() })
	f := newFakeFetcher()
	b := &fakeTxnBroker{}
	w, err := NewProcessor(Config{Client: f, Writer: &fakeWriter{}, Stores: stores, InstanceID: "w",
		FetchMaxWait: 5 * time.Millisecond, MaxTaskIdle: 50 * time.Millisecond, CommitInterval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	first, _ := b.newProducer(context.Background())
	if err := w.EnableExactlyOnce(ExactlyOnce{Producer: first, NewProducer: b.newProducer, Group: "g"}); err != nil {
		t.Fatal(err)
	}
	m := &txnMemberFake{b: b, w: w, gen: 1, a: assignment(1, []int{0}, []int{0}), restart: make(chan error, 1), started: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, m) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	<-m.started
	return w, f, b, m, ctx
}

// TestExactlyOnceAbortRewinds: a transaction that fails to commit is
// aborted, and every task restarts from the offsets the last committed
// transaction holds: what the aborted one held is processed again, once,
// with the same prices. A fenced producer is replaced and counted. Every
// notification ends with exactly one visible alert, priced as of its time.
func TestExactlyOnceAbortRewinds(t *testing.T) {
	for _, failure := range []error{
		fmt.Errorf("committing: %w", produce.ErrAbortable),
		fmt.Errorf("committing: %w", produce.ErrFenced),
	} {
		t.Run(failure.Error(), func(t *testing.T) {
			w, f, b, m, ctx := newTxnRig(t)

			s := symbolOf(t, 0, 2)
			f.produce("market", 0, 1000, s, tickJSON(s, 1))
			f.produce("market", 0, 2000, s, tickJSON(s, 2))
			for i := range 5 {
				f.produce("notifications", 0, int64(1100+i), s, noteJSON(fmt.Sprintf("a%d", i), s))
			}
			w.Assigned(ctx, m.a)
			waitFor(t, "5 alerts in the transaction", func() bool { return b.pendingAlerts(w) == 5 })
			if v := gaugeValue(t, w.metrics.txn.open); v != 5 {
				t.Errorf("joiner_transaction_open_records = %v with 5 alerts in the transaction, want 5", v)
			}
			if err := w.commit(ctx); err != nil {
				t.Fatal(err)
			}
			if v := gaugeValue(t, w.metrics.txn.open); v != 0 {
				t.Errorf("joiner_transaction_open_records = %v after the commit, want 0", v)
			}
			if n := len(b.alerts()); n != 5 {
				t.Fatalf("%d alerts visible after the first commit, want 5", n)
			}
			for i := range 5 {
				f.produce("notifications", 0, int64(2100+i), s, noteJSON(fmt.Sprintf("b%d", i), s))
			}
			waitFor(t, "5 more alerts in the transaction", func() bool { return b.pendingAlerts(w) == 5 })
			b.mu.Lock()
			b.failCommit = failure
			b.mu.Unlock()
			if err := w.commit(ctx); err == nil {
				t.Fatal("the failed commit returned no error")
			}
			if v := gaugeValue(t, w.metrics.txn.open); v != 0 && b.pendingAlerts(w) == 0 {
				t.Errorf("joiner_transaction_open_records = %v after the abort, with nothing written since, want 0", v)
			}
			// The tasks restart from notifications-0 at 5 and write the
			// b alerts again, in a new transaction.
			waitFor(t, "the b alerts written again", func() bool { return b.pendingAlerts(w) == 5 })
			if err := w.commit(ctx); err != nil {
				t.Fatal(err)
			}
			got := b.visibleAlerts(t, func(id string) float64 {
				if id[0] == 'b' {
					return 2
				}
				return 1
			})
			for i := range 5 {
				for _, id := range []string{fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)} {
					if got[id] != 1 {
						t.Errorf("alert %s visible %d times, want once (all: %v)", id, got[id], got)
					}
				}
			}
			b.mu.Lock()
			off := b.offsets["notifications"][0]
			producers := b.producers
			b.mu.Unlock()
			if off != 10 {
				t.Errorf("committed notifications-0 at %d, want 10", off)
			}
			if v := counterValue(w.metrics.txn.transactions.WithLabelValues(TxnAbort)); v != 1 {
				t.Errorf("joiner_transactions_total{outcome=abort} = %v, want 1", v)
			}
			fenced := errors.Is(failure, produce.ErrFenced)
			if v := counterValue(w.metrics.txn.fenced); (v == 1) != fenced {
				t.Errorf("joiner_producer_fenced_total = %v (fenced: %v)", v, fenced)
			}
			if wantProducers := map[bool]int{false: 1, true: 2}[fenced]; producers != wantProducers {
				t.Errorf("%d producers made, want %d", producers, wantProducers)
			}
		})
	}
}

// TestExactlyOnceNoTransactionThenRestart: when no transaction can begin
// after a commit (Begin fails, and so does every replacement producer),
// writes are refused; a later commit tick begins one and the tasks restart
// from the committed offsets, so the notifications of that time get their
// alerts, once.
func TestExactlyOnceNoTransactionThenRestart(t *testing.T) {
	w, f, b, m, ctx := newTxnRig(t)
	s := symbolOf(t, 0, 2)
	f.produce("market", 0, 1000, s, tickJSON(s, 1))
	f.produce("notifications", 0, 1100, s, noteJSON("a0", s))
	w.Assigned(ctx, m.a)
	waitFor(t, "an alert in the transaction", func() bool { return b.pendingAlerts(w) == 1 })
	b.mu.Lock()
	b.failBegins = 1 + 3 // the Begin after the commit, then every replacement
	b.mu.Unlock()
	if err := w.commit(ctx); err == nil {
		t.Fatal("a commit that could not begin the next transaction returned no error")
	}
	for i := range 3 {
		f.produce("notifications", 0, int64(1200+i), s, noteJSON(fmt.Sprintf("b%d", i), s))
	}
	time.Sleep(50 * time.Millisecond) // the writes are refused meanwhile
	if err := w.commit(ctx); err != nil {
		t.Fatalf("the commit tick that begins a transaction again: %v", err)
	}
	waitFor(t, "the b alerts written after the restart", func() bool { return b.pendingAlerts(w) == 3 })
	if err := w.commit(ctx); err != nil {
		t.Fatal(err)
	}
	got := b.visibleAlerts(t, func(string) float64 { return 1 })
	for _, id := range []string{"a0", "b0", "b1", "b2"} {
		if got[id] != 1 {
			t.Errorf("alert %s visible %d times, want once (all: %v)", id, got[id], got)
		}
	}
}

// visibleAlerts counts the visible alerts by notification id, checking
// each one's price against price(id).
func (b *fakeTxnBroker) visibleAlerts(t *testing.T, price func(id string) float64) map[string]int {
	t.Helper()
	got := map[string]int{}
	for _, msg := range b.alerts() {
		var a record.Alert
		if err := json.Unmarshal(msg.Value, &a); err != nil {
			t.Fatal(err)
		}
		got[a.ID]++
		if want := price(a.ID); a.Price == nil || *a.Price != want {
			t.Errorf("alert %s: price %v, want %v", a.ID, a.Price, want)
		}
	}
	return got
}

// TestExactlyOnceHandoverWaitsForVisibleOffsets: the transaction that
// commits a revoked task's final offsets has ended, but the group still
// shows the offsets of the transaction before (the markers are not
// written): the handover waits until the group shows the new ones, so
// that the next owner does not start below them and write their alerts
// again. (Without txnAwaitVisible, Assigned returns while the group still
// shows the older offset.)
func TestExactlyOnceHandoverWaitsForVisibleOffsets(t *testing.T) {
	w, f, b, m, ctx, s := newTxnRigWithAlerts(t)
	if err := w.commit(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		f.produce("notifications", 0, int64(1200+i), s, noteJSON(fmt.Sprintf("b%d", i), s))
	}
	waitFor(t, "2 more alerts in the transaction", func() bool { return b.pendingAlerts(w) == 2 })
	b.mu.Lock()
	b.staleFetches, b.fetches = 3, 0
	b.mu.Unlock()
	w.Assigned(ctx, assignment(2, nil, nil)) // every task revoked: commitFinal
	b.mu.Lock()
	stale, fetches := b.staleFetches, b.fetches
	b.mu.Unlock()
	if stale != 0 || fetches != 4 {
		t.Errorf("the handover returned after %d offset fetches with %d stale ones left, want 4 fetches, the last one showing the commit", fetches, stale)
	}
	if got, _ := m.FetchOffsets(ctx, "notifications", []int{0}); got[0] != 5 {
		t.Errorf("committed notifications-0 at %d, want 5", got[0])
	}
	got := b.visibleAlerts(t, func(string) float64 { return 1 })
	for _, id := range []string{"a0", "a1", "a2", "b0", "b1"} {
		if got[id] != 1 {
			t.Errorf("alert %s visible %d times, want once (all: %v)", id, got[id], got)
		}
	}
}

// TestExactlyOnceCommitDuringHandover: a commit while a revoked task is
// paused at its handover (taken out of the running tasks, its batches in
// flight still written) holds that task's offsets with its alerts, so
// that no transaction makes alerts visible while their offsets stay
// behind. (Without addHandoverLocked the commit made the 3 alerts visible
// and left notifications-0 uncommitted: a failed final commit then gave
// them to the next owner to write again.)
func TestExactlyOnceCommitDuringHandover(t *testing.T) {
	w, _, b, _, ctx, _ := newTxnRigWithAlerts(t)
	// What Assigned does first when it revokes the task: take it out of
	// the running ones (detachLocked), before its pause and final commit.
	w.mu.Lock()
	plan := planTasks(w.runningLocked(), wantedOf(assignment(2, nil, nil), w.cfg.Topics))
	stop := w.detachLocked(&plan)
	w.mu.Unlock()
	if err := w.commit(ctx); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	off, visible := b.offsets["notifications"][0], len(b.visible)
	b.mu.Unlock()
	if visible != 3 || off != 3 {
		t.Errorf("a commit during the handover made %d alerts visible with notifications-0 committed at %d, want 3 and 3", visible, off)
	}
	// The handover goes on as Assigned's would.
	w.pause(ctx, stop.procs)
	w.stopTasks(ctx, stop)
	w.mu.Lock()
	w.handover = nil
	w.mu.Unlock()
}

// newTxnRigWithAlerts is newTxnRig with task 0 assigned and the alerts of
// notifications a0..a2 (priced 1) in the open transaction; it returns
// their symbol too.
func newTxnRigWithAlerts(t *testing.T) (*Processor, *fakeFetcher, *fakeTxnBroker, *txnMemberFake, context.Context, string) {
	t.Helper()
	w, f, b, m, ctx := newTxnRig(t)
	s := symbolOf(t, 0, 2)
	f.produce("market", 0, 1000, s, tickJSON(s, 1))
	for i := range 3 {
		f.produce("notifications", 0, int64(1100+i), s, noteJSON(fmt.Sprintf("a%d", i), s))
	}
	w.Assigned(ctx, m.a)
	waitFor(t, "3 alerts in the transaction", func() bool { return b.pendingAlerts(w) == 3 })
	return w, f, b, m, ctx, s
}
