package group

import (
	"encoding/hex"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/joiner-dev/joiner/copartition"
)

// planBytes renders every member's assignment, topics and user data bytes,
// deterministically.
func planBytes(out planOutput) string {
	var b strings.Builder
	for _, mid := range slices.Sorted(maps.Keys(out.Assignments)) {
		ga := out.Assignments[mid]
		fmt.Fprintf(&b, "%s:", mid)
		for _, t := range slices.Sorted(maps.Keys(ga.AssignedPartitions)) {
			fmt.Fprintf(&b, " %s%v", t, ga.AssignedPartitions[t])
		}
		fmt.Fprintf(&b, " %s\n", hex.EncodeToString(ga.UserData))
	}
	return b.String()
}

// goldenInputs are plans whose assignment bytes were recorded with the
// group package as it was before standbys, lags and the cooperative
// handover existed (commit 7abbcad).
func goldenInputs() map[string]planInput {
	grow := fourMembersSixPartitions
	grow.Assignor = AssignorCopartition
	grow.Members = members(4, map[string][]int{"pod-0": {0, 1}, "pod-1": {2, 3}, "pod-2": {4, 5}})
	rng := fourMembersSixPartitions
	rng.Assignor = AssignorRange
	rng.Members = members(3, map[string][]int{"pod-0": {0, 1, 2, 3, 4, 5}})
	return map[string]planInput{"copartition 3->4": grow, "range": rng}
}

