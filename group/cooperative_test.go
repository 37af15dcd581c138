package group

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/copartition"
	"github.com/joiner-dev/joiner/record"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// assignmentsOf returns a copy of every assignment a member received.
func assignmentsOf(m *testMember) []Assignment {
	m.rec.mu.Lock()
	defer m.rec.mu.Unlock()
	return slices.Clone(m.rec.assigned)
}

// checkCooperative checks the cooperative handover over every assignment
// the members received since from[id] (an index into their assignments):
// no task is in two members' assignments of one generation; a task that a
// member had at the start and still has at the end is in every one of its
// assignments; a task that moved from Y to X reaches X only in a
// generation after the one in which Y's assignment first lacked it. It
// returns the moved tasks.
func checkCooperative(t *testing.T, ms []*testMember, from map[string]int, before, after map[string][]int) map[int][2]string {
	t.Helper()
	byGen := map[int32]map[int]string{}
	firstLacks := map[string]map[int]int32{} // member -> task -> first generation lacking it
	firstHas := map[string]map[int]int32{}
	for _, m := range ms {
		firstLacks[m.id], firstHas[m.id] = map[int]int32{}, map[int]int32{}
		for _, a := range assignmentsOf(m)[from[m.id]:] {
			if byGen[a.Generation] == nil {
				byGen[a.Generation] = map[int]string{}
			}
			tasks := a.Topics[m.topics[0]]
			if !slices.Equal(tasks, a.Topics[m.topics[1]]) {
				t.Errorf("%s generation %d: %s %v, %s %v", m.id, a.Generation, m.topics[0], tasks, m.topics[1], a.Topics[m.topics[1]])
			}
			for _, p := range tasks {
				if o, dup := byGen[a.Generation][p]; dup {
					t.Errorf("generation %d: task %d assigned to %s and %s", a.Generation, p, o, m.id)
				}
				byGen[a.Generation][p] = m.id
				if _, ok := firstHas[m.id][p]; !ok {
					firstHas[m.id][p] = a.Generation
				}
			}
			for p := range testPartitions {
				if _, ok := firstLacks[m.id][p]; !ok && !slices.Contains(tasks, p) {
					firstLacks[m.id][p] = a.Generation
				}
			}
			for _, p := range before[m.id] {
				if slices.Contains(after[m.id], p) && !slices.Contains(tasks, p) {
					t.Errorf("%s generation %d: task %d, kept from %v to %v, is missing (paused)", m.id, a.Generation, p, before[m.id], after[m.id])
				}
			}
		}
	}
	moved := map[int][2]string{}
	for y, ts := range before {
		for _, p := range ts {
			for x, final := range after {
				if x == y || !slices.Contains(final, p) {
					continue
				}
				moved[p] = [2]string{y, x}
				gy, gx := firstLacks[y][p], firstHas[x][p]
				if gx <= gy {
					t.Errorf("task %d moved from %s to %s: %s got it in generation %d, %s gave it up in generation %d", p, y, x, x, gx, y, gy)
				}
			}
		}
	}
	return moved
}

// TestCooperativeScaleOut: 3 members and a 4th joins. Tasks that stay keep
// running (in every assignment); each moved task is revoked from its old
// owner first and reaches its new owner in the follow-up generation; the
// group converges to the plan copartition makes in one step.
func TestCooperativeScaleOut(t *testing.T) {
	for _, k := range []int{0, 1} {
		t.Run(map[int]string{0: "no standbys", 1: "one standby"}[k], func(t *testing.T) {
			cooperativeScaleOut(t, newCluster(t), nil, k)
		})
	}
}

