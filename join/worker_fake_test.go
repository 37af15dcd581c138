package join

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/group"
	"github.com/joiner-dev/joiner/record"
)

func assignment(gen int32, market, notifications []int) group.Assignment {
	return group.Assignment{Generation: gen, Partitions: 2,
		Topics: map[string][]int{record.DefaultMarketTopic: market, record.DefaultNotificationsTopic: notifications}}
}

// tasks returns the worker's state and process tasks.
func (r *fakeRig) tasks() (map[int]*stateTask, map[int]*processTask) {
	r.w.mu.RLock()
	defer r.w.mu.RUnlock()
	return maps(r.w.states), maps(r.w.procs)
}

func maps[T any](m map[int]T) map[int]T {
	out := make(map[int]T, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// TestAssignedDiff: Assigned keeps the tasks that stay as they were,
// restarts a task that changes between merged and unmerged, stops revoked
// ones and deletes the store of a revoked state task.
func TestAssignedDiff(t *testing.T) {
	r := newFakeRig(t)
	ctx := context.Background()

	// Generation 1: state of 0 and 1, notifications of 0: task 0 merged.
	r.w.Assigned(ctx, assignment(1, []int{0, 1}, []int{0}))
	s1, p1 := r.tasks()
	if len(s1) != 2 || len(p1) != 1 || !s1[0].merged || s1[1].merged || p1[0].st != s1[0] {
		t.Fatalf("generation 1: states %v procs %v", s1, p1)
	}

	// Generation 2: notifications of 1 too: task 1 becomes merged (its
	// state task restarts), task 0 is untouched.
	r.w.Assigned(ctx, assignment(2, []int{0, 1}, []int{0, 1}))
	s2, p2 := r.tasks()
	if s2[0] != s1[0] || p2[0] != p1[0] {
		t.Fatal("generation 2 restarted task 0, which did not change")
	}
	if s2[1] == s1[1] || !s2[1].merged || p2[1] == nil || p2[1].st != s2[1] {
		t.Fatalf("generation 2: task 1 not restarted merged: state %p→%p merged %v, proc %v", s1[1], s2[1], s2[1].merged, p2[1])
	}

	// Generation 3: the state of 0 moves away, its notifications stay:
	// task 0 runs unmerged, its store is deleted; task 1 is untouched.
	r.w.Assigned(ctx, assignment(3, []int{1}, []int{0, 1}))
	s3, p3 := r.tasks()
	if _, ok := s3[0]; ok || p3[0] == p2[0] || p3[0].st != nil {
		t.Fatalf("generation 3: task 0 should run unmerged without state: state %v proc %+v", s3[0], p3[0])
	}
	if s3[1] != s2[1] || p3[1] != p2[1] {
		t.Fatal("generation 3 restarted task 1, which did not change")
	}
	onDisk, err := r.w.cfg.Stores.Tasks()
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(onDisk, 0) || !slices.Contains(onDisk, 1) {
		t.Fatalf("stores on disk after revoking the state of task 0: %v, want 1 only", onDisk)
	}

	// Generation 4: nothing: everything stops.
	r.w.Assigned(ctx, assignment(4, nil, nil))
	if s4, p4 := r.tasks(); len(s4)+len(p4) != 0 {
		t.Fatalf("generation 4: states %v procs %v, want none", s4, p4)
	}
	if st := r.w.Stats(); st.Generation != 4 || len(st.Tasks)+len(st.StateTasks) != 0 {
		t.Fatalf("stats after generation 4: %+v", st)
	}
}

// TestJoinAndCommitOnFakes: a merged task joins every notification with
// the price as of its time, writes the alerts and a dead letter, and the
// commit covers exactly what was written.
func TestJoinAndCommitOnFakes(t *testing.T) { joinAndCommitOnFakes(t, "") }

// joinAndCommitOnFakes is TestJoinAndCommitOnFakes with the restores of
// mode (restoreMode; "": the default).
func joinAndCommitOnFakes(t *testing.T, mode string) {
	r := newFakeRig(t)
	if mode != "" {
		restoreMode(t, &r.w.taskEnv, mode)
	}
	s := symbolOf(t, 0, 2)
	r.f.produce("market", 0, 1000, s, tickJSON(s, 1))
	r.f.produce("market", 0, 2000, s, tickJSON(s, 2))
	r.f.produce("notifications", 0, 1500, s, noteJSON("a", s))
	r.f.produce("notifications", 0, 2500, s, noteJSON("b", s))
	r.f.produce("notifications", 0, 2600, s, `{"id":"bad"}`)
	r.f.produce("notifications", 0, 500, s, noteJSON("early", s))
	r.w.Assigned(context.Background(), assignment(1, []int{0}, []int{0}))

	waitFor(t, "3 alerts and 1 dead letter", func() bool {
		return len(r.out.byTopic("alerts")) == 3 && len(r.out.byTopic(record.DefaultDeadLetterTopic)) == 1
	})
	want := map[string]struct {
		result record.Result
		price  float64
	}{"a": {record.ResultLocal, 1}, "b": {record.ResultLocal, 2}, "early": {record.ResultMiss, 0}}
	for _, m := range r.out.byTopic("alerts") {
		var a record.Alert
		if err := json.Unmarshal(m.Value, &a); err != nil {
			t.Fatal(err)
		}
		w, ok := want[a.ID]
		if !ok || a.Result != w.result || (a.Price != nil) != (w.result != record.ResultMiss) || (a.Price != nil && *a.Price != w.price) || string(m.Key) != s {
			t.Errorf("alert %s: %+v, want %+v", m.Value, a, w)
		}
	}
	// Joins are counted once their write returned, after the writer
	// holds them.
	waitFor(t, "the joins counted", func() bool { st := r.w.Stats(); return st.Local+st.Miss >= 3 })
	if st := r.w.Stats(); st.Local != 2 || st.Miss != 1 {
		t.Errorf("stats %+v, want 2 local and 1 miss", st)
	}

	waitFor(t, "the notifications acknowledged", func() bool { _, procs := r.tasks(); return procs[0].acked.Load() == 4 })
	if err := r.w.commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.member.mu.Lock()
	last := r.member.commits[len(r.member.commits)-1]
	r.member.mu.Unlock()
	if last["notifications"][0] != 4 || last["market"][0] != 2 {
		t.Fatalf("committed %v, want notifications-0 at 4 and market-0 at 2", last)
	}
	// Nothing new: nothing is committed again.
	n := len(r.member.commits)
	if err := r.w.commit(context.Background()); err != nil || len(r.member.commits) != n {
		t.Fatalf("a commit without progress committed again (%v)", err)
	}
}

// TestRevokePauseIsBounded: a batch stuck in flight does not hold a
// rebalance past its context: Assigned gives up waiting for the revoked
// task's batch, stops the task and goes on.
func TestRevokePauseIsBounded(t *testing.T) {
	r := newFakeRig(t)
	r.w.Assigned(context.Background(), assignment(1, nil, []int{1}))
	_, procs := r.tasks()
	g := procs[1].gate
	if err := g.enter(context.Background()); err != nil { // a batch in flight that never finishes
		t.Fatal(err)
	}
	defer g.leave()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	r.w.Assigned(ctx, assignment(2, nil, nil))
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Assigned waited %v for a stuck batch; its context allowed 50ms", d)
	}
	if _, procs := r.tasks(); len(procs) != 0 {
		t.Fatalf("task 1 still held after its revocation: %v", procs)
	}
}

// TestUnmergedTaskAsksTheOwner: a task whose state is held by another
// member joins through that member's /v1/prices (here a stand-in
// server): found, late and 404 answers become remote, late and miss
// alerts; nothing is written while the group has not confirmed the member.
func TestUnmergedTaskAsksTheOwner(t *testing.T) {
	r := newFakeRig(t)
	s := symbolOf(t, 1, 2)
	var asked atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		asked.Add(1)
		at, err := strconv.ParseInt(req.URL.Query().Get("at_ms"), 10, 64)
		if req.URL.Path != "/v1/prices/"+s || err != nil {
			http.Error(rw, "bad request", http.StatusBadRequest)
			return
		}
		switch {
		case at < 1000:
			http.Error(rw, "no price", http.StatusNotFound)
		case at < 2000:
			_ = json.NewEncoder(rw).Encode(Price{Symbol: s, Price: 7, TsMs: 2000, Task: 1, AtMs: &at, Late: true})
		default:
			_ = json.NewEncoder(rw).Encode(Price{Symbol: s, Price: 9, TsMs: 2000, Task: 1, AtMs: &at})
		}
	}))
	defer srv.Close()
	a := assignment(1, nil, []int{1})
	a.Owners = []group.Owner{{InstanceID: "w"}, {InstanceID: "other", Addr: strings.TrimPrefix(srv.URL, "http://")}}
	r.member.inactive.Store(true)
	r.w.Assigned(context.Background(), a)
	r.f.produce("notifications", 1, 500, s, noteJSON("miss", s))
	r.f.produce("notifications", 1, 1500, s, noteJSON("late", s))
	r.f.produce("notifications", 1, 2500, s, noteJSON("remote", s))

	time.Sleep(50 * time.Millisecond) // would be enough to write them, were the member active
	if n := len(r.out.byTopic("alerts")); n != 0 {
		t.Fatalf("%d alerts written while the group had not confirmed the member", n)
	}
	r.member.inactive.Store(false)
	waitFor(t, "3 alerts", func() bool { return len(r.out.byTopic("alerts")) == 3 })
	want := map[string]record.Result{"miss": record.ResultMiss, "late": record.ResultLate, "remote": record.ResultRemote}
	for _, m := range r.out.byTopic("alerts") {
		var al record.Alert
		if err := json.Unmarshal(m.Value, &al); err != nil {
			t.Fatal(err)
		}
		if al.Result != want[al.ID] {
			t.Errorf("alert %s: result %s, want %s", m.Value, al.Result, want[al.ID])
		}
	}
	waitFor(t, "the joins counted", func() bool { st := r.w.Stats(); return st.Remote+st.Late+st.Miss >= 3 })
	if st := r.w.Stats(); st.Remote != 1 || st.Late != 1 || st.Miss != 1 || asked.Load() != 3 {
		t.Errorf("stats %+v after %d lookups, want 1 remote, 1 late, 1 miss from 3", st, asked.Load())
	}
}
