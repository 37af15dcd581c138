package copartition

import (
	"cmp"
	"fmt"
	"io"
	"slices"
)

// Plan is the result of Assign.
type Plan struct {
	// Assignment maps every current member to the tasks it owns, in
	// ascending order. A member without tasks maps to an empty, non-nil
	// slice. Members that left are absent. The slices share one backing
	// array but have their capacity capped, so appending to one never
	// changes another.
	Assignment map[string][]int

	// Moved is the number of tasks whose owner in Assignment differs from
	// their previous owner. A task without a valid previous owner (never
	// claimed, claimed by more than one member, or claimed only by a member
	// that left) always counts as moved.
	Moved int

	// Standby maps every current member to the tasks it keeps a standby
	// copy of, ascending; set only by AssignWith with Options.Standbys > 0
	// (nil otherwise).
	Standby map[string][]int
	// Warmup maps a member to the tasks it warms up a copy of because
	// balance would move them to it but it holds no caught-up copy; set
	// only by AssignWith when there are warm-ups (nil otherwise).
	Warmup map[string][]int
}

// Previous-owner markers in the owner array; values >= 0 index the claimer.
const (
	unclaimed    int32 = -1
	multiClaimed int32 = -2
)

// Assign computes the active assignment of tasks 0..partitions-1 to members,
// given the tasks each member owned before. It follows the sticky
// co-partition recipe exactly, with P = partitions and M = len(members):
//
//  1. Targets. Every member's target is floor(P/M). The P mod M extra tasks
//     go to the members that own the most tasks now (ties: smaller id).
//  2. Orphans. Tasks whose previous owner is not a member any more join the
//     pool, and so do unowned tasks.
//  3. Shed. A member that owns more than its target gives up its highest
//     task ids until it is at its target; they join the pool.
//  4. Fill. The pool is taken in ascending order; each task goes to the
//     member below its target that owns the fewest tasks at that moment
//     (ties: smaller id).
//  5. Moved counts the tasks whose final owner differs from the previous one.
//
// Precise rules:
//   - Members are stable string ids, ordered and compared bytewise. A
//     duplicate id is an error wrapping ErrDuplicateMember.
//   - previous maps a member id (current or departed) to the tasks it owned.
//     A claim of a task >= partitions is dropped; a negative task is an
//     error wrapping ErrNegativeTask. A task listed twice by the same member
//     is one claim. A task claimed by two or more members is unowned.
//   - "Owns now" in step 1 counts a member's valid, uniquely claimed tasks.
//   - partitions must be in 1..MaxPartitions (else ErrBadCount).
//   - No members gives an empty plan: an empty Assignment and Moved 0.
//
// The result is balanced (counts differ by at most one), and Moved is the
// minimum over all balanced assignments. It does not depend on the order of
// members, of the lists in previous, or of map iteration. Assign does not
// modify its arguments and runs in O(P + C log C + M log M) time for C
// claims.
func Assign(partitions int, members []string, previous map[string][]int) (Plan, error) {
	return assign(partitions, members, previous, nil, nil)
}

// AssignExplain is Assign that also writes, to w, the steps it takes in the
// style of the recipe's worked trace (docs/planner.md): the targets, the current ownership, the
// orphans and unowned tasks, what each member sheds, the pool, one line per
// fill decision with its reason, the result and the moved tasks. The text is
// deterministic. Nothing is written when Assign would return an error. A
// write error is returned together with the (valid) plan. A nil w makes
// AssignExplain equal to Assign.
func AssignExplain(partitions int, members []string, previous map[string][]int, w io.Writer) (Plan, error) {
	if w == nil {
		return Assign(partitions, members, previous)
	}
	tr := newTracer(w)
	plan, err := assign(partitions, members, previous, nil, tr)
	if err != nil {
		return Plan{}, err
	}
	if err := tr.flush(); err != nil {
		return plan, fmt.Errorf("copartition: writing explanation: %w", err)
	}
	return plan, nil
}

// planner holds the working state of one Assign call. Members are indexed
// by their position in ids: ids[:m] are the current members in bytewise
// order, ids[m:] the departed claimers named in previous, also sorted.
type planner struct {
	p, m   int
	ids    []string
	owner  []int32 // previous owner per task: claimer index, unclaimed or multiClaimed
	count  []int32 // per current member: tasks it validly owns now
	target []int32 // per current member
}

// assign is Assign, and AssignWith when opt is not nil.
func assign(partitions int, members []string, previous map[string][]int, opt *Options, tr *tracer) (Plan, error) {
	if err := checkCount("", partitions); err != nil {
		return Plan{}, err
	}
	if err := opt.check(); err != nil {
		return Plan{}, err
	}
	ids := slices.Clone(members)
	slices.Sort(ids)
	for i := 1; i < len(ids); i++ {
		if ids[i] == ids[i-1] {
			return Plan{}, fmt.Errorf("%w %q", ErrDuplicateMember, ids[i])
		}
	}
	pl := &planner{p: partitions, m: len(ids), ids: ids}
	if err := pl.claim(previous, tr); err != nil {
		return Plan{}, err
	}
	var ha *haState
	if opt != nil {
		var err error
		if ha, err = pl.prepare(opt); err != nil {
			return Plan{}, err
		}
	}
	if pl.m == 0 {
		if tr != nil {
			tr.noMembers(pl)
		}
		plan := Plan{Assignment: map[string][]int{}}
		if ha != nil && ha.opt.Standbys > 0 {
			plan.Standby = map[string][]int{}
		}
		return plan, nil
	}
	pl.targets()
	if tr != nil {
		tr.before(pl)
	}
	if ha == nil {
		plan := pl.fill(tr)
		if tr != nil {
			tr.after(pl, plan)
		}
		return plan, nil
	}
	return pl.assignHA(ha, tr), nil
}

