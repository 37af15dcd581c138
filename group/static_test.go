package group

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// static makes a member that stops without LeaveGroup, with a session
// timeout long enough for a restart.
func static(owned func() []int) func(*Config) {
	return func(cfg *Config) {
		cfg.LeaveOnShutdown = false
		cfg.SessionTimeout = 6 * time.Second
		cfg.HeartbeatInterval = 100 * time.Millisecond
		cfg.Owned = owned
	}
}

// A static member that stops and comes back within the session timeout
// takes its place again: no rebalance for the others, the same tasks.
// kfake (like Kafka before KIP-814) rebalances when the leader rejoins, and
// (unlike Kafka) when the rejoining member's subscription bytes differ, so
// the victim is a follower, and it is restarted once first so that its
// last subscription already reports the tasks it holds.
func TestStaticRestartWithoutRebalance(t *testing.T) {
	addrs := newCluster(t)
	held := map[string][]int{}
	var mu sync.Mutex
	owned := func(id string) func() []int {
		return func() []int {
			mu.Lock()
			defer mu.Unlock()
			return held[id]
		}
	}
	ms := map[string]*testMember{}
	for _, id := range []string{"pod-a", "pod-b", "pod-c"} {
		ms[id] = startMember(t, addrs, id, static(owned(id)))
	}
	all := func() []*testMember { return []*testMember{ms["pod-a"], ms["pod-b"], ms["pod-c"]} }
	tasks, _ := stableTasks(t, all()...)
	victim := ""
	for id, m := range ms {
		if a, _ := m.Current(); !a.Leader && (victim == "" || id < victim) {
			victim = id
		}
	}
	restart := func() (time.Duration, map[string][]int, []Assignment) {
		mu.Lock()
		held[victim] = tasks[victim]
		mu.Unlock()
		stopped := time.Now()
		if err := ms[victim].stop(t); err != nil {
			t.Fatalf("static stop: %v", err)
		}
		if d := time.Since(stopped); d > 2*time.Second {
			t.Errorf("static stop took %v", d)
		}
		ms[victim] = startMember(t, addrs, victim, static(owned(victim)))
		tasks, as := stableTasks(t, all()...)
		return time.Since(stopped), tasks, as
	}
	_, tasks, as := restart()
	gen := as[0].Generation
	counts := map[string]int{}
	for id, m := range ms {
		counts[id], _ = m.rec.counts()
	}
	took, after, as := restart()
	t.Logf("%s restarted in %v: generation %d -> %d, tasks %v -> %v", victim, took.Round(time.Millisecond), gen, as[0].Generation, tasks, after)
	if as[0].Generation != gen {
		t.Errorf("generation %d -> %d: the restart caused a rebalance", gen, as[0].Generation)
	}
	for id, ts := range tasks {
		if !slices.Equal(after[id], ts) {
			t.Errorf("%s: tasks %v -> %v", id, ts, after[id])
		}
	}
	for id, m := range ms {
		if n, _ := m.rec.counts(); id != victim && n != counts[id] {
			t.Errorf("%s got %d new assignments", id, n-counts[id])
		}
	}
}

// A static member that stops and does not come back keeps its tasks until
// the session timeout; RemoveMember takes them away at once.
func TestStaticStopAndRemoveMember(t *testing.T) {
	addrs := newCluster(t)
	a := startMember(t, addrs, "pod-a", static(nil))
	b := startMember(t, addrs, "pod-b", static(nil))
	c := startMember(t, addrs, "pod-c", static(nil))
	_, as := stableTasks(t, a, b, c)
	gen := as[0].Generation
	if err := c.stop(t); err != nil {
		t.Fatalf("static stop: %v", err)
	}
	// Ten more heartbeats of each remaining member answered (a second at
	// 100ms): any rebalance would have been reported by one of them.
	ha, hb := a.net.Heartbeats(), b.net.Heartbeats()
	waitFor(t, 5*time.Second, "ten more heartbeats of pod-a and pod-b", func() bool {
		return a.net.Heartbeats() >= ha+10 && b.net.Heartbeats() >= hb+10
	})
	if cur, _ := a.Current(); cur.Generation != gen {
		t.Fatalf("generation %d -> %d after ten heartbeats following a static stop (session timeout 6s)", gen, cur.Generation)
	}
	removed := time.Now()
	client := &kafka.Client{Addr: kafka.TCP(addrs...), Timeout: 5 * time.Second}
	if err := RemoveMember(context.Background(), client, "joiner", "pod-c"); err != nil {
		t.Fatalf("RemoveMember: %v", err)
	}
	tasks, as := stableTasks(t, a, b)
	if d := time.Since(removed); d > 3*time.Second {
		t.Errorf("rebalance took %v after RemoveMember (session timeout 6s)", d)
	}
	if as[0].Generation <= gen || len(tasks["pod-a"])+len(tasks["pod-b"]) != testPartitions {
		t.Errorf("after RemoveMember: generation %d, tasks %v", as[0].Generation, tasks)
	}
	err := RemoveMember(context.Background(), client, "joiner", "pod-c")
	if !errors.Is(err, ErrNoSuchInstance) {
		t.Errorf("removing pod-c again: %v, want ErrNoSuchInstance", err)
	}
}
