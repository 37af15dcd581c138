// Package testkit is the test support of the end-to-end tests in demo and
// integration: a fleet of in-process workers that can be stopped, crashed,
// isolated and healed (each worker dials the broker through a cutter, so a
// crash cuts it off at the transport), and readers for the alerts and
// dead-letter topics. It builds on demo's Broker, WorkerConfig and
// WaitStable, so the tests run workers exactly as `joiner demo` does.
// Product code does not import it.
package testkit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/joiner-dev/joiner/demo"
	"github.com/joiner-dev/joiner/join"
	"github.com/joiner-dev/joiner/node"
	"github.com/segmentio/kafka-go"
)

// Fleet starts and stops in-process workers against one broker. Each
// worker has its own state dir under Dir and its own HTTP listener.
type Fleet struct {
	Broker *demo.Broker
	Dir    string
	// Template configures every worker (assignor, timeouts, logger); see
	// demo.WorkerConfig for what the fleet sets. Stop leaves the group,
	// Crash does not.
	Template node.Config

	mu      sync.Mutex
	running map[string]*Running
	// gone holds the workers stopped or crashed: their last stats, and
	// the crashed ones still winding down.
	gone    []join.Stats
	crashed []*Running
}

// Running is one started worker.
type Running struct {
	Node   *node.Node
	cancel context.CancelFunc
	done   chan error
	net    *cutter
}

// NewFleet returns a fleet keeping state under dir, starting workers
// configured by template.
func NewFleet(b *demo.Broker, dir string, template node.Config) *Fleet {
	return &Fleet{Broker: b, Dir: dir, Template: template, running: map[string]*Running{}}
}

// Start starts a worker with the given instance id. Its state dir is
// Dir/<instance>, so a worker started again with the same id finds its
// stores.
func (f *Fleet) Start(ctx context.Context, instance string) (*Running, error) {
	// A crashed worker of the same instance winds down first, as a killed
	// process is gone before it restarts: it holds the state dir's stores.
	f.mu.Lock()
	var winding []*Running
	for _, r := range f.crashed {
		if r.Node.Processor().Stats().Instance == instance {
			winding = append(winding, r)
		}
	}
	f.mu.Unlock()
	for _, r := range winding {
		err := <-r.done
		r.done <- err // for StopAll
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.running[instance]; ok {
		return nil, fmt.Errorf("worker %s is already running", instance)
	}
	cfg := demo.WorkerConfig(f.Broker, f.Dir, instance, f.Template)
	// The worker dials through a cutter: Crash and Isolate cut it off at
	// the transport.
	cut := &cutter{conns: map[net.Conn]struct{}{}}
	tr, ok := cfg.Transport.(*kafka.Transport)
	if !ok {
		return nil, fmt.Errorf("starting worker %s: demo.WorkerConfig gave a %T transport, want *kafka.Transport", instance, cfg.Transport)
	}
	tr.Dial = cut.dial
	n, err := node.New(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("starting worker %s: %w", instance, err)
	}
	rctx, cancel := context.WithCancel(ctx)
	r := &Running{Node: n, cancel: cancel, done: make(chan error, 1), net: cut}
	go func() { r.done <- n.Run(rctx) }()
	f.running[instance] = r
	return r, nil
}

// Stop stops a worker cleanly (it leaves the group) and waits for it.
func (f *Fleet) Stop(instance string) error {
	f.mu.Lock()
	r, ok := f.running[instance]
	delete(f.running, instance)
	f.mu.Unlock()
	if !ok {
		return fmt.Errorf("worker %s is not running", instance)
	}
	r.cancel()
	err := <-r.done
	f.mu.Lock()
	f.gone = append(f.gone, r.Node.Processor().Stats())
	f.mu.Unlock()
	return err
}

// Crash cuts a worker off the broker without leaving the group, as a
// killed process or a network partition would: its heartbeats, commits
// and leave fail, so the group only notices after the session timeout.
func (f *Fleet) Crash(instance string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.running[instance]
	if !ok {
		return fmt.Errorf("worker %s is not running", instance)
	}
	delete(f.running, instance)
	r.net.cut()
	r.cancel()
	f.crashed = append(f.crashed, r)
	return nil
}

// Isolate cuts a running worker off the broker and keeps it running, as a
// paused process (SIGSTOP) or a network partition would: it cannot
// heartbeat, fetch, write or commit until Heal. Past the session timeout
// the group gives its tasks to others.
func (f *Fleet) Isolate(instance string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.running[instance]
	if !ok {
		return fmt.Errorf("worker %s is not running", instance)
	}
	r.net.cut()
	return nil
}

// Heal reconnects a worker cut off by Isolate.
func (f *Fleet) Heal(instance string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.running[instance]
	if !ok {
		return fmt.Errorf("worker %s is not running", instance)
	}
	r.net.heal()
	return nil
}

// Totals sums the stats of every worker this fleet ever started.
func (f *Fleet) Totals() join.Stats {
	var t join.Stats
	add := func(s join.Stats) {
		t.Local += s.Local
		t.Remote += s.Remote
		t.Miss += s.Miss
		t.RestoredRecords += s.RestoredRecords
		t.Restores += s.Restores
		t.MovedTotal += s.MovedTotal
		t.Misrouted += s.Misrouted
		t.TicksLate += s.TicksLate
	}
	for _, n := range f.Workers() {
		add(n.Processor().Stats())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.gone {
		add(s)
	}
	for _, r := range f.crashed {
		add(r.Node.Processor().Stats())
	}
	return t
}

// Owners maps each task to the instance processing it now, among the
// running workers.
func (f *Fleet) Owners() map[int]string {
	out := map[int]string{}
	for name, n := range f.Workers() {
		for _, p := range n.Processor().Stats().Tasks {
			out[p] = name
		}
	}
	return out
}

// Crashed returns the stats of the workers crashed and not started
// again, by instance: what each reports after it was cut off (its last
// generation and tasks, its counts).
func (f *Fleet) Crashed() map[string]join.Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]join.Stats{}
	for _, r := range f.crashed {
		s := r.Node.Processor().Stats()
		if _, running := f.running[s.Instance]; !running {
			out[s.Instance] = s
		}
	}
	return out
}