// With no HA configuration and no held stores (and no live flags: members
// of older versions), the leader's assignment bytes are exactly what they
// were before standbys existed.
func TestPlanBytesUnchangedWithoutHA(t *testing.T) {
	golden := map[string]string{
		"copartition 3->4": "" +
			"m-1: market[5] notifications[5] 01010605706f642d300405706f642d300a706f642d303a3830383005706f642d310a706f642d313a3830383005706f642d320a706f642d323a3830383005706f642d330a706f642d333a3830383001010202030400\n" +
			"m-2: market[4] notifications[4] 01010605706f642d300405706f642d300a706f642d303a3830383005706f642d310a706f642d313a3830383005706f642d320a706f642d323a3830383005706f642d330a706f642d333a3830383001010202030400\n" +
			"m-3: market[2 3] notifications[2 3] 01010605706f642d300405706f642d300a706f642d303a3830383005706f642d310a706f642d313a3830383005706f642d320a706f642d323a3830383005706f642d330a706f642d333a3830383001010202030400\n" +
			"m-4: market[0 1] notifications[0 1] 01010605706f642d300405706f642d300a706f642d303a3830383005706f642d310a706f642d313a3830383005706f642d320a706f642d323a3830383005706f642d330a706f642d333a3830383001010202030400\n",
		"range": "" +
			"m-1: market[4 5] notifications[4 5] 01040605706f642d300305706f642d300a706f642d303a3830383005706f642d310a706f642d313a3830383005706f642d320a706f642d323a3830383001010202030300\n" +
			"m-2: market[2 3] notifications[2 3] 01040605706f642d300305706f642d300a706f642d303a3830383005706f642d310a706f642d313a3830383005706f642d320a706f642d323a3830383001010202030300\n" +
			"m-3: market[0 1] notifications[0 1] 01040605706f642d300305706f642d300a706f642d303a3830383005706f642d310a706f642d313a3830383005706f642d320a706f642d323a3830383001010202030300\n",
	}
	for name, in := range goldenInputs() {
		out, err := computePlan(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := planBytes(out); got != golden[name] {
			t.Errorf("%s: assignment bytes changed:\n%s\nwant\n%s", name, got, golden[name])
		}
	}
}

// decodeAll decodes every member's assignment user data, by instance id.
func decodeAll(t *testing.T, in planInput, out planOutput) map[string]assignmentData {
	t.Helper()
	got := map[string]assignmentData{}
	for _, m := range in.Members {
		ad, err := decodeAssignment(out.Assignments[m.MemberID].UserData)
		if err != nil {
			t.Fatalf("%s: %v", m.InstanceID, err)
		}
		got[m.InstanceID] = ad
	}
	return got
}

func TestPlanStandbysAndLags(t *testing.T) {
	for _, k := range []int{0, 1} {
		t.Run(fmt.Sprint("standbys ", k), func(t *testing.T) { planStandbysAndLags(t, k) })
	}
}

func planStandbysAndLags(t *testing.T, k int) {
	owned := map[string][]int{"pod-0": {0, 1, 2}, "pod-1": {3, 4, 5}}
	in := fourMembersSixPartitions
	in.Assignor = AssignorCopartition
	in.Members = members(3, owned)
	in.Standbys, in.AcceptableRecoveryLag, in.MaxWarmupReplicas = k, 10, 2
	in.Members[1].Sub.Standby = []int{0}
	// pod-2 holds copies of 2 (caught up) and 4 (far behind), and of a
	// task that does not exist.
	in.Members[2].Sub.Held = map[int]int64{2: 95, 4: 10, 9: 1}
	in.Ends = map[int]int64{0: 100, 2: 100, 4: 100, 5: 0}
	out, err := computePlan(in)
	if err != nil {
		t.Fatal(err)
	}
	wantLags := map[string]map[int]int64{"pod-2": {2: 5, 4: 90}}
	if !reflect.DeepEqual(out.Lags, wantLags) {
		t.Errorf("lags = %v, want %v", out.Lags, wantLags)
	}
	ids := []string{"pod-0", "pod-1", "pod-2"}
	want, err := copartition.AssignWith(6, ids, owned, copartition.Options{
		Standbys: k, PreviousStandby: map[string][]int{"pod-1": {0}}, Lags: wantLags,
		AcceptableRecoveryLag: 10, MaxWarmupReplicas: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(out.Tasks, want.Assignment) || out.Moved != want.Moved {
		t.Errorf("tasks %v moved %d, planner says %v moved %d", out.Tasks, out.Moved, want.Assignment, want.Moved)
	}
	ads := decodeAll(t, in, out)
	n, w := 0, 0
	for _, id := range ids {
		wantSB := normalizeTasks(append(slices.Clone(want.Standby[id]), want.Warmup[id]...))
		if len(wantSB) == 0 {
			wantSB = nil
		}
		if !slices.Equal(ads[id].Standby, wantSB) || !slices.Equal(ads[id].Warmup, want.Warmup[id]) {
			t.Errorf("%s: standby %v warmup %v, want %v and %v", id, ads[id].Standby, ads[id].Warmup, wantSB, want.Warmup[id])
		}
		n += len(wantSB)
		w += len(want.Warmup[id])
		if !reflect.DeepEqual(ads[id].Owners, ads["pod-0"].Owners) {
			t.Errorf("%s: owner map differs from pod-0's", id)
		}
	}
	if out.Standbys != n || out.Warmups != w || (k > 0) != (n > w) {
		t.Errorf("counted %d standbys and %d warm-ups, want %d and %d", out.Standbys, out.Warmups, n, w)
	}
	// The task pod-2 has caught up on goes to it (lag-aware fill); 5,
	// which it has no copy of, stays with pod-1 and (without a standby
	// of it on pod-2) is warmed up on pod-2.
	if !slices.Equal(out.Tasks["pod-2"], []int{2}) || !slices.Contains(out.Tasks["pod-1"], 5) {
		t.Errorf("tasks %v, want [2] on pod-2 and 5 staying on pod-1", out.Tasks)
	}
	if k == 0 && !slices.Equal(ads["pod-2"].Warmup, []int{5}) {
		t.Errorf("pod-2 warm-ups %v, want [5]", ads["pod-2"].Warmup)
	}
}

func TestPlanNonStickyAssignorsIgnoreHA(t *testing.T) {
	for _, name := range []string{AssignorRange, AssignorRoundRobin} {
		in := fourMembersSixPartitions
		in.Assignor = name
		in.Members = members(3, nil)
		in.Standbys, in.MaxWarmupReplicas = 2, 2
		out, err := computePlan(in)
		if err != nil {
			t.Fatal(err)
		}
		if out.Standbys != 0 || out.Warmups != 0 {
			t.Errorf("%s: %d standbys, %d warm-ups", name, out.Standbys, out.Warmups)
		}
	}
}

// The first phase of the cooperative handover: a task that moves away from
// a member still running it is withheld; one whose owner is not running it
// (left, or only a store on disk) is assigned at once; tasks that stay are
// never withheld.
func TestPlanWithholdsTasksStillRunning(t *testing.T) {
	prev := map[string][]int{"pod-0": {0, 1}, "pod-1": {2, 3}, "pod-2": {4, 5}}
	for _, tc := range []struct {
		name     string
		live     []string // members whose owned tasks run
		withheld []int
	}{
		{"all live", []string{"pod-0", "pod-1", "pod-2"}, []int{5}},
		{"restarted member", []string{"pod-0", "pod-1"}, nil},
		{"nobody live (older members)", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := fourMembersSixPartitions
			in.Assignor = AssignorCopartition
			in.Members = members(4, prev)
			for i := range in.Members {
				in.Members[i].Sub.Live = slices.Contains(tc.live, in.Members[i].InstanceID)
			}
			out, err := computePlan(in)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(out.Withheld, tc.withheld) {
				t.Fatalf("withheld %v, want %v", out.Withheld, tc.withheld)
			}
			want, _ := copartition.Assign(6, []string{"pod-0", "pod-1", "pod-2", "pod-3"}, prev)
			if out.Moved != want.Moved-len(tc.withheld) {
				t.Errorf("moved %d, want the planner's %d less the %d withheld", out.Moved, want.Moved, len(tc.withheld))
			}
			ads := decodeAll(t, in, out)
			for id, tasks := range want.Assignment {
				var got []int
				for _, m := range in.Members {
					if m.InstanceID == id {
						got = out.Assignments[m.MemberID].AssignedPartitions["notifications"]
					}
				}
				exp := slices.DeleteFunc(slices.Clone(tasks), func(p int) bool { return slices.Contains(tc.withheld, p) })
				if len(exp) == 0 {
					exp = nil
				}
				if !slices.Equal(out.Tasks[id], exp) || !slices.Equal(got, exp) {
					t.Errorf("%s: market %v notifications %v, want %v", id, out.Tasks[id], got, exp)
				}
			}
			for _, p := range tc.withheld {
				if ads["pod-0"].Owners[p] != 0 {
					t.Errorf("withheld task %d has owner %d in the owner map", p, ads["pod-0"].Owners[p])
				}
			}
		})
	}
	// Departed owner: pod-3 ran 5 and left; pod-2 runs 4. Nothing is
	// withheld from the survivors.
	in := fourMembersSixPartitions
	in.Assignor = AssignorCopartition
	in.Members = members(3, map[string][]int{"pod-0": {0, 1}, "pod-1": {2, 3}, "pod-2": {4}})
	for i := range in.Members {
		in.Members[i].Sub.Live = true
	}
	out, err := computePlan(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Withheld) != 0 || out.Tasks["pod-2"] == nil || len(out.Tasks["pod-0"])+len(out.Tasks["pod-1"])+len(out.Tasks["pod-2"]) != 6 {
		t.Errorf("departed owner: withheld %v, tasks %v", out.Withheld, out.Tasks)
	}
}

// The member a withheld task is planned for keeps its standby copy of it
// until the task reaches it; standbys are placed elsewhere as planned.
func TestPlanWithheldTaskKeepsStandby(t *testing.T) {
	in := fourMembersSixPartitions
	in.Assignor = AssignorCopartition
	in.Standbys = 1
	in.Members = members(4, map[string][]int{"pod-0": {0, 1}, "pod-1": {2, 3}, "pod-2": {4, 5}})
	for i := range in.Members {
		in.Members[i].Sub.Live = true
	}
	in.Members[3].Sub.Standby = []int{5}
	out, err := computePlan(in)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(out.Withheld, []int{5}) {
		t.Fatalf("withheld %v, want [5]", out.Withheld)
	}
	ads := decodeAll(t, in, out)
	if !slices.Contains(ads["pod-3"].Standby, 5) {
		t.Errorf("pod-3 standbys %v: it lost its copy of the task coming to it", ads["pod-3"].Standby)
	}
	for id, ad := range ads {
		for _, p := range ad.Standby {
			if slices.Contains(out.Tasks[id], p) {
				t.Errorf("%s: standby of its own task %d", id, p)
			}
		}
	}
}

// A member without a copy of a task is as far behind as the task's
// partition is long: a short partition needs no warm-up, a long one does.
func TestPlanShortPartitionsMoveWithoutWarmup(t *testing.T) {
	for _, tc := range []struct {
		name          string
		length        int64 // records in each partition
		pod1, warmups int
	}{
		{"short partitions", 5, 3, 0},
		{"long partitions", 1000, 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := fourMembersSixPartitions
			in.Assignor = AssignorCopartition
			in.Members = members(2, map[string][]int{"pod-0": {0, 1, 2, 3, 4, 5}})
			in.Members[0].Sub.Live = true
			in.AcceptableRecoveryLag, in.MaxWarmupReplicas = 10, 2
			in.Members[0].Sub.Held = map[int]int64{}
			in.Starts, in.Ends = map[int]int64{}, map[int]int64{}
			for p := range 6 {
				in.Members[0].Sub.Held[p] = 100 + tc.length
				in.Starts[p], in.Ends[p] = 100, 100+tc.length
			}
			out, err := computePlan(in)
			if err != nil {
				t.Fatal(err)
			}
			// Tasks that move from a live owner are withheld first: count
			// what pod-1 is planned to get.
			got := len(out.Tasks["pod-1"]) + len(out.Withheld)
			if got != tc.pod1 || out.Warmups != tc.warmups {
				t.Errorf("pod-1 planned %d tasks (%v, withheld %v) with %d warm-ups, want %d and %d; lags %v",
					got, out.Tasks, out.Withheld, out.Warmups, tc.pod1, tc.warmups, out.Lags)
			}
		})
	}
}

func TestUnbalanced(t *testing.T) {
	for _, tc := range []struct {
		tasks map[string][]int
		want  bool
	}{
		{nil, false},
		{map[string][]int{"a": {0, 1}, "b": {2}}, false},
		{map[string][]int{"a": {0, 1, 2}, "b": {3}}, true},
		{map[string][]int{"a": {0, 1}, "b": nil}, true},
	} {
		if got := unbalanced(tc.tasks); got != tc.want {
			t.Errorf("unbalanced(%v) = %v, want %v", tc.tasks, got, tc.want)
		}
	}
}
