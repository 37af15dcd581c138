package copartition

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// idPool mixes case so that bytewise order differs from case-folded order.
var idPool = []string{"a", "b", "B", "c", "Z", "aa", "a0", "m-1", "m-10", "m-2", "x y"}

type input struct {
	p        int
	members  []string
	previous map[string][]int
}

func randomInput(r *rand.Rand) input {
	in := input{p: 1 + r.IntN(9), previous: map[string][]int{}}
	if r.IntN(4) == 0 {
		in.p = 1 + r.IntN(40)
	}
	ids := slices.Clone(idPool)
	r.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	nm := r.IntN(6)
	in.members = ids[:nm]
	// Claimers: some current members, some that left.
	for _, id := range ids[:nm+r.IntN(3)] {
		if r.IntN(5) == 0 {
			continue
		}
		var tasks []int
		for range r.IntN(in.p/2 + 3) {
			tasks = append(tasks, r.IntN(in.p+2)) // some >= P, some repeated
		}
		in.previous[id] = tasks
	}
	return in
}

// shuffled returns the same input with members and every claim list in a
// new order, in a freshly built map.
func (in input) shuffled(r *rand.Rand) input {
	out := input{p: in.p, members: slices.Clone(in.members), previous: map[string][]int{}}
	r.Shuffle(len(out.members), func(i, j int) { out.members[i], out.members[j] = out.members[j], out.members[i] })
	for id, tasks := range in.previous {
		tasks = slices.Clone(tasks)
		r.Shuffle(len(tasks), func(i, j int) { tasks[i], tasks[j] = tasks[j], tasks[i] })
		out.previous[id] = tasks
	}
	return out
}

// prevOwner is the test's own reading of previous: the unique claimer of
// each task < P, or "" with ok false.
func prevOwner(in input) (owner []string, ok []bool) {
	claimers := make([]map[string]bool, in.p)
	for id, tasks := range in.previous {
		for _, t := range tasks {
			if t < in.p {
				if claimers[t] == nil {
					claimers[t] = map[string]bool{}
				}
				claimers[t][id] = true
			}
		}
	}
	owner, ok = make([]string, in.p), make([]bool, in.p)
	for t, c := range claimers {
		if len(c) == 1 {
			for id := range c {
				owner[t], ok[t] = id, true
			}
		}
	}
	return owner, ok
}

// reference follows the sticky co-partition recipe step by step, as literally and as slowly as
// possible: it shares no code with Assign.
func reference(in input) Plan {
	members := slices.Clone(in.members)
	slices.Sort(members)
	plan := Plan{Assignment: map[string][]int{}}
	if len(members) == 0 {
		return plan
	}
	owner, ok := prevOwner(in)
	isMember := map[string]bool{}
	for _, m := range members {
		isMember[m] = true
	}
	have := map[string][]int{}
	var pool []int
	for t := range in.p {
		if ok[t] && isMember[owner[t]] {
			have[owner[t]] = append(have[owner[t]], t)
		} else {
			pool = append(pool, t) // orphan or unowned
		}
	}
	// Targets: extras to the members that own the most, ties to smaller id.
	byLoad := slices.Clone(members)
	slices.SortStableFunc(byLoad, func(a, b string) int { return len(have[b]) - len(have[a]) })
	target := map[string]int{}
	for i, m := range byLoad {
		target[m] = in.p / len(members)
		if i < in.p%len(members) {
			target[m]++
		}
	}
	// Shed highest ids first.
	for _, m := range members {
		for len(have[m]) > target[m] {
			last := have[m][len(have[m])-1]
			have[m] = have[m][:len(have[m])-1]
			pool = append(pool, last)
		}
	}
	slices.Sort(pool)
	// Fill: scan every member for each task.
	for _, t := range pool {
		best := ""
		found := false
		for _, m := range members {
			if len(have[m]) < target[m] && (!found || len(have[m]) < len(have[best])) {
				best, found = m, true
			}
		}
		have[best] = append(have[best], t)
	}
	for _, m := range members {
		tasks := append([]int{}, have[m]...)
		slices.Sort(tasks)
		plan.Assignment[m] = tasks
	}
	for t := range in.p {
		if !ok[t] || !slices.Contains(plan.Assignment[owner[t]], t) {
			plan.Moved++
		}
	}
	return plan
}

// minMoved is the smallest possible number of moved tasks over all balanced
// assignments: a balanced assignment gives every member floor(P/M) or
// floor(P/M)+1 tasks with exactly P mod M of the latter, and member m can
// keep at most min(target, tasks it validly owns) of its own, so the most
// that can stay is the maximum of that sum over every choice of which
// members get the extra one. The choice is brute-forced over bitmasks.
func minMoved(in input) int {
	m := len(in.members)
	if m == 0 {
		return 0
	}
	owner, ok := prevOwner(in)
	valid := make([]int, m)
	for t := range in.p {
		if i := slices.Index(in.members, owner[t]); ok[t] && i >= 0 {
			valid[i]++
		}
	}
	base, extra := in.p/m, in.p%m
	best := 0
	for mask := range 1 << m {
		if bits.OnesCount(uint(mask)) != extra {
			continue
		}
		kept := 0
		for i := range m {
			kept += min(valid[i], base+mask>>i&1)
		}
		best = max(best, kept)
	}
	return in.p - best
}

