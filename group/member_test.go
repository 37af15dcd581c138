package group

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/copartition"
	"github.com/joiner-dev/joiner/record"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const testPartitions = 6

var (
	testTopics   = []string{"market", "notifications"}
	testTopicSet = record.Topics{Market: "market", Notifications: "notifications"}
)

// newCluster starts an in-process kfake broker with the two co-partitioned
// topics (or the given seed options) and a session timeout floor low enough
// for fast tests.
func newCluster(t *testing.T, opts ...kfake.Opt) []string {
	t.Helper()
	return startCluster(t, 1, opts...).ListenAddrs()
}

func startCluster(t *testing.T, brokers int, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	if len(opts) == 0 {
		opts = []kfake.Opt{kfake.SeedTopics(testPartitions, testTopics...)}
	}
	opts = append([]kfake.Opt{kfake.NumBrokers(brokers), kfake.GroupMinSessionTimeout(100 * time.Millisecond)}, opts...)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// recorder is a Handler that records what it is told.
type recorder struct {
	mu          sync.Mutex
	assigned    []Assignment
	assignedAt  []time.Time // when each Assigned returned
	rebalancing int
	lost        []error
	// onRebalancing, when set, runs inside Rebalancing.
	onRebalancing func(ctx context.Context)
	// onLost, when set, runs inside Lost.
	onLost func(ctx context.Context, err error)
	// onAssigned, when set, runs inside Assigned.
	onAssigned func(ctx context.Context, a Assignment)
}

func (r *recorder) Assigned(ctx context.Context, a Assignment) {
	r.mu.Lock()
	fn := r.onAssigned
	r.mu.Unlock()
	if fn != nil {
		fn(ctx, a)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.assigned = append(r.assigned, a)
	r.assignedAt = append(r.assignedAt, time.Now())
}

func (r *recorder) Rebalancing(ctx context.Context) {
	r.mu.Lock()
	fn := r.onRebalancing
	r.mu.Unlock()
	if fn != nil {
		fn(ctx)
	}
	r.mu.Lock()
	r.rebalancing++
	r.mu.Unlock()
}

func (r *recorder) Lost(ctx context.Context, err error) {
	r.mu.Lock()
	fn := r.onLost
	r.mu.Unlock()
	if fn != nil {
		fn(ctx, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lost = append(r.lost, err)
}

func (r *recorder) setOnRebalancing(fn func(context.Context)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.onRebalancing = fn
}

func (r *recorder) counts() (assigned, rebalancing int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.assigned), r.rebalancing
}

type testMember struct {
	*Member
	id     string
	rec    *recorder
	net    *testTransport // the member's way to the broker
	cancel context.CancelFunc
	done   chan error
}

// stop cancels Run and returns its error.
func (tm *testMember) stop(t *testing.T) error {
	t.Helper()
	tm.cancel()
	select {
	case err := <-tm.done:
		tm.done <- err // for the cleanup
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: Run did not return", tm.id)
		return nil
	}
}

type testLog struct{ t *testing.T }

func (w testLog) Write(b []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// startMember runs a member with fast timeouts, reaching the broker through
// a testTransport; edit tweaks the config before New.
func startMember(t *testing.T, addrs []string, id string, edit func(*Config)) *testMember {
	t.Helper()
	rec := &recorder{}
	tt := newTestTransport()
	t.Cleanup(tt.inner.CloseIdleConnections)
	cfg := Config{
		Client:            &kafka.Client{Addr: kafka.TCP(addrs...), Transport: tt},
		GroupID:           "joiner",
		InstanceID:        id,
		QueryAddr:         id + ":8080",
		Topics:            testTopicSet,
		SessionTimeout:    time.Second,
		RebalanceTimeout:  3 * time.Second,
		HeartbeatInterval: 50 * time.Millisecond,
		LeaveOnShutdown:   true,
		Handler:           rec,
		Logger:            slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test_member", id),
	}
	if edit != nil {
		edit(&cfg)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tm := &testMember{Member: m, id: id, rec: rec, net: tt, cancel: cancel, done: make(chan error, 1)}
	go func() { tm.done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-tm.done:
		case <-time.After(10 * time.Second):
			t.Errorf("%s: Run did not return", id)
		}
	})
	return tm
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stableTasks waits until every member holds an assignment of the same
// generation, with those exact members, whose tasks partition 0..P-1, and
// returns the tasks per instance id.
func stableTasks(t *testing.T, ms ...*testMember) (map[string][]int, []Assignment) {
	t.Helper()
	var tasks map[string][]int
	var as []Assignment
	waitFor(t, 15*time.Second, fmt.Sprintf("a stable generation of %d members", len(ms)), func() bool {
		tasks = map[string][]int{}
		as = nil
		seen := make([]bool, testPartitions)
		var gen int32 = -1
		for _, m := range ms {
			a, ok := m.Current()
			if !ok || (gen >= 0 && a.Generation != gen) {
				return false
			}
			m.mu.Lock()
			holding := m.gen.valid
			m.mu.Unlock()
			if !holding {
				return false
			}
			gen = a.Generation
			as = append(as, a)
			tasks[m.id] = a.Topics[m.topics[0]]
			for _, p := range a.Topics[m.topics[0]] {
				if seen[p] {
					return false
				}
				seen[p] = true
			}
		}
		return !slices.Contains(seen, false)
	})
	return tasks, as
}

func TestSingleMemberGetsEverything(t *testing.T) {
	addrs := newCluster(t)
	a := startMember(t, addrs, "pod-a", nil)
	_, as := stableTasks(t, a)
	got := as[0]
	all := []int{0, 1, 2, 3, 4, 5}
	for _, topic := range testTopics {
		if !slices.Equal(got.Topics[topic], all) {
			t.Errorf("%s: %v, want %v", topic, got.Topics[topic], all)
		}
	}
	if !got.Leader || got.Partitions != testPartitions || got.Error != "" || got.MemberID == "" {
		t.Errorf("assignment %+v", got)
	}
	for p, o := range got.Owners {
		if o != (Owner{"pod-a", "pod-a:8080"}) {
			t.Errorf("owner of %d = %+v", p, o)
		}
	}
	// Stay stable: six more heartbeats answered (each would have reported
	// a rebalance, and the member handles one before sending the next),
	// no further generation, Assigned once.
	h := a.net.Heartbeats()
	waitFor(t, 5*time.Second, "six more heartbeats", func() bool { return a.net.Heartbeats() >= h+6 })
	if n, r := a.rec.counts(); n != 1 || r != 0 {
		t.Errorf("Assigned %d times, Rebalancing %d times; want 1, 0", n, r)
	}
	if err := a.stop(t); err != nil {
		t.Errorf("Run after clean leave: %v", err)
	}
	if _, r := a.rec.counts(); r != 1 {
		t.Errorf("Rebalancing %d times after leave, want 1", r)
	}
}

// checkTransition verifies one rebalance against the planner: moved count
// and the tasks themselves.
func checkTransition(t *testing.T, step string, prev, next map[string][]int, as []Assignment) {
	t.Helper()
	ids := make([]string, 0, len(next))
	for id := range next {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	previous := map[string][]int{}
	for id, tasks := range prev {
		if _, ok := next[id]; ok {
			previous[id] = tasks
		}
	}
	want, err := copartition.Assign(testPartitions, ids, previous)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(next, want.Assignment) {
		t.Errorf("%s: tasks %v, planner says %v", step, next, want.Assignment)
	}
	for _, a := range as {
		// With the cooperative handover a transition takes two
		// generations or more (the moved tasks are withheld, then
		// assigned); Moved is the count of the last plan: all the moves
		// when they were withheld in one generation, fewer when a
		// member's rejoin split them over several.
		if a.Moved > want.Moved || want.Moved > 0 && a.Moved == 0 {
			t.Errorf("%s: Moved = %d, planner says %d", step, a.Moved, want.Moved)
		}
		for _, tasks := range [][]int{a.Topics["notifications"]} {
			if !slices.Equal(tasks, a.Topics["market"]) {
				t.Errorf("%s: market %v, notifications %v", step, a.Topics["market"], tasks)
			}
		}
	}
	// Balanced.
	lo, hi := testPartitions, 0
	for _, tasks := range next {
		lo, hi = min(lo, len(tasks)), max(hi, len(tasks))
	}
	if hi-lo > 1 {
		t.Errorf("%s: unbalanced %v", step, next)
	}
	// Sticky: a task whose owner is still here stays unless balance needs it.
	for id, tasks := range next {
		old := prev[id]
		if len(tasks) <= len(old) && !isSubset(tasks, old) || len(tasks) > len(old) && !isSubset(old, tasks) {
			t.Errorf("%s: %s went from %v to %v", step, id, old, tasks)
		}
	}
}

func isSubset(a, b []int) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

func TestGrowAndShrink(t *testing.T) {
	addrs := newCluster(t)
	a := startMember(t, addrs, "pod-a", nil)
	t1, _ := stableTasks(t, a)

	b := startMember(t, addrs, "pod-b", nil)
	t2, as := stableTasks(t, a, b)
	checkTransition(t, "1→2", t1, t2, as)

	c := startMember(t, addrs, "pod-c", nil)
	t3, as := stableTasks(t, a, b, c)
	checkTransition(t, "2→3", t2, t3, as)

	// The first leader leaves: kfake then tells every member of the next
	// generation that it leads.
	if err := a.stop(t); err != nil {
		t.Fatalf("leave: %v", err)
	}
	t4, as := stableTasks(t, b, c)
	checkTransition(t, "3→2", t3, t4, as)

	if err := c.stop(t); err != nil {
		t.Fatalf("leave: %v", err)
	}
	t5, as := stableTasks(t, b)
	checkTransition(t, "2→1", t4, t5, as)

	// Every generation reached Assigned once, in order, and every Assigned
	// was followed by one Rebalancing before the next.
	for _, m := range []*testMember{a, b, c} {
		m.rec.mu.Lock()
		var gens []int32
		for _, x := range m.rec.assigned {
			gens = append(gens, x.Generation)
		}
		n, r := len(m.rec.assigned), m.rec.rebalancing+len(m.rec.lost)
		m.rec.mu.Unlock()
		if !slices.IsSorted(gens) || len(slices.Compact(slices.Clone(gens))) != len(gens) {
			t.Errorf("%s: Assigned generations %v", m.id, gens)
		}
		if r != n && r != n-1 {
			t.Errorf("%s: %d Assigned, %d Rebalancing", m.id, n, r)
		}
	}
}

// TestCutOffMemberLosesTasksAfterSessionTimeout: a member cut off from the
// broker at its transport (no heartbeat and no LeaveGroup gets out, as for
// a hung or partitioned process) keeps its tasks until the session timeout;
// then the others take them over, and the member itself is told through
// Lost, never through Rebalancing or a new assignment.
func TestCutOffMemberLosesTasksAfterSessionTimeout(t *testing.T) {
	addrs := newCluster(t)
	a := startMember(t, addrs, "pod-a", nil)
	b := startMember(t, addrs, "pod-b", nil)
	c := startMember(t, addrs, "pod-c", nil)
	stableTasks(t, a, b, c)

	n0, r0 := c.rec.counts()
	start := time.Now()
	c.net.Cut()
	tasks, _ := stableTasks(t, a, b)
	took := time.Since(start)
	if len(tasks["pod-a"])+len(tasks["pod-b"]) != testPartitions {
		t.Errorf("tasks %v", tasks)
	}
	if took < 900*time.Millisecond {
		t.Errorf("tasks resumed elsewhere %v after the cut, before the session timeout (1s)", took)
	}
	t.Logf("tasks resumed elsewhere %v after the cut (session timeout %v)", took, time.Second)
	waitFor(t, 5*time.Second, "pod-c's Lost", func() bool {
		c.rec.mu.Lock()
		defer c.rec.mu.Unlock()
		return len(c.rec.lost) > 0
	})
	c.rec.mu.Lock()
	lostErr := c.rec.lost[0]
	c.rec.mu.Unlock()
	if !errors.Is(lostErr, errSessionLost) || !errors.Is(lostErr, errCut) {
		t.Errorf("Lost(%v), want a session loss caused by the cut", lostErr)
	}
	if c.Active() {
		t.Error("the cut-off member is still Active")
	}
	if n, r := c.rec.counts(); n != n0 || r != r0 {
		t.Errorf("cut-off member: Assigned %d, Rebalancing %d; want no new calls (%d, %d)", n, r, n0, r0)
	}
}

func TestCleanLeaveRebalancesPromptly(t *testing.T) {
	addrs := newCluster(t)
	slow := func(cfg *Config) {
		cfg.SessionTimeout = 6 * time.Second
		cfg.HeartbeatInterval = 100 * time.Millisecond
	}
	a := startMember(t, addrs, "pod-a", slow)
	b := startMember(t, addrs, "pod-b", slow)
	stableTasks(t, a, b)
	start := time.Now()
	if err := b.stop(t); err != nil {
		t.Fatalf("leave: %v", err)
	}
	stableTasks(t, a)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("rebalance after a clean leave took %v, session timeout is 6s", d)
	}
}

func TestCommitAndFetchOffsets(t *testing.T) {
	addrs := newCluster(t)
	var releaseJoin func()
	a := startMember(t, addrs, "pod-a", func(cfg *Config) {
		releaseJoin = cfg.Client.Transport.(*testTransport).HoldJoins()
	})
	ctx := context.Background()
	// Its JoinGroup is held: the member has no assignment yet.
	if err := a.Commit(ctx, map[string]map[int]int64{"market": {0: 1}}); !errors.Is(err, ErrRebalancing) {
		t.Errorf("commit before the first assignment: %v, want ErrRebalancing", err)
	}
	releaseJoin()
	_, as := stableTasks(t, a)
	if err := a.Commit(ctx, map[string]map[int]int64{"market": {0: 42, 1: 7}, "notifications": {0: 3}}); err != nil {
		t.Fatal(err)
	}
	got, err := a.FetchOffsets(ctx, "market", []int{0, 1, 2})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[int]int64{0: 42, 1: 7, 2: -1}; !reflect.DeepEqual(got, want) {
		t.Errorf("offsets %v, want %v", got, want)
	}
	got, err = a.FetchOffsets(ctx, "notifications", []int{0})
	if err != nil || got[0] != 3 {
		t.Errorf("notifications offsets %v, %v", got, err)
	}

	// The broker's answer for a generation that is over.
	stale := generation{id: as[0].Generation - 1, memberID: as[0].MemberID, valid: true}
	if err := a.commit(ctx, stale, map[string]map[int]int64{"market": {0: 50}}); !errors.Is(err, ErrRebalancing) {
		t.Errorf("commit with a stale generation: %v, want ErrRebalancing", err)
	}
}

func TestCommitDuringRebalance(t *testing.T) {
	commitDuringRebalance(t, newCluster(t), nil)
}

// commitDuringRebalance runs on the brokers at addrs; edit, when set,
// adjusts each member's config (topics, group) first.
func commitDuringRebalance(t *testing.T, addrs []string, edit func(*Config)) {
	a := startMember(t, addrs, "pod-a", edit)
	market := a.topics[0]
	release := make(chan struct{})
	var commitInRebalancing error
	a.rec.setOnRebalancing(func(ctx context.Context) {
		// The handler's own commit, while the rebalance is being prepared.
		commitInRebalancing = a.Commit(ctx, map[string]map[int]int64{market: {0: 10}})
	})
	c := startMember(t, addrs, "pod-c", edit)
	// Stable first: pod-c's tasks reach it in a follow-up rebalance
	// (cooperative handover), which the hook below would hold.
	stableTasks(t, a, c)
	c.rec.setOnRebalancing(func(ctx context.Context) {
		select { // hold the rebalance open
		case <-release:
		case <-ctx.Done():
		}
	})
	n0, r0 := a.rec.counts()

	b := startMember(t, addrs, "pod-b", edit)
	waitFor(t, 5*time.Second, "pod-a's Rebalancing", func() bool { _, r := a.rec.counts(); return r == r0+1 })
	if commitInRebalancing != nil {
		t.Errorf("commit inside Rebalancing: %v", commitInRebalancing)
	}
	// pod-c holds the rebalance open: pod-a's JoinGroup is in flight, its
	// tasks keep running, and the coordinator, still preparing the
	// rebalance, accepts the old generation's commits.
	for i := range 5 {
		if err := a.Commit(context.Background(), map[string]map[int]int64{market: {0: int64(11 + i)}}); err != nil {
			t.Errorf("commit %d while the rebalance is prepared: %v", i, err)
		}
		if !a.Active() {
			t.Errorf("not Active while its JoinGroup is in flight")
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(release)
	waitFor(t, 10*time.Second, "the next assignment", func() bool { n, _ := a.rec.counts(); return n > n0 })
	// Tasks that move to pod-b take a follow-up rebalance: commit once
	// the group is stable again.
	stableTasks(t, a, b, c)
	if err := a.Commit(context.Background(), map[string]map[int]int64{market: {0: 12}}); err != nil {
		t.Errorf("commit after the rebalance: %v", err)
	}
	if got, err := a.FetchOffsets(context.Background(), market, []int{0}); err != nil || got[0] != 12 {
		t.Errorf("committed offset %v, %v; want 12", got, err)
	}
}

func TestCorruptSubscriptionOwnsNothing(t *testing.T) {
	addrs := newCluster(t)
	a := startMember(t, addrs, "pod-a", nil)
	stableTasks(t, a)
	b := startMember(t, addrs, "pod-b", func(cfg *Config) {
		cfg.Client.Transport.(*testTransport).SetUserData([]byte{1, 0xff, 0xff, 0xff, 0xff})
	})
	tasks, as := stableTasks(t, a, b)
	if len(tasks["pod-b"]) != 3 {
		t.Errorf("tasks %v", tasks)
	}
	// The owner map carries no address for the member whose user data was
	// unreadable, but names it.
	for p, o := range as[0].Owners {
		if slices.Contains(tasks["pod-b"], p) && o != (Owner{InstanceID: "pod-b"}) {
			t.Errorf("owner of %d = %+v", p, o)
		}
	}
}

// Topics whose counts differ (issue 8): the leader plans the tasks below
// the smaller count and reports the rest as unpaired, instead of giving
// every member nothing.
func TestNotCopartitioned(t *testing.T) {
	addrs := newCluster(t, kfake.SeedTopics(6, "market"), kfake.SeedTopics(8, "notifications"))
	a := startMember(t, addrs, "pod-a", nil)
	waitFor(t, 10*time.Second, "an assignment", func() bool { _, ok := a.Current(); return ok })
	got, _ := a.Current()
	if got.Error != "" || got.Partitions != 6 || got.Unpaired != 2 {
		t.Errorf("assignment: error %q, %d partitions, %d unpaired; want no error, 6 and 2", got.Error, got.Partitions, got.Unpaired)
	}
	for topic, ps := range got.Topics {
		if !slices.Equal(ps, []int{0, 1, 2, 3, 4, 5}) {
			t.Errorf("%s: %v, want the 6 paired tasks", topic, ps)
		}
	}
}

func TestNewValidates(t *testing.T) {
	ok := Config{Brokers: []string{"x:1"}, GroupID: "g", InstanceID: "i", Topics: record.Topics{Market: "m", Notifications: "n"}, Handler: &recorder{}}
	for name, edit := range map[string]func(*Config){
		"group":     func(c *Config) { c.GroupID = "" },
		"instance":  func(c *Config) { c.InstanceID = "" },
		"topics":    func(c *Config) { c.Topics = record.Topics{} },
		"repeated":  func(c *Config) { c.Topics.Notifications = c.Topics.Market },
		"handler":   func(c *Config) { c.Handler = nil },
		"brokers":   func(c *Config) { c.Brokers = nil },
		"assignor":  func(c *Config) { c.Assignor = "sticky" },
		"heartbeat": func(c *Config) { c.SessionTimeout = time.Second; c.HeartbeatInterval = time.Second },
		"long id":   func(c *Config) { c.InstanceID = strings.Repeat("x", maxIDLen+1) },
	} {
		cfg := ok
		edit(&cfg)
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	m, err := New(ok)
	if err != nil {
		t.Fatal(err)
	}
	if m.cfg.Assignor != AssignorCopartition || m.cfg.SessionTimeout != 10*time.Second ||
		m.cfg.RebalanceTimeout != 30*time.Second || m.cfg.HeartbeatInterval != time.Second || m.cfg.Logger == nil {
		t.Errorf("defaults %+v", m.cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := m.Run(ctx); err != nil {
		t.Errorf("Run with a cancelled context: %v", err)
	}
	if err := m.Run(ctx); err == nil {
		t.Error("second Run accepted")
	}
}

// TestKafkaGoHeartbeatResponseOrder pins the kafka-go bug responseError works
// around: when it fails, kafka-go decodes Heartbeat responses correctly and
// responseError must go.
func TestKafkaGoHeartbeatResponseOrder(t *testing.T) {
	addrs := newCluster(t)
	a := startMember(t, addrs, "pod-a", nil)
	stableTasks(t, a)
	c := &kafka.Client{Addr: kafka.TCP(addrs...)}
	resp, err := c.Heartbeat(context.Background(), &kafka.HeartbeatRequest{GroupID: "joiner", GenerationID: 1, MemberID: "bogus"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Error != nil || resp.Throttle != time.Duration(kafka.UnknownMemberId)*time.Millisecond {
		t.Fatalf("kafka-go now decodes Heartbeat responses as %+v: remove the responseError workaround", resp)
	}
	if err := responseError(resp.Error, resp.Throttle); !errors.Is(err, kafka.UnknownMemberId) {
		t.Errorf("responseError = %v", err)
	}
}

// TestOwnedReportedBeforeFirstAssignment: a restarted member reports the
// tasks it holds state for, and the sticky planner gives them back to it.
func TestOwnedReportedBeforeFirstAssignment(t *testing.T) {
	addrs := newCluster(t)
	a := startMember(t, addrs, "pod-a", nil)
	stableTasks(t, a)
	b := startMember(t, addrs, "pod-b", func(cfg *Config) {
		cfg.Owned = func() []int { return []int{2, 0, 1, 99} } // unsorted, one out of range
	})
	tasks, _ := stableTasks(t, a, b)
	if want := []int{0, 1, 2}; !slices.Equal(tasks["pod-b"], want) {
		t.Errorf("pod-b got %v, want its state's tasks %v (all: %v)", tasks["pod-b"], want, tasks)
	}
}

// TestCoordinatorMoves: heartbeats follow the coordinator to another broker
// (NOT_COORDINATOR, find it again) without losing the generation.
func TestCoordinatorMoves(t *testing.T) {
	c := startCluster(t, 3)
	addrs := c.ListenAddrs()
	a := startMember(t, addrs, "pod-a", nil)
	b := startMember(t, addrs, "pod-b", nil)
	_, before := stableTasks(t, a, b)
	old := c.CoordinatorFor("joiner")
	for i := 0; c.CoordinatorFor("joiner") == old; i++ {
		if i > 100 {
			t.Fatal("the coordinator never moved")
		}
		c.RehashCoordinators()
	}
	// Until both members have had a heartbeat confirmed more than a session
	// timeout (1s) after the move: a member whose heartbeats went nowhere
	// would have been dropped by then, and would show a new generation.
	moved := time.Now()
	waitFor(t, 10*time.Second, "heartbeats confirmed a session timeout after the move", func() bool {
		for _, m := range []*testMember{a, b} {
			m.mu.Lock()
			confirmed := m.lastAlive
			m.mu.Unlock()
			if confirmed.Sub(moved) <= m.cfg.SessionTimeout {
				return false
			}
		}
		return true
	})
	_, after := stableTasks(t, a, b)
	if after[0].Generation != before[0].Generation {
		t.Errorf("generation went from %d to %d after the coordinator moved", before[0].Generation, after[0].Generation)
	}
	if err := a.Commit(context.Background(), map[string]map[int]int64{"market": {0: 5}}); err != nil {
		t.Errorf("commit after the coordinator moved: %v", err)
	}
}

// TestSyncGroupConnectionClosed: a SyncGroup answered by a closed connection
// (what kfake does for a generation that is already rebalancing) makes the
// member rejoin.
func TestSyncGroupConnectionClosed(t *testing.T) {
	c := startCluster(t, 1)
	var once sync.Once
	closed := make(chan struct{})
	c.ControlKey(int16(kmsg.SyncGroup), func(kmsg.Request) (kmsg.Response, error, bool) {
		handled := false
		once.Do(func() { handled = true; close(closed) })
		if !handled {
			c.DropControl()
		}
		return nil, errors.New("injected: close the connection"), handled
	})
	a := startMember(t, c.ListenAddrs(), "pod-a", nil)
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("no SyncGroup was sent")
	}
	tasks, _ := stableTasks(t, a)
	if len(tasks["pod-a"]) != testPartitions {
		t.Errorf("tasks %v", tasks)
	}
}

// TestLeaderReplansWhenPartitionsChange: topics that are not co-partitioned
// are planned over the paired tasks with the rest reported as unpaired; once
// partitions are added, the planning leader notices and the group is
// replanned over all of them.
func TestLeaderReplansWhenPartitionsChange(t *testing.T) {
	c := startCluster(t, 1, kfake.SeedTopics(6, "market"), kfake.SeedTopics(8, "notifications"))
	addrs := c.ListenAddrs()
	client := &kafka.Client{Addr: kafka.TCP(addrs...), Transport: &kafka.Transport{MetadataTTL: 50 * time.Millisecond}}
	a := startMember(t, addrs, "pod-a", func(cfg *Config) {
		cfg.Client = client
		cfg.MetadataCheckInterval = 100 * time.Millisecond
	})
	waitFor(t, 10*time.Second, "a plan over the 6 paired tasks", func() bool {
		cur, ok := a.Current()
		return ok && cur.Error == "" && cur.Partitions == 6 && cur.Unpaired == 2
	})
	resp, err := client.CreatePartitions(context.Background(), &kafka.CreatePartitionsRequest{
		Topics: []kafka.TopicPartitionsConfig{{Name: "market", Count: 8}},
	})
	if err == nil {
		err = resp.Errors["market"]
	}
	if err != nil {
		t.Fatalf("create partitions: %v", err)
	}
	waitFor(t, 5*time.Second, "a plan over 8 tasks", func() bool {
		cur, ok := a.Current()
		return ok && cur.Error == "" && cur.Partitions == 8 && cur.Unpaired == 0 && len(cur.Topics["notifications"]) == 8
	})
}

// TestLostMembershipCallsLost: heartbeats that fail for a session timeout
// deliver Lost instead of Rebalancing, with the generation already
// dropped (not Active, commits fail); once the heartbeats go through again
// the member rejoins and is Active with a new assignment.
func TestLostMembershipCallsLost(t *testing.T) {
	c := startCluster(t, 1)
	a := startMember(t, c.ListenAddrs(), "pod-a", nil)
	stableTasks(t, a)
	if !a.Active() {
		t.Fatal("a member holding a fresh generation is not Active")
	}
	type atLoss struct {
		active    bool
		commitErr error
	}
	seen := make(chan atLoss, 10)
	a.rec.mu.Lock()
	a.rec.onLost = func(ctx context.Context, _ error) {
		err := a.Commit(ctx, map[string]map[int]int64{"market": {0: 1}})
		seen <- atLoss{a.Active(), err}
	}
	a.rec.mu.Unlock()
	var failing atomic.Bool
	failing.Store(true)
	c.ControlKey(int16(kmsg.Heartbeat), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if failing.Load() {
			return nil, errors.New("injected: heartbeat lost"), true
		}
		return nil, nil, false
	})
	n, _ := a.rec.counts()
	began := time.Now()
	var got atLoss
	select {
	case got = <-seen:
	case <-time.After(10 * time.Second):
		t.Fatal("Lost was not called")
	}
	if d := time.Since(began); d < 900*time.Millisecond {
		t.Errorf("Lost after %v, before the session timeout (1s) passed", d)
	}
	if got.active || !errors.Is(got.commitErr, ErrRebalancing) {
		t.Errorf("inside Lost: Active %v, commit error %v; want false and ErrRebalancing", got.active, got.commitErr)
	}
	a.rec.mu.Lock()
	rebalancing := a.rec.rebalancing
	a.rec.mu.Unlock()
	if rebalancing != 0 {
		t.Errorf("Rebalancing was called %d times for a lost membership", rebalancing)
	}
	failing.Store(false)
	waitFor(t, 10*time.Second, "a new assignment after the loss", func() bool {
		m, _ := a.rec.counts()
		return m > n && a.Active()
	})
}

// TestActiveNeedsARecentHeartbeat: a valid generation that the coordinator
// has not confirmed for a session timeout (the process was paused) is not
// Active, before any heartbeat has told the member so.
func TestActiveNeedsARecentHeartbeat(t *testing.T) {
	m, err := New(Config{Brokers: []string{"127.0.0.1:1"}, GroupID: "g", InstanceID: "i", Topics: testTopicSet, Handler: &recorder{}, SessionTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		valid   bool
		joining bool // a JoinGroup or SyncGroup of the member is in flight
		ago     time.Duration
		want    bool
	}{
		{true, false, 0, true},
		{true, false, 900 * time.Millisecond, true},
		{true, false, 1100 * time.Millisecond, false},
		{false, false, 0, false},
		{true, true, 5 * time.Second, true},   // within the rebalance timeout (30s)
		{true, true, 31 * time.Second, false}, // past it: the JoinGroup never reached the coordinator
		{false, true, 0, false},
	} {
		m.mu.Lock()
		m.live, m.joining, m.lastAlive = c.valid, c.joining, time.Now().Add(-c.ago)
		m.mu.Unlock()
		if got := m.Active(); got != c.want {
			t.Errorf("valid %v, joining %v, confirmed %v ago: Active = %v, want %v", c.valid, c.joining, c.ago, got, c.want)
		}
	}
}

// A member that the coordinator already dropped (LeaveGroup answers
// UNKNOWN_MEMBER_ID) stops without an error: it is out of the group, as
// leaving wants. Another LeaveGroup error is still returned.
func TestLeaveAfterTheCoordinatorDroppedTheMember(t *testing.T) {
	for _, tc := range []struct {
		code    int16
		wantErr bool
	}{
		{kerr.UnknownMemberID.Code, false},
		{kerr.FencedInstanceID.Code, true},
	} {
		t.Run(kerr.ErrorForCode(tc.code).Error(), func(t *testing.T) {
			c := startCluster(t, 1)
			a := startMember(t, c.ListenAddrs(), "a", nil)
			stableTasks(t, a)
			c.ControlKey(int16(kmsg.LeaveGroup), func(req kmsg.Request) (kmsg.Response, error, bool) {
				resp := req.(*kmsg.LeaveGroupRequest).ResponseKind().(*kmsg.LeaveGroupResponse)
				resp.ErrorCode = tc.code
				return resp, nil, true
			})
			a.cancel()
			var err error
			select {
			case err = <-a.done:
				a.done <- err // for the cleanup
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return")
			}
			if (err != nil) != tc.wantErr {
				t.Errorf("Run returned %v; want an error: %v", err, tc.wantErr)
			}
		})
	}
}

// TestSlowAssignedKeepsTheSession: an Assigned that takes three session
// timeouts (a worker opening thousands of task stores) keeps the
// membership: heartbeats go on while it runs, so the member is neither
// dropped nor told its tasks are lost, and its generation stays.
func TestSlowAssignedKeepsTheSession(t *testing.T) {
	addrs := newCluster(t)
	var slow atomic.Bool
	slow.Store(true)
	m := startMember(t, addrs, "w1", nil)
	m.rec.mu.Lock()
	m.rec.onAssigned = func(ctx context.Context, a Assignment) {
		if slow.CompareAndSwap(true, false) {
			select {
			case <-time.After(3 * m.cfg.SessionTimeout):
			case <-ctx.Done():
			}
		}
	}
	m.rec.mu.Unlock()
	waitFor(t, 20*time.Second, "the slow first assignment", func() bool { n, _ := m.rec.counts(); return n >= 1 })
	first, _ := m.Current()
	time.Sleep(2 * m.cfg.SessionTimeout)
	m.rec.mu.Lock()
	lost := slices.Clone(m.rec.lost)
	assigned := len(m.rec.assigned)
	m.rec.mu.Unlock()
	if len(lost) > 0 {
		t.Errorf("the member lost its tasks after a slow Assigned: %v", lost)
	}
	if now, _ := m.Current(); now.Generation != first.Generation || assigned != 1 {
		t.Errorf("generation %d and %d assignments two session timeouts after the slow Assigned; want generation %d and 1", now.Generation, assigned, first.Generation)
	}
	if !m.Active() {
		t.Error("the member is not Active after the slow Assigned")
	}
}
