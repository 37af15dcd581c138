// Package demo runs joiner end to end in one process: an embedded Kafka
// broker (kfake) or an external cluster, several workers, and the load
// generator; `joiner demo` prints its report. The tests grow, shrink,
// crash and isolate workers with testsupport/testkit, which builds on the
// Broker, WorkerConfig, WaitStable, Alerts and TopicReader defined here.
package demo

import (
	"context"
	"fmt"
	"hash/maphash"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/joiner-dev/joiner/fetch"
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
	// ReadCommitted makes CollectAlertsInto read the alerts
	// read_committed (exactly-once workers).
	ReadCommitted bool
	Client        *kafka.Client
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
		kfake.SeedTopics(int32(partitions), t.Notifications, t.Alerts, t.DeadLetter),
		// Small segments, so that deleting what was consumed (the demo's
		// trim) frees memory: only whole segments are dropped.
		kfake.BrokerConfigs(map[string]string{"log.segment.bytes": strconv.Itoa(1 << 20)}),
	)
	if err != nil {
		return nil, fmt.Errorf("starting the embedded broker: %w", err)
	}
	// The market topic is the changelog of the tasks' stores: compacted,
	// as --create-topics makes it (node.MarketTopicConfigs), so the
	// workers' retention check has nothing to warn about.
	configs := map[string]string{}
	for _, e := range node.MarketTopicConfigs(time.Hour) {
		configs[e.ConfigName] = e.ConfigValue
	}
	if err := c.CreateTopic(t.Market, int32(partitions), configs); err != nil {
		c.Close()
		return nil, fmt.Errorf("creating the embedded broker's market topic: %w", err)
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

// WorkerConfig returns the configuration of worker instance on b: the
// template (assignor, timeouts, logger) with the broker, group, topics,
// transport (one per worker), instance id, state dir dir/<instance> and a loopback HTTP
// listener set, LeaveOnShutdown on, and the group timeouts left zero
// shortened for a one-process fleet. A worker started again with the same
// instance and dir finds its stores.
func WorkerConfig(b *Broker, dir, instance string, template node.Config) node.Config {
	cfg := template
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
	// Each worker has its own transport (its own connections), with the
	// cluster's TLS and SASL.
	tr := &kafka.Transport{}
	if sec := b.Transport; sec != nil {
		tr.TLS, tr.SASL = sec.TLS, sec.SASL
	}
	cfg.Transport = tr
	cfg.Brokers, cfg.Group, cfg.Topics = b.Addrs, b.Group, b.Topics
	cfg.InstanceID = instance
	cfg.LeaveOnShutdown = true
	cfg.Dirs = []string{filepath.Join(dir, instance)}
	cfg.HTTPAddr = "127.0.0.1:0"
	return cfg
}

// fleet is the demo's workers: started together, stopped together.
type fleet struct {
	b       *Broker
	workers map[string]*node.Node
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// startFleet starts one worker per name, each configured by WorkerConfig.
// The caller stops them with stop.
func startFleet(ctx context.Context, b *Broker, dir string, template node.Config, names []string) (*fleet, error) {
	ctx, cancel := context.WithCancel(ctx)
	f := &fleet{b: b, workers: map[string]*node.Node{}, cancel: cancel}
	for _, name := range names {
		n, err := node.New(ctx, WorkerConfig(b, dir, name, template))
		if err != nil {
			f.stop()
			return nil, fmt.Errorf("starting worker %s: %w", name, err)
		}
		f.workers[name] = n
		f.wg.Go(func() { _ = n.Run(ctx) })
	}
	return f, nil
}

// stop stops every worker (each leaves the group) and waits for them.
func (f *fleet) stop() {
	f.cancel()
	f.wg.Wait()
}

// WaitStable waits until the workers returned by workers share one
// generation, every one of the partitions of both topics is assigned
// exactly once among them, and every worker is ready (its tasks restored).
// It returns that generation.
func WaitStable(ctx context.Context, timeout time.Duration, partitions int, workers func() map[string]*node.Node) (int32, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last string
	for {
		gen, why := stable(workers(), partitions)
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

func stable(nodes map[string]*node.Node, partitions int) (int32, string) {
	if len(nodes) == 0 {
		return 0, "no workers"
	}
	var gen int32 = -1
	seen := map[string][]int{}
	for name, n := range nodes {
		s := n.Processor().Stats()
		if gen == -1 {
			gen = s.Generation
		} else if s.Generation != gen {
			return 0, fmt.Sprintf("generations differ (%s at %d, another at %d)", name, s.Generation, gen)
		}
		if ok, why := n.Processor().Ready(); !ok {
			return 0, name + ": " + why
		}
		seen["n"] = append(seen["n"], s.Tasks...)
		seen["m"] = append(seen["m"], s.StateTasks...)
	}
	for _, k := range []string{"n", "m"} {
		if len(seen[k]) != partitions {
			return 0, fmt.Sprintf("%d of %d partitions assigned", len(seen[k]), partitions)
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
	// An alert carries the notification's members: its id is read
	// without decoding the rest.
	id, ok := record.StringMember(value, "id")
	if !ok {
		return
	}
	h := maphash.String(a.seed, id)
	if a.counts[h] == 0 {
		a.distinct.Add(1)
	}
	a.counts[h]++
}

// CollectAlertsInto reads the alerts topic into a until done reports true
// or ctx ends. With trim, on the embedded broker, it deletes the alerts it
// has read and the notifications below the group's committed offsets, so
// that the broker's memory stays bounded in a long run.
func (b *Broker) CollectAlertsInto(ctx context.Context, a *Alerts, trim bool, done func(*Alerts) bool) error {
	r := NewTopicReader(b.Client, b.Topics.Alerts, b.Partitions)
	r.committed = b.ReadCommitted
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

// TopicReader reads every partition of a topic from its start, in order
// within each partition. Tests and the demo use it to read what the
// workers wrote.
type TopicReader struct {
	client *kafka.Client
	topic  string
	next   []int64
	// committed reads read_committed (ReadCommitted).
	committed bool
}

// ReadCommitted makes r read read_committed: only the records of
// committed transactions (what exactly-once workers write), no control
// records. It returns r.
func (r *TopicReader) ReadCommitted() *TopicReader {
	r.committed = true
	return r
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
		req := &kafka.FetchRequest{Topic: r.topic, Partition: p, Offset: r.next[p], MinBytes: 1, MaxBytes: 8 << 20, MaxWait: 20 * time.Millisecond}
		var (
			res *kafka.FetchResponse
			err error
		)
		if r.committed {
			res, err = fetch.CommittedClient{Client: r.client}.Fetch(ctx, req)
		} else {
			res, err = r.client.Fetch(ctx, req)
		}
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
		r.next[p] = fetch.NextAfter(res.Records, r.next[p]) // past control records
	}
	return got, nil
}