// cooperativeScaleOut runs the scale-out on the brokers at addrs; edit, when
// set, adjusts each member's config (topics, group) first.
func cooperativeScaleOut(t *testing.T, addrs []string, edit func(*Config), standbys int) {
	cfg := func(c *Config) {
		if edit != nil {
			edit(c)
		}
		c.Standbys = standbys
	}
	var ms []*testMember
	for _, id := range []string{"pod-a", "pod-b", "pod-c"} {
		ms = append(ms, startMember(t, addrs, id, cfg))
	}
	before, _ := stableTasks(t, ms...)
	// Quiet: no generation starts after this one until pod-d joins.
	time.Sleep(300 * time.Millisecond)
	before, as := stableTasks(t, ms...)
	gen := as[0].Generation
	from := map[string]int{}
	for _, m := range ms {
		from[m.id] = len(assignmentsOf(m))
	}
	ms = append(ms, startMember(t, addrs, "pod-d", cfg))
	from["pod-d"] = 0
	after, as := stableTasks(t, ms...)
	copies := map[int][]string{}
	for i, a := range as {
		for _, p := range a.Standby {
			if slices.Contains(a.Topics[ms[i].topics[0]], p) {
				t.Errorf("%s: standby of its own task %d", ms[i].id, p)
			}
			copies[p] = append(copies[p], ms[i].id)
		}
		if len(a.Warmup) != 0 {
			t.Errorf("%s: warm-ups %v without lags", ms[i].id, a.Warmup)
		}
	}
	for p := range testPartitions {
		if len(copies[p]) != standbys {
			t.Errorf("task %d has standbys %v, want %d", p, copies[p], standbys)
		}
	}
	want, err := copartition.Assign(testPartitions, []string{"pod-a", "pod-b", "pod-c", "pod-d"}, before)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(after, want.Assignment) {
		t.Errorf("converged to %v, copartition plans %v from %v", after, want.Assignment, before)
	}
	moved := checkCooperative(t, ms, from, before, after)
	if len(moved) != want.Moved || len(moved) == 0 {
		t.Errorf("moved %v, copartition moves %d", moved, want.Moved)
	}
	if n := as[0].Generation - gen; n < 2 {
		t.Errorf("converged in %d generation(s), want the two phases", n)
	}
	// The old owner's assignment without a moved task shows it withheld:
	// no owner in the owner map. (The new member may miss that
	// generation: its SyncGroup can lose the race with the old owner's
	// rejoin, and then it just rejoins.)
	for p, yx := range moved {
		for _, m := range ms {
			if m.id != yx[0] {
				continue
			}
			for _, a := range assignmentsOf(m)[from[m.id]:] {
				if !slices.Contains(a.Topics[m.topics[0]], p) {
					if a.Owners[p] != (Owner{}) {
						t.Errorf("generation %d: task %d left %s for %v at once: not withheld", a.Generation, p, m.id, a.Owners[p])
					}
					break
				}
			}
		}
	}
	// How long each moved task had no owner: from the old owner's
	// Assigned without it (which stopped it) to the new owner's with it.
	gaps := map[int]time.Duration{}
	for p, yx := range moved {
		var stopped, started time.Time
		for _, m := range ms {
			m.rec.mu.Lock()
			for i, a := range m.rec.assigned {
				has := slices.Contains(a.Topics[m.topics[0]], p)
				switch {
				case m.id == yx[0] && !has && stopped.IsZero() && i >= from[m.id]:
					stopped = m.rec.assignedAt[i]
				case m.id == yx[1] && has && started.IsZero():
					started = m.rec.assignedAt[i]
				}
			}
			m.rec.mu.Unlock()
		}
		gaps[p] = started.Sub(stopped).Round(time.Millisecond)
	}
	t.Logf("%v -> %v in generations %d..%d; moved %v; handover gaps %v (heartbeat interval 50ms)", before, after, gen, as[0].Generation, moved, gaps)
}

// A member whose task was revoked stops it inside Assigned and commits with
// the new generation (valid by then).
func TestRevokedTaskCommitsInAssigned(t *testing.T) {
	addrs := newCluster(t)
	a := startMember(t, addrs, "pod-a", nil)
	stableTasks(t, a)
	var commitErr error
	var revokedSeen []int
	done := make(chan struct{})
	a.rec.mu.Lock()
	a.rec.onAssigned = func(ctx context.Context, as Assignment) {
		if len(as.Topics["market"]) == testPartitions || revokedSeen != nil {
			return
		}
		for p := range testPartitions {
			if !slices.Contains(as.Topics["market"], p) {
				revokedSeen = append(revokedSeen, p)
			}
		}
		commitErr = a.Commit(ctx, map[string]map[int]int64{"market": {revokedSeen[0]: 5}})
		close(done)
	}
	a.rec.mu.Unlock()
	b := startMember(t, addrs, "pod-b", nil)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("pod-a was never assigned fewer tasks")
	}
	if commitErr != nil {
		t.Errorf("commit of revoked task %d inside Assigned: %v", revokedSeen[0], commitErr)
	}
	tasks, _ := stableTasks(t, a, b)
	if !slices.Equal(tasks["pod-b"], revokedSeen) {
		t.Errorf("pod-b got %v, pod-a gave up %v", tasks["pod-b"], revokedSeen)
	}
	got, err := b.FetchOffsets(context.Background(), "market", revokedSeen[:1])
	if err != nil || got[revokedSeen[0]] != 5 {
		t.Errorf("offset of the revoked task: %v, %v; want 5", got, err)
	}
}

// The leader of a plan with warm-ups rejoins after the probing interval;
// once the warm-up copies have caught up, the probing rebalance moves their
// tasks.
func TestProbingRebalance(t *testing.T) {
	probingRebalance(t, newCluster(t), nil)
}

