package join

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/group"
	"github.com/joiner-dev/joiner/record"
	"github.com/segmentio/kafka-go"
)

// movedSymbol returns a symbol whose task among from partitions differs
// from its task among to.
func movedSymbol(t *testing.T, from, to int) string {
	t.Helper()
	for i := range 1000 {
		s := "M" + string(rune('A'+i%26)) + string(rune('A'+i/26))
		if SymbolTask(s, from) != SymbolTask(s, to) {
			return s
		}
	}
	t.Fatal("no moved symbol")
	return ""
}

// TestLookupAcrossPartitionChange: both topics go from 2 to 3 partitions.
// A moved symbol's history before the change is in its old task's store,
// its later ticks in its new task's: each notification after the change
// gets the newest of the two as-of versions, whichever store holds it; and
// a worker restarted on the same state dir still knows the old count.
func TestLookupAcrossPartitionChange(t *testing.T) {
	r := newFakeRig(t)
	s := movedSymbol(t, 2, 3)
	oldP, newP := SymbolTask(s, 2), SymbolTask(s, 3)
	r.f.produce("market", oldP, 1000, s, tickJSON(s, 1))
	r.f.produce("market", oldP, 3000, s, tickJSON(s, 3)) // a producer that still used the old count
	r.w.Assigned(context.Background(), allTasks(1, 2))
	waitFor(t, "the tasks restored", func() bool { st := r.w.stateTask(oldP); return st != nil && st.isRestored() })
	r.w.Assigned(context.Background(), allTasks(2, 3))
	r.f.produce("market", newP, 2000, s, tickJSON(s, 2))
	for _, n := range []struct {
		id string
		ts int64
	}{{"before-new", 1500}, {"after-new", 2500}, {"after-old", 3500}} {
		r.f.produce("notifications", newP, n.ts, s, noteJSON(n.id, s))
	}
	waitFor(t, "3 alerts", func() bool { return len(r.out.byTopic("alerts")) == 3 })
	want := map[string]float64{"before-new": 1, "after-new": 2, "after-old": 3}
	for _, m := range r.out.byTopic("alerts") {
		var a record.Alert
		if err := json.Unmarshal(m.Value, &a); err != nil {
			t.Fatal(err)
		}
		if a.Price == nil || *a.Price != want[a.ID] || a.Result != record.ResultLocal {
			t.Errorf("alert %s: want local price %v", m.Value, want[a.ID])
		}
	}
	if n := counterValue(r.w.metrics.PartitionChanges); n != 1 {
		t.Errorf("joiner_partition_changes_total = %d, want 1", n)
	}
	// A restart on the same state dirs knows the old count.
	w2, err := NewProcessor(Config{Client: r.f, Writer: r.out, Stores: r.w.cfg.Stores, InstanceID: "w2", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if parts, past := w2.lastParts, w2.pastParts; parts != 3 || !slices.Equal(past, []int{2}) {
		t.Errorf("after a restart: last count %d, past %v; want 3 and [2]", parts, past)
	}
}

// metaFetcher is a fakeFetcher with partition counts (Metadata), as a
// *kafka.Client has.
type metaFetcher struct {
	*fakeFetcher
	mu     sync.Mutex
	counts int
	market int // the market's count when set, else counts
}

func (f *metaFetcher) setCount(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts = n
}

func (f *metaFetcher) Metadata(_ context.Context, req *kafka.MetadataRequest) (*kafka.MetadataResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	res := &kafka.MetadataResponse{}
	for _, name := range req.Topics {
		res.Topics = append(res.Topics, kafka.Topic{Name: name, Partitions: make([]kafka.Partition, f.counts)})
	}
	return res, nil
}

// PartitionCounts reads the same counts, as a broker would uncached
// (planconfirm.go).
func (f *metaFetcher) PartitionCounts(_ context.Context, topics ...string) (map[string]int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for _, t := range topics {
		out[t] = f.counts
		if t == "market" && f.market > 0 {
			out[t] = f.market
		}
	}
	return out, nil
}

// TestJoinsWaitForTheReplan: both topics grew from 2 to 3 partitions and
// producers switched one by one: a tick of a moved symbol was written with
// the new count (to its new partition) before a notification of it
// written with the old one. Looked up under the old count alone, the
// notification would get the older price; seen the growth, the worker
// joins nothing until the group replans, then the exact price.
func TestJoinsWaitForTheReplan(t *testing.T) {
	var mf *metaFetcher
	r := newFakeRig(t, func(c *Config) {
		mf = &metaFetcher{fakeFetcher: c.Client.(*fakeFetcher), counts: 2}
		c.Client = mf
		c.StallTimeout = 200 * time.Millisecond // the growth is checked every 50ms
	})
	s := movedSymbol(t, 2, 3)
	oldP, newP := SymbolTask(s, 2), SymbolTask(s, 3)
	r.f.produce("market", oldP, 1000, s, tickJSON(s, 1))
	r.w.Assigned(context.Background(), allTasks(1, 2))
	waitFor(t, "the tasks restored", func() bool { st := r.w.stateTask(oldP); return st != nil && st.isRestored() })
	mf.setCount(3)
	waitFor(t, "the growth seen", func() bool { return r.w.repartitioning(2) })
	r.f.produce("market", newP, 2000, s, tickJSON(s, 2))
	r.f.produce("notifications", oldP, 2500, s, noteJSON("n", s))
	time.Sleep(200 * time.Millisecond)
	if n := len(r.out.byTopic("alerts")); n != 0 {
		t.Fatalf("%d alerts joined before the replan", n)
	}
	replanGetsTheNewTick(t, r)
}

// allTasks is generation gen's assignment of every one of n tasks, merged.
func allTasks(gen int32, n int) group.Assignment {
	ps := make([]int, n)
	for i := range ps {
		ps[i] = i
	}
	a := assignment(gen, ps, ps)
	a.Partitions = n
	return a
}

// TestPastCountsFromTheGroup: a worker on new state dirs (no recorded
// counts) learns the counts planned before from the group's assignment
// (group.Assignment.PastPartitions), looks a moved symbol up in its task
// under them, and records them.
func TestPastCountsFromTheGroup(t *testing.T) {
	r := newFakeRig(t)
	s := movedSymbol(t, 2, 3)
	oldP, newP := SymbolTask(s, 2), SymbolTask(s, 3)
	r.f.produce("market", oldP, 1000, s, tickJSON(s, 7))
	a := allTasks(1, 3)
	a.PastPartitions = []int{2}
	r.w.Assigned(context.Background(), a)
	r.f.produce("notifications", newP, 2000, s, noteJSON("n", s))
	waitFor(t, "the alert", func() bool { return len(r.out.byTopic("alerts")) == 1 })
	var al record.Alert
	if err := json.Unmarshal(r.out.byTopic("alerts")[0].Value, &al); err != nil {
		t.Fatal(err)
	}
	if al.Price == nil || *al.Price != 7 || al.PriceTsMs != 1000 {
		t.Errorf("alert %s: want the price 7 from 1000, in task %d under the past count 2", r.out.byTopic("alerts")[0].Value, oldP)
	}
	if got := r.w.PlannedPartitions(); !slices.Equal(got, []int{2, 3}) {
		t.Errorf("planned %v, want [2 3]", got)
	}
	if got, err := r.w.cfg.Stores.PartitionCounts(); err != nil || !slices.Equal(got, []int{2, 3}) {
		t.Errorf("recorded %v (%v), want [2 3]", got, err)
	}
	if n := counterValue(r.w.metrics.PartitionChanges); n != 0 {
		t.Errorf("joiner_partition_changes_total = %d, want 0 (this worker planned no change)", n)
	}
	// A change this worker sees, while the group's history names its
	// last count too (as every member reports it): counted once.
	a = allTasks(2, 4)
	a.PastPartitions = []int{2, 3}
	r.w.Assigned(context.Background(), a)
	if n := counterValue(r.w.metrics.PartitionChanges); n != 1 {
		t.Errorf("after 3 to 4: joiner_partition_changes_total = %d, want 1", n)
	}
	if got := r.w.PlannedPartitions(); !slices.Equal(got, []int{2, 3, 4}) {
		t.Errorf("planned %v, want [2 3 4]", got)
	}
}

// TestMarketGrownAloneHoldsJoins: the market topic went from 2 to 3
// partitions alone, and a tick producer on the new count wrote a moved
// symbol's tick where no task under 2 reads. No join until the
// notifications topic has 3 partitions too and the group replans; then
// the notification gets that tick's price.
func TestMarketGrownAloneHoldsJoins(t *testing.T) {
	var mf *metaFetcher
	r := newFakeRig(t, func(c *Config) {
		mf = &metaFetcher{fakeFetcher: c.Client.(*fakeFetcher), counts: 2}
		c.Client = mf
	})
	s := movedSymbol(t, 2, 3)
	oldP, newP := SymbolTask(s, 2), SymbolTask(s, 3)
	r.f.produce("market", oldP, 1000, s, tickJSON(s, 1))
	r.w.Assigned(context.Background(), allTasks(1, 2))
	waitFor(t, "the tasks restored", func() bool { st := r.w.stateTask(oldP); return st != nil && st.isRestored() })
	mf.mu.Lock()
	mf.market = 3
	mf.mu.Unlock()
	r.f.produce("market", newP, 2000, s, tickJSON(s, 2))
	r.f.produce("notifications", oldP, 2500, s, noteJSON("n", s))
	time.Sleep(300 * time.Millisecond)
	if n := len(r.out.byTopic("alerts")); n != 0 {
		t.Fatalf("%d alerts joined while the market alone had grown: %s", n, r.out.byTopic("alerts")[0].Value)
	}
	if v := gaugeValue(t, r.w.metrics.PartitionsAhead); v != 1 {
		t.Errorf("joiner_market_partitions_ahead = %v while held, want 1", v)
	}
	mf.setCount(3)
	replanGetsTheNewTick(t, r)
	if v := gaugeValue(t, r.w.metrics.PartitionsAhead); v != 0 {
		t.Errorf("joiner_market_partitions_ahead = %v after the replan, want 0", v)
	}
}

// replanGetsTheNewTick replans r's worker with 3 tasks and checks that
// the one notification held is then joined with the price 2 from 2000,
// the tick written with the new count.
func replanGetsTheNewTick(t *testing.T, r *fakeRig) {
	t.Helper()
	r.w.Assigned(context.Background(), allTasks(2, 3))
	waitFor(t, "the alert", func() bool { return len(r.out.byTopic("alerts")) == 1 })
	var a record.Alert
	if err := json.Unmarshal(r.out.byTopic("alerts")[0].Value, &a); err != nil {
		t.Fatal(err)
	}
	if a.Price == nil || *a.Price != 2 || a.PriceTsMs != 2000 {
		t.Errorf("alert %s: want the price 2 from 2000, written with the new count", r.out.byTopic("alerts")[0].Value)
	}
}

// TestConfirmationWaitsForTheGrace: with a grace, the partition counts
// must be confirmed by a read sent at least the grace after the
// notification's time by the clock (a tick up to the grace late may be
// written after the notification, with a new count), whatever else let
// the notification go.
func TestConfirmationWaitsForTheGrace(t *testing.T) {
	const grace = 300 * time.Millisecond
	r := newFakeRig(t, func(c *Config) {
		c.Client = &metaFetcher{fakeFetcher: c.Client.(*fakeFetcher), counts: 2}
		c.Grace = grace
	})
	r.w.Assigned(context.Background(), allTasks(1, 2))
	procTask := func(p int) *processTask {
		r.w.mu.RLock()
		defer r.w.mu.RUnlock()
		return r.w.procs[p]
	}
	waitFor(t, "task 0 processing", func() bool { return procTask(0) != nil })
	r.f.produce("notifications", 0, 1000, "X", noteJSON("n", "X")) // offset 0, for the end offset
	ts := time.UnixMilli(time.Now().UnixMilli())                   // record timestamps are in ms
	if err := r.w.confirmPlan(context.Background(), 2, 0, 0, ts.UnixMilli()); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(ts); d < grace {
		t.Errorf("confirmed %v after the notification's time, before the grace (%v) was over", d, grace)
	}
	// Without a grace, the next round confirms it at once.
	r.w.cfg.Grace = 0
	start := time.Now()
	if err := r.w.confirmPlan(context.Background(), 2, 0, 0, time.Now().UnixMilli()); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > grace {
		t.Errorf("without a grace, confirmed after %v", d)
	}
}