// StopAll stops every worker and waits for the crashed ones to wind down.
func (f *Fleet) StopAll() error {
	f.mu.Lock()
	names := make([]string, 0, len(f.running))
	for name := range f.running {
		names = append(names, name)
	}
	f.mu.Unlock()
	var errs []error
	for _, name := range names {
		errs = append(errs, f.Stop(name))
	}
	f.mu.Lock()
	crashed := f.crashed
	f.crashed = nil
	f.mu.Unlock()
	for _, r := range crashed {
		<-r.done // its error is expected: it was cut off
		f.mu.Lock()
		f.gone = append(f.gone, r.Node.Processor().Stats())
		f.mu.Unlock()
	}
	return errors.Join(errs...)
}

// Workers returns the running workers' nodes.
func (f *Fleet) Workers() map[string]*node.Node {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]*node.Node, len(f.running))
	for name, r := range f.running {
		out[name] = r.Node
	}
	return out
}

// WaitStable waits until the running workers share one generation, every
// partition of both topics is assigned exactly once among them, and every
// worker is ready (its tasks restored). It returns that generation.
func (f *Fleet) WaitStable(ctx context.Context, timeout time.Duration) (int32, error) {
	return demo.WaitStable(ctx, timeout, f.Broker.Partitions, f.Workers)
}

// cutter dials the broker for one worker and can cut it off: every open
// connection is closed and new dials fail.
type cutter struct {
	mu    sync.Mutex
	off   bool
	conns map[net.Conn]struct{}
}

var errCut = errors.New("testkit: worker cut off from the broker")

func (c *cutter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.off {
		return nil, errCut
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c.conns[conn] = struct{}{}
	return &trackedConn{Conn: conn, c: c}, nil
}

// trackedConn forgets itself when closed.
type trackedConn struct {
	net.Conn
	c *cutter
}

func (t *trackedConn) Close() error {
	t.c.mu.Lock()
	delete(t.c.conns, t.Conn)
	t.c.mu.Unlock()
	return t.Conn.Close()
}

func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off = true
	for conn := range c.conns {
		_ = conn.Close()
	}
	c.conns = map[net.Conn]struct{}{}
}

// heal lets new dials through again.
func (c *cutter) heal() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off = false
}