// probingRebalance runs on the brokers at addrs; edit, when set, adjusts
// each member's config (topics, group) first.
func probingRebalance(t *testing.T, addrs []string, edit func(*Config)) {
	// 20 records in every partition of the state topic: a member with no
	// copy is 20 behind, more than the acceptable 10.
	cfg := Config{Topics: testTopicSet}
	if edit != nil {
		edit(&cfg)
	}
	produceTo(t, addrs, cfg.Topics.Market, []int{0, 1, 2, 3, 4, 5}, 20)
	var mu sync.Mutex
	held := map[string]map[int]int64{
		// pod-a runs everything and holds every store at the end (lag 0).
		"pod-a": {0: 20, 1: 20, 2: 20, 3: 20, 4: 20, 5: 20},
	}
	ha := func(id string) func(*Config) {
		return func(cfg *Config) {
			if edit != nil {
				edit(cfg)
			}
			cfg.MaxWarmupReplicas = 2
			cfg.AcceptableRecoveryLag = 10
			cfg.ProbingRebalanceInterval = 300 * time.Millisecond
			cfg.Held = func() map[int]int64 {
				mu.Lock()
				defer mu.Unlock()
				return maps.Clone(held[id])
			}
		}
	}
	a := startMember(t, addrs, "pod-a", ha("pod-a"))
	stableTasks(t, a)
	// pod-b holds no copy: balance would move 3 tasks to it; with
	// warm-ups they stay on pod-a, and 2 of them are warmed up on pod-b.
	b := startMember(t, addrs, "pod-b", ha("pod-b"))
	var warm []int
	waitFor(t, 10*time.Second, "warm-ups on pod-b", func() bool {
		cur, ok := b.Current()
		warm = cur.Warmup
		return ok && len(cur.Warmup) == 2 && slices.Equal(cur.Standby, cur.Warmup)
	})
	cur, _ := b.Current()
	if len(cur.Topics[b.topics[0]]) != 0 {
		t.Errorf("pod-b got tasks %v before its copies caught up", cur.Topics[b.topics[0]])
	}
	if la, _ := a.Current(); !la.Leader {
		t.Fatalf("pod-a does not lead generation %d", la.Generation)
	}
	// While nothing changes, the leader probes every 300ms.
	gen := cur.Generation
	waitFor(t, 5*time.Second, "a probing rebalance", func() bool {
		cur, _ := b.Current()
		return cur.Generation >= gen+2
	})
	// pod-b's warm-up copies catch up: the next probe moves their tasks
	// (through the cooperative handover), and a later one the last task.
	mu.Lock()
	held["pod-b"] = map[int]int64{warm[0]: 20, warm[1]: 20}
	mu.Unlock()
	waitFor(t, 10*time.Second, "the warmed-up tasks on pod-b", func() bool {
		cur, _ := b.Current()
		tasks := cur.Topics[b.topics[0]]
		return len(tasks) >= 2 && slices.Contains(tasks, warm[0]) && slices.Contains(tasks, warm[1])
	})
	mu.Lock()
	held["pod-b"] = map[int]int64{0: 20, 1: 20, 2: 20, 3: 20, 4: 20, 5: 20}
	mu.Unlock()
	tasks, _ := stableTasks(t, a, b)
	waitFor(t, 10*time.Second, "a balanced plan", func() bool {
		tasks, _ = stableTasks(t, a, b)
		return len(tasks["pod-a"]) == 3 && len(tasks["pod-b"]) == 3
	})
	t.Logf("warm-ups %v; final %v", warm, tasks)
}

