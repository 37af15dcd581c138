package join

import (
	"cmp"
	"slices"

	"github.com/joiner-dev/joiner/group"
	"github.com/joiner-dev/joiner/record"
)

// The task manager's plan: what an assignment changes in the tasks this
// member runs. planTasks is a pure function of the tasks running and the
// tasks wanted; Processor.Assigned carries its plan out (pause, commit
// the final offsets, dispose of the stores, start).

// runningTasks is what a member runs, by task: its active state tasks
// (true: merged with the task's process task), its process tasks (true:
// merged, reading the task's own state) and its standby or warm-up state
// tasks.
type runningTasks struct {
	states, procs map[int]bool
	standbys      map[int]bool
}

// wantedTasks is what an assignment gives a member: the tasks of its
// market partitions (state) and of its notifications partitions (proc),
// and its standby copies, of which the warmup ones are warm-ups.
type wantedTasks struct {
	state, proc     []int
	standby, warmup []int
}

// wantedOf is what a gives this member.
func wantedOf(a group.Assignment, topics record.Topics) wantedTasks {
	return wantedTasks{state: a.Topics[topics.Market], proc: a.Topics[topics.Notifications], standby: a.Standby, warmup: a.Warmup}
}

// taskStart is a task to start: merged (its state and notifications are
// both here), a warm-up (for a standby), or, for an active state task,
// fromCopy (its store is the standby copy this member kept).
type taskStart struct {
	p                      int
	merged, warm, fromCopy bool
}

// taskPlan is what an assignment changes. The tasks that stay run on
// untouched (a standby that stays may only change role); the ones that
// stop are paused, committed and stopped; their stores are handed to the
// task's new role here or dropped; then the new tasks start.
type taskPlan struct {
	// stopProc, stopState and stopStandby are the running tasks that
	// stop: revoked, or restarted in another role (merged or not,
	// active or standby). Ascending.
	stopProc, stopState, stopStandby []int
	// roles is the role of each standby that stays: true for a warm-up.
	roles map[int]bool
	// handover: the store of a stopping state or standby task that the
	// task's new role here takes over; true when it was a standby (or
	// warm-up) copy.
	handover map[int]bool
	// drop are the stopping tasks whose stores are closed and deleted:
	// this member no longer holds the task. Ascending.
	drop []int
	// startState, startProc and startStandby are the tasks to start, in
	// the assignment's order.
	startState, startProc, startStandby []taskStart
	// revoked and assigned are the tasks that stop and start being active
	// here (a state or a process task). Ascending.
	revoked, assigned []int
	// standby are the standby tasks wanted (not active here), in the
	// assignment's order.
	standby []int
}

// planTasks is the plan that takes a member from cur to want. A task whose
// state and notifications are both wanted here runs merged; a task that
// changes between merged and not is restarted. A task active here is no
// standby here too.
func planTasks(cur runningTasks, want wantedTasks) taskPlan {
	inState, inProc, warm := taskSet(want.state), taskSet(want.proc), taskSet(want.warmup)
	colocated := func(p int) bool { return inState[p] && inProc[p] }
	var plan taskPlan
	inStandby := map[int]bool{}
	for _, p := range want.standby {
		if !inState[p] && !inProc[p] && !inStandby[p] {
			inStandby[p] = true
			plan.standby = append(plan.standby, p)
		}
	}
	for p, merged := range cur.procs {
		if !inProc[p] || merged != colocated(p) {
			plan.stopProc = append(plan.stopProc, p)
		}
	}
	for p, merged := range cur.states {
		if !inState[p] || merged != colocated(p) {
			plan.stopState = append(plan.stopState, p)
		}
	}
	for p := range cur.standbys {
		if !inStandby[p] {
			plan.stopStandby = append(plan.stopStandby, p)
			continue
		}
		if plan.roles == nil {
			plan.roles = map[int]bool{}
		}
		plan.roles[p] = warm[p]
	}
	slices.Sort(plan.stopProc)
	slices.Sort(plan.stopState)
	slices.Sort(plan.stopStandby)
	// The stores of the stopping tasks: kept for a role the task takes
	// here, else dropped.
	stores := func(ps []int, copies bool) {
		for _, p := range ps {
			if inState[p] || inStandby[p] {
				if plan.handover == nil {
					plan.handover = map[int]bool{}
				}
				plan.handover[p] = copies
			} else {
				plan.drop = append(plan.drop, p)
			}
		}
	}
	stores(plan.stopState, false)
	stores(plan.stopStandby, true)
	slices.Sort(plan.drop)
	stays := func(running map[int]bool, stopping []int, p int) bool {
		_, ok := running[p]
		return ok && !slices.Contains(stopping, p)
	}
	for _, p := range want.state {
		if !stays(cur.states, plan.stopState, p) {
			plan.startState = append(plan.startState, taskStart{p: p, merged: colocated(p), fromCopy: plan.handover[p]})
		}
	}
	for _, p := range want.proc {
		if !stays(cur.procs, plan.stopProc, p) {
			plan.startProc = append(plan.startProc, taskStart{p: p, merged: colocated(p)})
		}
	}
	for _, p := range plan.standby {
		if !stays(cur.standbys, plan.stopStandby, p) {
			plan.startStandby = append(plan.startStandby, taskStart{p: p, warm: warm[p]})
		}
	}
	plan.revoked, plan.assigned = activeChanges(cur, want)
	return plan
}

// activeChanges are the tasks that stop (revoked) and start (assigned)
// being active (a state or a process task) from cur to want, ascending.
func activeChanges(cur runningTasks, want wantedTasks) (revoked, assigned []int) {
	was, now := map[int]bool{}, map[int]bool{}
	for p := range cur.states {
		was[p] = true
	}
	for p := range cur.procs {
		was[p] = true
	}
	for _, p := range slices.Concat(want.state, want.proc) {
		now[p] = true
	}
	return missing(was, now), missing(now, was)
}

// missing returns the keys of a that b lacks, ascending (nil for none).
func missing[K cmp.Ordered](a, b map[K]bool) []K {
	var out []K
	for k := range a {
		if !b[k] {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// stops reports whether the plan stops anything.
func (p *taskPlan) stops() bool {
	return len(p.stopProc)+len(p.stopState)+len(p.stopStandby) > 0
}

// runningLocked is what w runs now; w.mu is held.
func (w *Processor) runningLocked() runningTasks {
	cur := runningTasks{states: map[int]bool{}, procs: map[int]bool{}, standbys: map[int]bool{}}
	for p, t := range w.states {
		cur.states[p] = t.merged
	}
	for p, t := range w.procs {
		cur.procs[p] = t.st != nil
	}
	for p := range w.standbys {
		cur.standbys[p] = true
	}
	return cur
}
