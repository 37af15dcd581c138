package copartition

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// haInput is an input of AssignWith.
type haInput struct {
	input
	opt Options
}

func (in haInput) String() string {
	return fmt.Sprintf("%v standbys=%d prevStandby=%v lags=%v acceptable=%d warmups=%d",
		in.input, in.opt.Standbys, in.opt.PreviousStandby, in.opt.Lags, in.opt.AcceptableRecoveryLag, in.opt.MaxWarmupReplicas)
}

// randomHAInput adds random options to randomInput: standbys, previous
// standbys and lags named by current and departed members, tasks >= P
// among them, and no lag information at all in a quarter of the inputs.
func randomHAInput(r *rand.Rand) haInput {
	in := haInput{input: randomInput(r)}
	in.opt.Standbys = r.IntN(4)
	in.opt.AcceptableRecoveryLag = []int64{0, 5, 100}[r.IntN(3)]
	in.opt.MaxWarmupReplicas = r.IntN(4)
	ids := slices.Clone(idPool)
	r.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	ids = append(slices.Clone(in.members), ids[:2]...)
	if r.IntN(2) == 0 {
		in.opt.PreviousStandby = map[string][]int{}
		for _, id := range ids {
			if r.IntN(2) == 0 {
				for range r.IntN(in.p/2 + 2) {
					in.opt.PreviousStandby[id] = append(in.opt.PreviousStandby[id], r.IntN(in.p+2))
				}
			}
		}
	}
	if r.IntN(4) != 0 {
		in.opt.Lags = map[string]map[int]int64{}
		for _, id := range ids {
			if r.IntN(3) == 0 {
				continue
			}
			lags := map[int]int64{}
			for range r.IntN(in.p + 2) {
				lags[r.IntN(in.p+2)] = []int64{0, 0, 3, 5, 6, 50, 100, 101, 5000}[r.IntN(9)]
			}
			in.opt.Lags[id] = lags
		}
	}
	return in
}

func (in haInput) shuffled(r *rand.Rand) haInput {
	out := haInput{input: in.input.shuffled(r), opt: in.opt}
	if in.opt.PreviousStandby != nil {
		out.opt.PreviousStandby = map[string][]int{}
		for id, tasks := range in.opt.PreviousStandby {
			tasks = slices.Clone(tasks)
			r.Shuffle(len(tasks), func(i, j int) { tasks[i], tasks[j] = tasks[j], tasks[i] })
			out.opt.PreviousStandby[id] = tasks
		}
	}
	if in.opt.Lags != nil {
		out.opt.Lags = map[string]map[int]int64{}
		for id, lags := range in.opt.Lags {
			out.opt.Lags[id] = maps.Clone(lags)
		}
	}
	return out
}

// lagOf is the test's reading of Lags: current members and tasks < P.
func (in haInput) lagOf(id string, t int) (int64, bool) {
	if !slices.Contains(in.members, id) || t >= in.p {
		return 0, false
	}
	lag, ok := in.opt.Lags[id][t]
	return lag, ok
}

func (in haInput) hasLags() bool {
	for id, lags := range in.opt.Lags {
		for t := range lags {
			if _, ok := in.lagOf(id, t); ok {
				return true
			}
		}
	}
	return false
}

func (in haInput) caughtUp(id string, t int) bool {
	lag, ok := in.lagOf(id, t)
	return ok && lag <= in.opt.AcceptableRecoveryLag
}

// haStay is a task that stayed with its previous owner instead of moving
// to member to.
type haStay struct {
	t  int
	to string
	// failover: the task had no current previous owner and went to the
	// holder of its best caught-up copy instead of to (it moved anyway).
	failover bool
}