// Tasks keep running through Rebalancing; when the rejoin finds the
// membership gone (UNKNOWN_MEMBER_ID), Lost is called, Active turns false
// and the member joins again as a new member.
func TestRejoinFindsMembershipLost(t *testing.T) {
	c := startCluster(t, 1)
	a := startMember(t, c.ListenAddrs(), "pod-a", nil)
	stableTasks(t, a)
	var activeInRebalancing, activeInLost atomic.Bool
	lost := make(chan error, 1)
	a.rec.setOnRebalancing(func(context.Context) { activeInRebalancing.Store(a.Active()) })
	a.rec.mu.Lock()
	a.rec.onLost = func(_ context.Context, err error) {
		activeInLost.Store(a.Active())
		lost <- err
	}
	a.rec.mu.Unlock()
	var injected atomic.Bool
	c.ControlKey(int16(kmsg.JoinGroup), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		jr := req.(*kmsg.JoinGroupRequest)
		if jr.InstanceID == nil || *jr.InstanceID != "pod-a" || jr.MemberID == "" || !injected.CompareAndSwap(false, true) {
			return nil, nil, false
		}
		resp := jr.ResponseKind().(*kmsg.JoinGroupResponse)
		resp.ErrorCode = kerr.UnknownMemberID.Code
		return resp, nil, true
	})
	n, _ := a.rec.counts()
	startMember(t, c.ListenAddrs(), "pod-b", nil)
	select {
	case err := <-lost:
		if !errors.Is(err, kafka.UnknownMemberId) {
			t.Errorf("Lost(%v), want UNKNOWN_MEMBER_ID", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Lost was not called after the rejoin failed")
	}
	if !activeInRebalancing.Load() || activeInLost.Load() {
		t.Errorf("Active in Rebalancing %v, in Lost %v; want true, false", activeInRebalancing.Load(), activeInLost.Load())
	}
	if _, r := a.rec.counts(); r != 1 {
		t.Errorf("Rebalancing called %d times, want once before Lost", r)
	}
	waitFor(t, 10*time.Second, "a new assignment after the loss", func() bool {
		m, _ := a.rec.counts()
		return m > n && a.Active()
	})
}

// The leader reads the state topic's end offsets and computes each copy's
// lag from the held offsets; when it cannot read them it plans without
// lags.
func TestLeaderComputesLagsFromEndOffsets(t *testing.T) {
	for _, failing := range []bool{false, true} {
		t.Run(map[bool]string{false: "end offsets", true: "ListOffsets fails"}[failing], func(t *testing.T) {
			c := startCluster(t, 1)
			if failing {
				c.ControlKey(int16(kmsg.ListOffsets), func(kmsg.Request) (kmsg.Response, error, bool) {
					c.KeepControl()
					return nil, errors.New("injected: no offsets"), true
				})
			}
			leaderComputesLags(t, c.ListenAddrs(), testTopicSet, "joiner", failing)
		})
	}
}

// leaderComputesLags produces 20 records to partitions 3 and 4 of the
// state topic and checks the plan for two members with the given copies;
// noLags: the leader cannot read the end offsets.
func leaderComputesLags(t *testing.T, addrs []string, topics record.Topics, groupID string, noLags bool) {
	produceTo(t, addrs, topics.Market, []int{3, 4}, 20)
	ha := func(held map[int]int64) func(*Config) {
		return func(cfg *Config) {
			cfg.Topics, cfg.GroupID = topics, groupID
			cfg.MaxWarmupReplicas, cfg.AcceptableRecoveryLag = 2, 5
			cfg.Held = func() map[int]int64 { return maps.Clone(held) }
		}
	}
	a := startMember(t, addrs, "pod-a", ha(map[int]int64{0: 0, 1: 0, 2: 0, 3: 20, 4: 20, 5: 0}))
	stableTasks(t, a)
	// pod-b: a caught-up copy of 3 (lag 0), a copy of 4 that is 20
	// records behind, nothing of 5.
	b := startMember(t, addrs, "pod-b", ha(map[int]int64{3: 20, 4: 0}))
	tasks, _ := stableTasks(t, a, b)
	cur, _ := b.Current()
	if noLags {
		// No lags: exactly copartition.Assign.
		if !slices.Equal(tasks["pod-b"], []int{3, 4, 5}) || cur.Warmup != nil {
			t.Errorf("pod-b has %v, warm-ups %v; want [3 4 5] and none", tasks["pod-b"], cur.Warmup)
		}
		return
	}
	// 5 is empty: pod-b, with no copy, is 0 records behind, caught up.
	if !slices.Equal(tasks["pod-b"], []int{3, 5}) || !slices.Equal(cur.Warmup, []int{4}) {
		t.Errorf("pod-b has %v, warm-ups %v; want [3 5] (caught up, and an empty partition) and [4]", tasks["pod-b"], cur.Warmup)
	}
}

// produceTo writes n records to each of partitions of topic.
func produceTo(t *testing.T, addrs []string, topic string, partitions []int, n int) {
	t.Helper()
	client := &kafka.Client{Addr: kafka.TCP(addrs...), Timeout: 5 * time.Second}
	recs := make([]kafka.Record, n)
	for i := range recs {
		recs[i] = kafka.Record{Value: kafka.NewBytes([]byte("tick"))}
	}
	for _, p := range partitions {
		// A fresh topic on a real broker may answer NOT_LEADER for a
		// moment.
		waitFor(t, 10*time.Second, fmt.Sprintf("%d records produced to %s-%d", n, topic, p), func() bool {
			resp, err := client.Produce(context.Background(), &kafka.ProduceRequest{Topic: topic, Partition: p,
				RequiredAcks: kafka.RequireAll, Records: kafka.NewRecordReader(recs...)})
			return err == nil && resp.Error == nil
		})
	}
}