// claim resolves previous into the owner array, dropping claims >= P.
func (pl *planner) claim(previous map[string][]int, tr *tracer) error {
	index := make(map[string]int32, pl.m)
	for i, id := range pl.ids {
		index[id] = int32(i)
	}
	claimers := make([]string, 0, len(previous))
	for id := range previous {
		claimers = append(claimers, id)
	}
	slices.Sort(claimers)
	pl.owner = make([]int32, pl.p)
	for t := range pl.owner {
		pl.owner[t] = unclaimed
	}
	for _, id := range claimers {
		k, ok := index[id]
		if !ok {
			k = int32(len(pl.ids))
			pl.ids = append(pl.ids, id)
		}
		for _, t := range previous[id] {
			switch {
			case t < 0:
				return fmt.Errorf("%w: previous owner %q claims task %d", ErrNegativeTask, id, slices.Min(previous[id]))
			case t >= pl.p:
				if tr != nil {
					tr.drop(id, t)
				}
				continue
			}
			switch o := pl.owner[t]; o {
			case unclaimed:
				pl.owner[t] = k
			case k, multiClaimed:
			default:
				pl.owner[t] = multiClaimed
			}
		}
	}
	return nil
}

// targets sets count and target: floor(P/M) each, plus one for the P mod M
// members that own the most now, ties to the smaller id (smaller index).
func (pl *planner) targets() {
	m := int32(pl.m)
	pl.count = make([]int32, m)
	for _, o := range pl.owner {
		if o >= 0 && o < m {
			pl.count[o]++
		}
	}
	base, extra := int32(pl.p/pl.m), pl.p%pl.m
	pl.target = make([]int32, m)
	for i := range pl.target {
		pl.target[i] = base
	}
	if extra == 0 {
		return
	}
	order := make([]int32, m)
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int {
		return cmp.Or(cmp.Compare(pl.count[b], pl.count[a]), cmp.Compare(a, b))
	})
	for _, i := range order[:extra] {
		pl.target[i]++
	}
}

// fill performs shed and fill in one ascending pass over the tasks: a task
// stays with its previous owner if that owner is a member whose earlier
// (lower) kept tasks have not reached its target yet, which is exactly
// shedding the highest ids; otherwise it is in the pool and goes to the
// member below target with the fewest tasks, found with a min-heap keyed by
// (tasks owned, index).
func (pl *planner) fill(tr *tracer) Plan {
	m := int32(pl.m)
	tasks := make([]int, pl.p)
	next := make([]int, m) // where member i writes its next task in tasks
	held := make([]int32, m)
	h := make(fillHeap, 0, m)
	off := 0
	for i := range m {
		next[i] = off
		off += int(pl.target[i])
		held[i] = min(pl.count[i], pl.target[i])
		if held[i] < pl.target[i] {
			h = append(h, key(held[i], i))
		}
	}
	h.init()
	kept := make([]int32, m)
	moved := 0
	for t, o := range pl.owner {
		if o >= 0 && o < m && kept[o] < pl.target[o] {
			kept[o]++
			tasks[next[o]] = t
			next[o]++
			continue
		}
		if tr != nil {
			tr.fill(pl, t, h)
		}
		i := h.take(pl.target)
		tasks[next[i]] = t
		next[i]++
		if i != o {
			moved++
			if tr != nil {
				tr.moved = append(tr.moved, t)
			}
		}
	}
	plan := Plan{Assignment: make(map[string][]int, m), Moved: moved}
	off = 0
	for i, id := range pl.ids[:m] {
		end := off + int(pl.target[i])
		plan.Assignment[id] = tasks[off:end:end]
		off = end
	}
	return plan
}

// fillHeap is a binary min-heap of members below their target, each keyed
// by key(tasks owned, member index) so that one integer comparison orders
// by fewest tasks, then smaller id.
type fillHeap []uint64

func key(owned, member int32) uint64 { return uint64(owned)<<32 | uint64(member) }

func unkey(k uint64) (owned, member int32) { return int32(k >> 32), int32(uint32(k)) }

func (h fillHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h fillHeap) down(i int) {
	n := len(h)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if c+1 < n && h[c+1] < h[c] {
			c++
		}
		if h[i] <= h[c] {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

// take gives one task to the member at the top of the heap and returns it,
// dropping it from the heap when it reaches its target.
func (h *fillHeap) take(target []int32) int32 {
	s := *h
	owned, i := unkey(s[0])
	if owned+1 == target[i] {
		s[0] = s[len(s)-1]
		s = s[:len(s)-1]
		*h = s
	} else {
		s[0] = key(owned+1, i)
	}
	s.down(0)
	return i
}

// runnerUp returns the key the heap would yield after its top, if any.
func (h fillHeap) runnerUp() (uint64, bool) {
	switch len(h) {
	case 0, 1:
		return 0, false
	case 2:
		return h[1], true
	}
	return min(h[1], h[2]), true
}