// referenceHA follows the rules of AssignWith for the active tasks as
// literally as possible, sharing no code with it: the recipe of reference,
// with the lag-aware choice in the fill and the warm-up stays.
func referenceHA(in haInput) (map[string][]int, int, []haStay) {
	members := slices.Sorted(slices.Values(in.members))
	out := map[string][]int{}
	if len(members) == 0 {
		return out, 0, nil
	}
	owner, ok := prevOwner(in.input)
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
			pool = append(pool, t)
		}
	}
	byLoad := slices.Clone(members)
	slices.SortStableFunc(byLoad, func(a, b string) int { return len(have[b]) - len(have[a]) })
	target := map[string]int{}
	for i, m := range byLoad {
		target[m] = in.p / len(members)
		if i < in.p%len(members) {
			target[m]++
		}
	}
	for _, m := range members {
		for len(have[m]) > target[m] {
			pool = append(pool, have[m][len(have[m])-1])
			have[m] = have[m][:len(have[m])-1]
		}
	}
	slices.Sort(pool)
	dest := map[int]string{}
	for _, t := range pool {
		best, found := "", false
		var bestLag int64
		for _, m := range members { // bytewise order: the first of equal lags wins
			if len(have[m]) >= target[m] || !in.caughtUp(m, t) {
				continue
			}
			if lag, _ := in.lagOf(m, t); !found || lag < bestLag {
				best, bestLag, found = m, lag, true
			}
		}
		if !found {
			for _, m := range members {
				if len(have[m]) < target[m] && (!found || len(have[m]) < len(have[best])) {
					best, found = m, true
				}
			}
		}
		have[best] = append(have[best], t)
		dest[t] = best
	}
	var stays []haStay
	if in.hasLags() && in.opt.MaxWarmupReplicas > 0 {
		for _, t := range pool {
			d := dest[t]
			if in.caughtUp(d, t) {
				continue
			}
			if ok[t] && isMember[owner[t]] {
				if d != owner[t] {
					have[d] = slices.DeleteFunc(have[d], func(x int) bool { return x == t })
					have[owner[t]] = append(have[owner[t]], t)
					stays = append(stays, haStay{t: t, to: d})
				}
				continue
			}
			// No current previous owner: the holder of the caught-up copy
			// with the smallest lag, ties to the smaller id, if any.
			best, found := "", false
			var bestLag int64
			for _, m := range members {
				if lag, has := in.lagOf(m, t); has && in.caughtUp(m, t) && (!found || lag < bestLag) {
					best, bestLag, found = m, lag, true
				}
			}
			if found {
				have[d] = slices.DeleteFunc(have[d], func(x int) bool { return x == t })
				have[best] = append(have[best], t)
				stays = append(stays, haStay{t: t, to: d, failover: true})
			}
		}
	}
	moved := 0
	for _, m := range members {
		out[m] = append([]int{}, have[m]...)
		slices.Sort(out[m])
		for _, t := range out[m] {
			if !ok[t] || owner[t] != m {
				moved++
			}
		}
	}
	for t := range in.p {
		if _, kept := dest[t]; !kept && (!ok[t] || !isMember[owner[t]]) {
			panic("unreachable")
		}
	}
	return out, moved, stays
}

// keepers returns, per task, the members that should keep its standby:
// they held it, were its valid previous owner, or report a copy.
func (in haInput) keepers() []map[string]bool {
	out := make([]map[string]bool, in.p)
	for t := range out {
		out[t] = map[string]bool{}
	}
	owner, ok := prevOwner(in.input)
	for _, id := range in.members {
		for t := range in.p {
			_, has := in.lagOf(id, t)
			if has || ok[t] && owner[t] == id || slices.Contains(in.opt.PreviousStandby[id], t) {
				out[t][id] = true
			}
		}
	}
	return out
}

