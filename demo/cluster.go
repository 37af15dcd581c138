// Package demo runs joiner end to end in one process: an embedded Kafka
// broker (kfake), several workers, and the load generator. `joiner demo`
// prints its report; the tests use the same pieces to grow, shrink, crash
// and restart workers.
package demo

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/joiner-dev/joiner/join"
	"github.com/joiner-dev/joiner/node"
	"github.com/joiner-dev/joiner/record"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Broker is the cluster a demo runs on: an embedded single-node broker
// (StartBroker) or an external one (UseBrokers), with the joiner topics
// created.
type Broker struct {
	cluster *kfake.Cluster // nil for an external cluster
	Addrs   []string
	Topics  record.Topics
	// Group is the consumer group the workers join.
	Group string
	// Partitions of every topic.
	Partitions int
	Client     *kafka.Client
	// Transport holds the TLS and SASL settings of an external cluster;
	// nil for plaintext.
	Transport *kafka.Transport
}

// StartBroker starts an embedded broker whose topics all have partitions
// partitions. Session timeouts down to 500ms are allowed, for tests.
func StartBroker(partitions int) (*Broker, error) {
	if partitions < 1 {
		return nil, fmt.Errorf("partitions must be at least 1, got %d", partitions)
	}
	t := record.Topics{}.WithDefaults()
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.GroupMinSessionTimeout(500*time.Millisecond),
		kfake.SeedTopics(int32(partitions), t.Market, t.Notifications, t.Alerts, t.DeadLetter),
		// Small segments, so that deleting what was consumed (the demo's
		// trim) frees memory: only whole segments are dropped.
		kfake.BrokerConfigs(map[string]string{"log.segment.bytes": strconv.Itoa(1 << 20)}),
	)
	if err != nil {
		return nil, fmt.Errorf("starting the embedded broker: %w", err)
	}
	addrs := c.ListenAddrs()
	return &Broker{
		cluster:    c,
		Addrs:      addrs,
		Topics:     t,
		Group:      "joiner",
		Partitions: partitions,
		Client:     &kafka.Client{Addr: kafka.TCP(addrs...), Timeout: 10 * time.Second},
	}, nil
}

// UseBrokers prepares a demo on an external cluster: it creates topics and
// a group named for this run (joiner-demo-<unix time>-…), so a run never
// sees another's records. Close deletes the topics. tr, when not nil,
// carries the cluster's TLS and SASL settings.
func UseBrokers(ctx context.Context, addrs []string, partitions, replication int, tr *kafka.Transport) (*Broker, error) {
	if partitions < 1 {
		return nil, fmt.Errorf("partitions must be at least 1, got %d", partitions)
	}
	run := fmt.Sprintf("joiner-demo-%d", time.Now().UnixNano())
	t := record.Topics{Market: run + "-market", Notifications: run + "-notifications", Alerts: run + "-alerts", DeadLetter: run + "-dead-letters"}
	client := &kafka.Client{Addr: kafka.TCP(addrs...), Timeout: 30 * time.Second}
	if tr != nil {
		client.Transport = tr
	}
	if err := node.EnsureTopics(ctx, client, t, partitions, max(replication, 1)); err != nil {
		return nil, fmt.Errorf("creating the demo topics on %s: %w", strings.Join(addrs, ","), err)
	}
	return &Broker{Addrs: addrs, Topics: t, Group: run, Partitions: partitions, Client: client, Transport: tr}, nil
}

// Close stops the embedded broker, or deletes the topics created on an
// external one.
func (b *Broker) Close() {
	if b.cluster != nil {
		b.cluster.Close()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = b.Client.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: []string{b.Topics.Market, b.Topics.Notifications, b.Topics.Alerts, b.Topics.DeadLetter}})
}