// exhaustiveMinMoved enumerates every balanced assignment of a tiny input.
func exhaustiveMinMoved(in input) int {
	m := len(in.members)
	if m == 0 {
		return 0
	}
	owner, ok := prevOwner(in)
	best := in.p
	choice := make([]int, in.p)
	var rec func(t int)
	rec = func(t int) {
		if t == in.p {
			count := make([]int, m)
			moved := 0
			for t, i := range choice {
				count[i]++
				if !ok[t] || owner[t] != in.members[i] {
					moved++
				}
			}
			if slices.Max(count)-slices.Min(count) <= 1 {
				best = min(best, moved)
			}
			return
		}
		for i := range m {
			choice[t] = i
			rec(t + 1)
		}
	}
	rec(0)
	return best
}

func checkPlan(t *testing.T, in input, plan Plan) {
	t.Helper()
	if len(plan.Assignment) != len(in.members) {
		t.Fatalf("%v: %d members in plan, want %d", in, len(plan.Assignment), len(in.members))
	}
	if len(in.members) == 0 {
		if plan.Moved != 0 {
			t.Fatalf("%v: empty plan moved %d", in, plan.Moved)
		}
		return
	}
	seen := make([]int, in.p)
	lo, hi := in.p, 0
	got := make([]string, in.p)
	for _, m := range in.members {
		tasks, present := plan.Assignment[m]
		if !present || tasks == nil {
			t.Fatalf("%v: member %q missing or nil", in, m)
		}
		if !slices.IsSorted(tasks) {
			t.Fatalf("%v: %q tasks not ascending: %v", in, m, tasks)
		}
		lo, hi = min(lo, len(tasks)), max(hi, len(tasks))
		for _, task := range tasks {
			seen[task]++
			got[task] = m
		}
	}
	for task, n := range seen {
		if n != 1 {
			t.Fatalf("%v: task %d assigned %d times: %v", in, task, n, plan.Assignment)
		}
	}
	if hi-lo > 1 {
		t.Fatalf("%v: counts range %d..%d: %v", in, lo, hi, plan.Assignment)
	}
	owner, ok := prevOwner(in)
	moved := 0
	for task := range in.p {
		if !ok[task] || owner[task] != got[task] {
			moved++
		}
	}
	if plan.Moved != moved {
		t.Fatalf("%v: Moved = %d, but %d tasks changed owner", in, plan.Moved, moved)
	}
	if want := minMoved(in); plan.Moved != want {
		t.Fatalf("%v: Moved = %d, minimum is %d: %v", in, plan.Moved, want, plan.Assignment)
	}
}

func TestAssignProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 0xad0caf798c368464))
	const n = 12000
	exhaustive := 0
	for range n {
		in := randomInput(r)
		var b strings.Builder
		plan, err := AssignExplain(in.p, in.members, in.previous, &b)
		if err != nil {
			t.Fatalf("%v: %v", in, err)
		}
		checkPlan(t, in, plan)
		if want := reference(in); !reflect.DeepEqual(plan, want) {
			t.Fatalf("%v:\n got %v\nwant %v (reference recipe)", in, plan, want)
		}
		// Input order must not matter, for the plan or the explanation.
		again := in.shuffled(r)
		var b2 strings.Builder
		plan2, err := AssignExplain(again.p, again.members, again.previous, &b2)
		if err != nil || !reflect.DeepEqual(plan, plan2) || b.String() != b2.String() {
			t.Fatalf("%v: result depends on input order:\n%v\n%s\n%v\n%s", in, plan, b.String(), plan2, b2.String())
		}
		if in.p <= 7 && len(in.members) <= 4 {
			exhaustive++
			if want := exhaustiveMinMoved(in); plan.Moved != want {
				t.Fatalf("%v: Moved = %d, exhaustive minimum is %d", in, plan.Moved, want)
			}
		}
	}
	if exhaustive < n/10 {
		t.Errorf("only %d of %d inputs checked exhaustively", exhaustive, n)
	}
}

// The two oracles must agree with each other, or minMoved proves nothing.
func TestOraclesAgree(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	for range 2000 {
		in := randomInput(r)
		if in.p > 7 || len(in.members) > 4 {
			continue
		}
		if a, b := minMoved(in), exhaustiveMinMoved(in); a != b {
			t.Fatalf("%v: closed form %d, exhaustive %d", in, a, b)
		}
	}
}

func (in input) String() string {
	return fmt.Sprintf("P=%d members=%q previous=%v", in.p, in.members, in.previous)
}