// checkHAPlan checks plan against the rules. A repair that hands a kept
// standby over (traced as "kept standby", needed only when the standby
// targets leave no room for every keeper) excuses a lost standby; pass
// repairedKept when the explanation has one.
func checkHAPlan(t *testing.T, in haInput, plan Plan, repairedKept bool) {
	t.Helper()
	wantActive, wantMoved, stays := referenceHA(in)
	if !reflect.DeepEqual(plan.Assignment, wantActive) || plan.Moved != wantMoved {
		t.Fatalf("%v:\n got %v moved %d\nwant %v moved %d (reference)", in, plan.Assignment, plan.Moved, wantActive, wantMoved)
	}
	m := len(in.members)
	if m == 0 {
		return
	}
	owner, ok := prevOwner(in.input)
	active := map[int]string{}
	for id, tasks := range plan.Assignment {
		for _, task := range tasks {
			active[task] = id
		}
	}
	// Undoing the stays gives a balanced plan that moves the minimum.
	counts := map[string]int{}
	for id, tasks := range plan.Assignment {
		counts[id] = len(tasks)
	}
	for _, s := range stays {
		counts[s.to]++
		counts[active[s.t]]--
	}
	lo, hi := in.p, 0
	for _, id := range in.members {
		lo, hi = min(lo, counts[id]), max(hi, counts[id])
	}
	if hi-lo > 1 {
		t.Fatalf("%v: counts before the warm-up stays %v are not balanced", in, counts)
	}
	kept := 0 // stays with the previous owner: each one move fewer
	for _, s := range stays {
		if !s.failover {
			kept++
		}
	}
	if want := minMoved(in.input) - kept; plan.Moved != want {
		t.Fatalf("%v: moved %d, want the minimum %d less %d stays", in, plan.Moved, minMoved(in.input), kept)
	}
	if in.p <= 7 && m <= 4 && len(stays) == 0 {
		if want := exhaustiveMinMoved(in.input); plan.Moved != want {
			t.Fatalf("%v: moved %d, exhaustive minimum %d", in, plan.Moved, want)
		}
	}
	// With warm-ups on, a task only moves from a current member to a
	// member with a caught-up copy.
	if in.hasLags() && in.opt.MaxWarmupReplicas > 0 {
		for task := range in.p {
			if ok[task] && slices.Contains(in.members, owner[task]) && active[task] != owner[task] && !in.caughtUp(active[task], task) {
				t.Fatalf("%v: task %d moved from %s to %s, which has no caught-up copy", in, task, owner[task], active[task])
			}
		}
	}

	// Standbys.
	k := min(in.opt.Standbys, m-1)
	if in.opt.Standbys == 0 {
		if plan.Standby != nil {
			t.Fatalf("%v: Standby %v without standbys", in, plan.Standby)
		}
	} else {
		if len(plan.Standby) != m {
			t.Fatalf("%v: Standby has %d members, want %d", in, len(plan.Standby), m)
		}
		per := make([][]string, in.p)
		for _, id := range in.members {
			tasks, present := plan.Standby[id]
			if !present || tasks == nil || !slices.IsSorted(tasks) {
				t.Fatalf("%v: standby list of %q missing, nil or not ascending: %v", in, id, tasks)
			}
			for _, task := range tasks {
				if active[task] == id {
					t.Fatalf("%v: %s is both active and standby of %d", in, id, task)
				}
				if slices.Contains(per[task], id) {
					t.Fatalf("%v: %s listed twice as standby of %d", in, id, task)
				}
				per[task] = append(per[task], id)
			}
		}
		for task, ids := range per {
			if len(ids) != k {
				t.Fatalf("%v: task %d has %d standbys %v, want min(K, M-1) = %d", in, task, len(ids), ids, k)
			}
		}
		if len(stays) == 0 {
			lo, hi := in.p*k, 0
			for _, id := range in.members {
				lo, hi = min(lo, len(plan.Standby[id])), max(hi, len(plan.Standby[id]))
			}
			if hi-lo > 1 {
				t.Fatalf("%v: standby counts range %d..%d: %v (actives %v)", in, lo, hi, plan.Standby, plan.Assignment)
			}
			// Stickiness: a member that should keep a standby loses
			// it only to a task full of keepers or when it is full
			// of kept standbys itself.
			keep := in.keepers()
			for _, id := range in.members {
				for task := range in.p {
					if active[task] == id || !keep[task][id] || slices.Contains(per[task], id) {
						continue
					}
					fullTask := !slices.ContainsFunc(per[task], func(o string) bool { return !keep[task][o] })
					fullMember := !slices.ContainsFunc(plan.Standby[id], func(u int) bool { return !keep[u][id] })
					if !fullTask && !fullMember && !repairedKept {
						t.Fatalf("%v: %s should have kept its standby of %d: standbys %v, actives %v", in, id, task, plan.Standby, plan.Assignment)
					}
				}
			}
		}
	}

	// Warm-ups: the first W stays without a standby on their destination.
	var want map[string][]int
	used := 0
	for _, s := range stays {
		if slices.Contains(plan.Standby[s.to], s.t) || used == in.opt.MaxWarmupReplicas {
			continue
		}
		used++
		if want == nil {
			want = map[string][]int{}
		}
		want[s.to] = append(want[s.to], s.t)
	}
	if !reflect.DeepEqual(plan.Warmup, want) {
		t.Fatalf("%v: warm-ups %v, want %v (stays %v)", in, plan.Warmup, want, stays)
	}
}

func TestAssignWithProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 0x5eed))
	const n = 12000
	var withLags, withStays, withStandbys, withWarmups, repairs int
	for range n {
		in := randomHAInput(r)
		var b strings.Builder
		plan, err := AssignWithExplain(in.p, in.members, in.previous, in.opt, &b)
		if err != nil {
			t.Fatalf("%v: %v", in, err)
		}
		repairedKept := strings.Contains(b.String(), "kept standby")
		if repairedKept {
			repairs++
		}
		checkHAPlan(t, in, plan, repairedKept)
		again := in.shuffled(r)
		var b2 strings.Builder
		plan2, err := AssignWithExplain(again.p, again.members, again.previous, again.opt, &b2)
		if err != nil || !reflect.DeepEqual(plan, plan2) || b.String() != b2.String() {
			t.Fatalf("%v: result depends on input order:\n%v\n%s\n%v\n%s", in, plan, b.String(), plan2, b2.String())
		}
		// Standbys never change the active plan.
		noStandby := in.opt
		noStandby.Standbys, noStandby.PreviousStandby = 0, nil
		if p0, err := AssignWith(in.p, in.members, in.previous, noStandby); err != nil ||
			!reflect.DeepEqual(p0.Assignment, plan.Assignment) || p0.Moved != plan.Moved {
			t.Fatalf("%v: standbys changed the active plan: %v vs %v", in, plan, p0)
		}
		// Without lag information the active plan is Assign's.
		if !in.hasLags() {
			p0, _ := Assign(in.p, in.members, in.previous)
			if !reflect.DeepEqual(p0.Assignment, plan.Assignment) || p0.Moved != plan.Moved {
				t.Fatalf("%v: no lag information, but the plan %v differs from Assign's %v", in, plan, p0)
			}
		} else {
			withLags++
		}
		if plan.Warmup != nil {
			withWarmups++
		}
		if strings.Contains(b.String(), "\nstay ") {
			withStays++
		}
		if in.opt.Standbys > 0 && len(in.members) > 1 {
			withStandbys++
		}
	}
	t.Logf("%d inputs: %d with lags, %d with stays, %d with warm-ups, %d with standbys, %d handed a kept standby over", n, withLags, withStays, withWarmups, withStandbys, repairs)
	if repairs > n/50 {
		t.Errorf("%d of %d plans handed a kept standby over, want under 2%%", repairs, n)
	}
	if withLags < n/2 || withStays < n/50 || withWarmups < n/100 || withStandbys < n/3 {
		t.Errorf("too few interesting inputs: %d with lags, %d with stays, %d with warm-ups, %d with standbys", withLags, withStays, withWarmups, withStandbys)
	}
}

// The zero Options are Assign, byte for byte in the explanation too.
func TestAssignWithZeroOptionsIsAssign(t *testing.T) {
	r := rand.New(rand.NewPCG(10, 10))
	for range 3000 {
		in := randomInput(r)
		var a, b strings.Builder
		p1, err1 := AssignExplain(in.p, in.members, in.previous, &a)
		p2, err2 := AssignWithExplain(in.p, in.members, in.previous, Options{AcceptableRecoveryLag: 7, MaxWarmupReplicas: 2}, &b)
		if err1 != nil || err2 != nil || !reflect.DeepEqual(p1, p2) || a.String() != b.String() {
			t.Fatalf("%v:\n%v %v\n%s\n%v %v\n%s", in, p1, err1, a.String(), p2, err2, b.String())
		}
	}
}