// Fleet starts and stops in-process workers against one broker. Each
// worker has its own state dir under Dir and its own HTTP listener.
type Fleet struct {
	Broker *Broker
	Dir    string
	// Template configures every worker (assignor, timeouts, logger); the
	// fleet sets the broker, group, topics, instance id, state dir, HTTP
	// address and transport, sets LeaveOnShutdown (Stop leaves the group,
	// Crash does not), and shortens the group timeouts left zero.
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
func NewFleet(b *Broker, dir string, template node.Config) *Fleet {
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
		if r.Node.Worker().Stats().Instance == instance {
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
	cfg := f.Template
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.SessionTimeout, 6*time.Second)
	def(&cfg.HeartbeatInterval, 500*time.Millisecond)
	def(&cfg.RebalanceTimeout, 10*time.Second)
	def(&cfg.CommitInterval, 200*time.Millisecond)
	if cfg.CacheBytes == 0 {
		cfg.CacheBytes = 8 << 20
	}
	cut := &cutter{conns: map[net.Conn]struct{}{}}
	tr := &kafka.Transport{Dial: cut.dial}
	if sec := f.Broker.Transport; sec != nil {
		tr.TLS, tr.SASL = sec.TLS, sec.SASL
	}
	cfg.Transport = tr
	cfg.Brokers, cfg.Group, cfg.Topics = f.Broker.Addrs, f.Broker.Group, f.Broker.Topics
	cfg.InstanceID = instance
	cfg.LeaveOnShutdown = true // Stop leaves; Crash does not
	cfg.StateDirs = []string{filepath.Join(f.Dir, instance)}
	cfg.HTTPAddr = "127.0.0.1:0"
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
	f.gone = append(f.gone, r.Node.Worker().Stats())
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
	}
	for _, n := range f.Workers() {
		add(n.Worker().Stats())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.gone {
		add(s)
	}
	for _, r := range f.crashed {
		add(r.Node.Worker().Stats())
	}
	return t
}

// Owners maps each task to the instance processing it now.
func (f *Fleet) Owners() map[int]string {
	out := map[int]string{}
	for name, n := range f.Workers() {
		for _, p := range n.Worker().Stats().Tasks {
			out[p] = name
		}
	}
	return out
}

// StopAll stops every worker.
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
		f.gone = append(f.gone, r.Node.Worker().Stats())
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
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last string
	for {
		gen, why := f.stable()
		if why == "" {
			return gen, nil
		}
		last = why
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("workers not stable after %s: %s", timeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (f *Fleet) stable() (int32, string) {
	nodes := f.Workers()
	if len(nodes) == 0 {
		return 0, "no workers"
	}
	var gen int32 = -1
	seen := map[string][]int{}
	for name, n := range nodes {
		s := n.Worker().Stats()
		if gen == -1 {
			gen = s.Generation
		} else if s.Generation != gen {
			return 0, fmt.Sprintf("generations differ (%s at %d, another at %d)", name, s.Generation, gen)
		}
		if ok, why := n.Worker().Ready(); !ok {
			return 0, name + ": " + why
		}
		seen["n"] = append(seen["n"], s.Tasks...)
		seen["m"] = append(seen["m"], s.StateTasks...)
	}
	for _, k := range []string{"n", "m"} {
		if len(seen[k]) != f.Broker.Partitions {
			return 0, fmt.Sprintf("%d of %d partitions assigned", len(seen[k]), f.Broker.Partitions)
		}
		count := map[int]int{}
		for _, p := range seen[k] {
			count[p]++
			if count[p] > 1 {
				return 0, fmt.Sprintf("partition %d assigned twice", p)
			}
		}
	}
	return gen, ""
}

// Alerts collects the alerts topic from the beginning. It keeps only a
// count per notification id, keyed by a 64-bit hash of the id (not the
// alert bodies), so a million notifications cost tens of megabytes.
// Distinct may be read while another goroutine collects.
type Alerts struct {
	// Records is the number of alert records read.
	Records  int
	seed     maphash.Seed
	counts   map[uint64]uint32
	distinct atomic.Int64
}

// NewAlerts returns an empty collection, for CollectAlertsInto.
func NewAlerts() *Alerts { return &Alerts{seed: maphash.MakeSeed(), counts: map[uint64]uint32{}} }

// Count is the number of alerts read for notification id.
func (a *Alerts) Count(id string) int { return int(a.counts[maphash.String(a.seed, id)]) }

// Distinct is the number of notification ids with at least one alert.
func (a *Alerts) Distinct() int { return int(a.distinct.Load()) }

// Duplicates is the number of alert records beyond one per notification.
func (a *Alerts) Duplicates() int { return a.Records - a.Distinct() }

func (a *Alerts) add(value []byte) {
	a.Records++
	// An alert carries the notification's fields: the notification decoder
	// finds its id without decoding the rest.
	n, err := record.DecodeNotification(value, len(value))
	if err != nil {
		return
	}
	h := maphash.String(a.seed, n.ID)
	if a.counts[h] == 0 {
		a.distinct.Add(1)
	}
	a.counts[h]++
}

// CollectAlerts reads the alerts topic until done reports true for what
// was read or ctx ends.
func (b *Broker) CollectAlerts(ctx context.Context, done func(*Alerts) bool) (*Alerts, error) {
	a := NewAlerts()
	return a, b.CollectAlertsInto(ctx, a, false, done)
}

// CollectAlertsInto reads the alerts topic into a until done reports true
// or ctx ends. With trim, on the embedded broker, it deletes the alerts it
// has read and the notifications below the group's committed offsets, so
// that the broker's memory stays bounded in a long run.
func (b *Broker) CollectAlertsInto(ctx context.Context, a *Alerts, trim bool, done func(*Alerts) bool) error {
	r := NewTopicReader(b.Client, b.Topics.Alerts, b.Partitions)
	trim = trim && b.cluster != nil
	lastTrim := time.Now()
	for !done(a) {
		n, err := r.Poll(ctx, func(_ kafka.Record, v []byte) { a.add(v) })
		if err != nil {
			return err
		}
		if trim && time.Since(lastTrim) >= 200*time.Millisecond {
			lastTrim = time.Now()
			b.trim(ctx, r.next)
		}
		if n == 0 {
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	if trim {
		b.trim(ctx, r.next)
	}
	return nil
}

// trim deletes from the embedded broker the alerts below alertsRead and
// the notifications below the group's committed offsets. Failures only
// leave more in memory.
func (b *Broker) trim(ctx context.Context, alertsRead []int64) {
	for p, off := range alertsRead {
		if off > 0 {
			_ = b.cluster.DeleteRecords(b.Topics.Alerts, int32(p), off)
		}
	}
	parts := make([]int, b.Partitions)
	for p := range parts {
		parts[p] = p
	}
	res, err := b.Client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: b.Group, Topics: map[string][]int{b.Topics.Notifications: parts}})
	if err != nil || res.Error != nil {
		return
	}
	for _, op := range res.Topics[b.Topics.Notifications] {
		if op.Error == nil && op.CommittedOffset > 0 {
			_ = b.cluster.DeleteRecords(b.Topics.Notifications, int32(op.Partition), op.CommittedOffset)
		}
	}
}

func (b *Broker) collect(ctx context.Context, topic string, each func(kafka.Record, []byte), done func() bool) error {
	r := NewTopicReader(b.Client, topic, b.Partitions)
	for !done() {
		n, err := r.Poll(ctx, each)
		if err != nil {
			return err
		}
		if n == 0 {
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

// TopicReader reads every partition of a topic from its start, in order
// within each partition. Tests and the demo use it to read what the
// workers wrote.
type TopicReader struct {
	client *kafka.Client
	topic  string
	next   []int64
}

// NewTopicReader reads topic, which has partitions partitions.
func NewTopicReader(c *kafka.Client, topic string, partitions int) *TopicReader {
	return &TopicReader{client: c, topic: topic, next: make([]int64, partitions)}
}

// Poll fetches once from every partition and calls each for every new
// record, with its value. It returns how many records it read; failed
// fetches are skipped (the next Poll tries again) unless ctx is done.
func (r *TopicReader) Poll(ctx context.Context, each func(rec kafka.Record, value []byte)) (int, error) {
	got := 0
	for p := range r.next {
		res, err := r.client.Fetch(ctx, &kafka.FetchRequest{Topic: r.topic, Partition: p, Offset: r.next[p], MinBytes: 1, MaxBytes: 8 << 20, MaxWait: 20 * time.Millisecond})
		if ctx.Err() != nil {
			return got, fmt.Errorf("reading %s: %w", r.topic, ctx.Err())
		}
		if err != nil || res.Error != nil {
			continue
		}
		for {
			rec, err := res.Records.ReadRecord()
			if err != nil {
				break
			}
			if rec.Offset < r.next[p] {
				continue
			}
			v, _ := kafka.ReadAll(rec.Value)
			each(*rec, v)
			r.next[p] = rec.Offset + 1
			got++
		}
	}
	return got, nil
}

// DeadLetter is one record of the dead-letter topic.
type DeadLetter struct {
	Reason string
	Source string
	Value  string
}

// CollectDeadLetters reads the dead-letter topic until done reports true.
func (b *Broker) CollectDeadLetters(ctx context.Context, done func([]DeadLetter) bool) ([]DeadLetter, error) {
	var out []DeadLetter
	err := b.collect(ctx, b.Topics.DeadLetter, func(rec kafka.Record, value []byte) {
		d := DeadLetter{Value: string(value)}
		for _, h := range rec.Headers {
			switch h.Key {
			case "joiner-dead-letter-reason":
				d.Reason = string(h.Value)
			case "joiner-source":
				d.Source = string(h.Value)
			}
		}
		out = append(out, d)
	}, func() bool { return done(out) })
	return out, err
}

// cutter dials the broker for one worker and can cut it off: every open
// connection is closed and new dials fail.
type cutter struct {
	mu    sync.Mutex
	off   bool
	conns map[net.Conn]struct{}
}

var errCut = errors.New("demo: worker cut off from the broker")

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
