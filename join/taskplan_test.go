package join

import (
	"reflect"
	"testing"
)

// TestPlanTasks checks the task manager's plan for each kind of change:
// what stops, what stays, which store is handed over or dropped, which
// role changes and what starts.
func TestPlanTasks(t *testing.T) {
	merged := func(ps ...int) map[int]bool {
		m := map[int]bool{}
		for _, p := range ps {
			m[p] = true
		}
		return m
	}
	unmerged := func(ps ...int) map[int]bool {
		m := map[int]bool{}
		for _, p := range ps {
			m[p] = false
		}
		return m
	}
	for _, tc := range []struct {
		name string
		cur  runningTasks
		want wantedTasks
		plan taskPlan
	}{{
		name: "first assignment",
		want: wantedTasks{state: []int{1, 0}, proc: []int{0, 1, 2}},
		plan: taskPlan{
			startState: []taskStart{{p: 1, merged: true}, {p: 0, merged: true}},
			startProc:  []taskStart{{p: 0, merged: true}, {p: 1, merged: true}, {p: 2}},
			assigned:   []int{0, 1, 2},
		},
	}, {
		name: "the same again: everything stays",
		cur:  runningTasks{states: merged(0), procs: map[int]bool{0: true, 1: false}, standbys: merged(2)},
		want: wantedTasks{state: []int{0}, proc: []int{0, 1}, standby: []int{2}},
		plan: taskPlan{roles: map[int]bool{2: false}, standby: []int{2}},
	}, {
		name: "revoked: stopped, store dropped",
		cur:  runningTasks{states: merged(0, 1), procs: merged(0, 1)},
		want: wantedTasks{state: []int{0}, proc: []int{0}},
		plan: taskPlan{stopProc: []int{1}, stopState: []int{1}, drop: []int{1}, revoked: []int{1}},
	}, {
		name: "standby promoted: its store handed over as a copy",
		cur:  runningTasks{states: merged(0), procs: merged(0), standbys: merged(1)},
		want: wantedTasks{state: []int{0, 1}, proc: []int{0, 1}},
		plan: taskPlan{
			stopStandby: []int{1},
			handover:    map[int]bool{1: true},
			startState:  []taskStart{{p: 1, merged: true, fromCopy: true}},
			startProc:   []taskStart{{p: 1, merged: true}},
			assigned:    []int{1},
		},
	}, {
		name: "active task demoted to a warm-up: its store handed over",
		cur:  runningTasks{states: merged(0, 1), procs: merged(0, 1)},
		want: wantedTasks{state: []int{0}, proc: []int{0}, standby: []int{1}, warmup: []int{1}},
		plan: taskPlan{
			stopProc: []int{1}, stopState: []int{1},
			handover:     map[int]bool{1: false},
			startStandby: []taskStart{{p: 1, warm: true}},
			standby:      []int{1},
			revoked:      []int{1},
		},
	}, {
		name: "state task becomes merged: restarted on its store",
		cur:  runningTasks{states: unmerged(0), procs: unmerged(1)},
		want: wantedTasks{state: []int{0}, proc: []int{0, 1}},
		plan: taskPlan{
			stopState:  []int{0},
			handover:   map[int]bool{0: false},
			startState: []taskStart{{p: 0, merged: true}},
			startProc:  []taskStart{{p: 0, merged: true}},
		},
	}, {
		name: "merged task loses its notifications: both restarted unmerged",
		cur:  runningTasks{states: merged(0), procs: merged(0)},
		want: wantedTasks{state: []int{0}},
		plan: taskPlan{
			stopProc: []int{0}, stopState: []int{0},
			handover:   map[int]bool{0: false},
			startState: []taskStart{{p: 0}},
		},
	}, {
		name: "standby becomes a warm-up, another stops",
		cur:  runningTasks{standbys: merged(1, 2)},
		want: wantedTasks{standby: []int{1}, warmup: []int{1}},
		plan: taskPlan{stopStandby: []int{2}, drop: []int{2}, roles: map[int]bool{1: true}, standby: []int{1}},
	}, {
		name: "a standby of an active task, or twice, is one task",
		want: wantedTasks{state: []int{0}, standby: []int{0, 3, 3}},
		plan: taskPlan{
			startState:   []taskStart{{p: 0}},
			startStandby: []taskStart{{p: 3}},
			standby:      []int{3},
			assigned:     []int{0},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := planTasks(tc.cur, tc.want)
			if !reflect.DeepEqual(got, tc.plan) {
				t.Errorf("plan\n got %+v\nwant %+v", got, tc.plan)
			}
		})
	}
}