// Lag information with warm-ups off and nothing caught up: the plan is
// Assign's (the lag-aware fill falls back to the recipe's).
func TestAssignWithNothingCaughtUp(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 11))
	for range 3000 {
		in := randomInput(r)
		lags := map[string]map[int]int64{}
		for _, id := range in.members {
			lags[id] = map[int]int64{}
			for task := range in.p {
				lags[id][task] = 1000
			}
		}
		p1, _ := Assign(in.p, in.members, in.previous)
		p2, err := AssignWith(in.p, in.members, in.previous, Options{Lags: lags, AcceptableRecoveryLag: 999})
		if err != nil || !reflect.DeepEqual(p1, p2) {
			t.Fatalf("%v: %v vs %v (%v)", in, p1, p2, err)
		}
	}
}

// With balanced actives a standby placement of min(K, M-1) per task with
// counts differing by at most one always exists, and the planner finds it
// even when every member already holds a copy of everything.
func TestStandbysBalancedEverywhere(t *testing.T) {
	for p := 1; p <= 12; p++ {
		for m := 1; m <= 6; m++ {
			members := idPool[:m]
			all := map[string]map[int]int64{}
			for _, id := range members {
				all[id] = map[int]int64{}
				for task := range p {
					all[id][task] = int64(task)
				}
			}
			for k := 1; k <= m; k++ {
				for _, lags := range []map[string]map[int]int64{nil, all} {
					in := haInput{input: input{p: p, members: members, previous: map[string][]int{}},
						opt: Options{Standbys: k, Lags: lags, AcceptableRecoveryLag: 1 << 40}}
					var b strings.Builder
					plan, err := AssignWithExplain(in.p, in.members, in.previous, in.opt, &b)
					if err != nil {
						t.Fatal(err)
					}
					checkHAPlan(t, in, plan, strings.Contains(b.String(), "kept standby"))
				}
			}
		}
	}
}

func TestAssignWithErrors(t *testing.T) {
	tests := []struct {
		name string
		opt  Options
		want string
		is   error
	}{
		{"negative standbys", Options{Standbys: -1}, "bad option: standbys -1, need at least 0", ErrBadOption},
		{"negative acceptable lag", Options{AcceptableRecoveryLag: -1}, "bad option: acceptable recovery lag -1, need at least 0", ErrBadOption},
		{"negative warm-ups", Options{MaxWarmupReplicas: -2}, "bad option: max warm-up replicas -2, need at least 0", ErrBadOption},
		{"negative lag", Options{Lags: map[string]map[int]int64{"W": {1: -3}}}, `bad option: lag of "W" for task 1 is -3, need at least 0`, ErrBadOption},
		{"negative lag task", Options{Lags: map[string]map[int]int64{"X": {-1: 3}}}, `negative task: lag of "X" for task -1`, ErrNegativeTask},
		{"negative standby task", Options{PreviousStandby: map[string][]int{"W": {2, -4, -1}}}, `negative task: previous standby "W" lists task -4`, ErrNegativeTask},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			_, err := AssignWithExplain(3, []string{"X", "Y"}, nil, tt.opt, &b)
			if err == nil || err.Error() != tt.want || !errors.Is(err, tt.is) {
				t.Errorf("err = %v, want %q wrapping %v", err, tt.want, tt.is)
			}
			if b.Len() != 0 {
				t.Errorf("explanation written on error: %q", b.String())
			}
		})
	}
	if _, err := AssignWith(MaxPartitions, []string{"a", "b", "c", "d", "e", "f"}, nil, Options{Standbys: 5}); !errors.Is(err, ErrBadOption) {
		t.Errorf("2^24 tasks × 5 standbys: err = %v, want ErrBadOption", err)
	}
}
