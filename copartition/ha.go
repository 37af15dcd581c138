package copartition

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
)

// Defaults for Options that `joiner assign` and the workers use. The
// package itself applies none: a zero Options field means zero.
const (
	DefaultAcceptableRecoveryLag = 10_000
	DefaultMaxWarmupReplicas     = 2
)

// MaxStandbyReplicas bounds partitions × min(Standbys, members-1), the
// number of standby copies one plan may ask for (AssignWith allocates a
// few words per copy).
const MaxStandbyReplicas = 1 << 26

// ErrBadOption is returned by AssignWith for a negative count or lag in
// Options, or too many standby copies. The message names the field.
var ErrBadOption = errors.New("bad option")

// Options are the high-availability rules of AssignWith. The zero Options
// gives exactly Assign's plan.
type Options struct {
	// Standbys is K: every task gets min(K, M-1) standby copies on members
	// other than its active owner. 0 places none (and Plan.Standby is nil).
	Standbys int
	// PreviousStandby maps a member (current or departed) to the tasks it
	// kept a standby copy of. Tasks >= partitions are dropped.
	PreviousStandby map[string][]int
	// Lags maps a member to every task whose store it holds (active,
	// standby or left on disk) and how many records that copy is behind
	// the end of the task's input. Tasks >= partitions are dropped;
	// departed members are ignored. When no current member reports a lag
	// of a real task, there is no lag information: the active plan is
	// exactly Assign's.
	Lags map[string]map[int]int64
	// AcceptableRecoveryLag: a copy whose lag is at most this is caught up.
	AcceptableRecoveryLag int64
	// MaxWarmupReplicas is W, the most warm-up copies one plan creates.
	// With lag information and W > 0, a task that balance would move from
	// a current member to one without a caught-up copy stays where it is.
	// 0 turns warm-ups off: such tasks move at once.
	MaxWarmupReplicas int
}

func (o *Options) check() error {
	switch {
	case o == nil:
		return nil
	case o.Standbys < 0:
		return fmt.Errorf("%w: standbys %d, need at least 0", ErrBadOption, o.Standbys)
	case o.AcceptableRecoveryLag < 0:
		return fmt.Errorf("%w: acceptable recovery lag %d, need at least 0", ErrBadOption, o.AcceptableRecoveryLag)
	case o.MaxWarmupReplicas < 0:
		return fmt.Errorf("%w: max warm-up replicas %d, need at least 0", ErrBadOption, o.MaxWarmupReplicas)
	}
	return nil
}

// AssignWith is Assign with standby replicas, lag-aware placement and
// warm-ups (KIP-441). Each rule applies on top of the recipe of Assign:
//
//   - Lag-aware fill. With lag information, each task of the pool (orphans,
//     unowned and shed tasks) goes first to a member below its target that
//     holds a caught-up copy (lag <= AcceptableRecoveryLag), the smallest lag
//     first, ties to the smaller id; otherwise the recipe's fill applies.
//     Targets, shedding and Moved are those of Assign: only the choice among
//     the members below target changes.
//   - Warm-ups. With lag information and MaxWarmupReplicas W > 0, a task
//     that the fill gives to a member without a caught-up copy, while its
//     previous owner is still a member, stays with its previous owner (the
//     active counts are then deliberately unbalanced; Moved does not count
//     it). Up to W of these tasks, in ascending order, get a warm-up copy on
//     the member balance chose, unless it keeps a standby of the task
//     anyway; a later plan moves the task once that copy is caught up.
//   - Standbys. Every task gets min(Standbys, M-1) standby members other
//     than its active owner. Targets: P·min(K, M-1) copies shared out
//     floor/ceil, the extras to the members with the fewest active tasks
//     (then the most copies to keep, then the smaller id). A member that
//     held the task's standby, was its previous owner or reports a copy of
//     it (in Lags) keeps it while below its target, the smallest lag first;
//     the rest go, task by task in ascending order, to the member below
//     target with the fewest standbys (ties: smaller id). When every member
//     below target owns the task or keeps it already, a member that may
//     take it hands one of its standbys (a filled one if it can) to a member
//     below target and takes the task. Standbys never change the active
//     assignment. Standby counts differ by at most one whenever the active
//     counts do.
//
// Without lag information and with Standbys 0 the plan is exactly
// Assign's. Errors are Assign's, plus ErrBadOption and ErrNegativeTask for
// the options.
func AssignWith(partitions int, members []string, previous map[string][]int, opt Options) (Plan, error) {
	return assign(partitions, members, previous, &opt, nil)
}

// AssignWithExplain is AssignWith that writes its steps to w, as
// AssignExplain does, with the lag-aware, warm-up and standby decisions.
func AssignWithExplain(partitions int, members []string, previous map[string][]int, opt Options, w io.Writer) (Plan, error) {
	if w == nil {
		return AssignWith(partitions, members, previous, opt)
	}
	tr := newTracer(w)
	plan, err := assign(partitions, members, previous, &opt, tr)
	if err != nil {
		return Plan{}, err
	}
	if err := tr.flush(); err != nil {
		return plan, fmt.Errorf("copartition: writing explanation: %w", err)
	}
	return plan, nil
}

// haState is the options resolved against the members and tasks.
type haState struct {
	opt  *Options
	lags bool // some current member reported a copy of a real task
	warm bool // lags && MaxWarmupReplicas > 0

	// Every reported copy of a current member, by task then member:
	// copyOff[t]..copyOff[t+1] index copyMember and copyLag.
	copyOff    []int32
	copyMember []int32
	copyLag    []int64
	// Caught-up copies by task, then lag, then member.
	cuOff    []int32
	cuMember []int32
	cuLag    []int64
	// Previous standbys of current members, (task, member) sorted, unique.
	prevStandby []taskMember
}

type taskMember struct{ t, m int32 }

type lagCopy struct {
	t, m int32
	lag  int64
}

// prepare checks the options against the planner's tasks and members and
// indexes them.
func (pl *planner) prepare(opt *Options) (*haState, error) {
	ha := &haState{opt: opt}
	m := int32(pl.m)
	index := make(map[string]int32, m)
	for i, id := range pl.ids[:m] {
		index[id] = int32(i)
	}
	for _, id := range slices.Sorted(maps.Keys(opt.PreviousStandby)) {
		i, current := index[id]
		for _, t := range opt.PreviousStandby[id] {
			switch {
			case t < 0:
				return nil, fmt.Errorf("%w: previous standby %q lists task %d", ErrNegativeTask, id, slices.Min(opt.PreviousStandby[id]))
			case t < pl.p && current:
				ha.prevStandby = append(ha.prevStandby, taskMember{int32(t), i})
			}
		}
	}
	ha.prevStandby = byTask(pl.p, ha.prevStandby, func(c taskMember) int32 { return c.t },
		func(a, b taskMember) int { return cmp.Compare(a.m, b.m) })
	ha.prevStandby = slices.Compact(ha.prevStandby)

	var copies []lagCopy
	for _, id := range slices.Sorted(maps.Keys(opt.Lags)) {
		i, current := index[id]
		// Map order is random: report the smallest bad task.
		negTask, negLag := 0, math.MaxInt
		for t, lag := range opt.Lags[id] {
			switch {
			case t < 0:
				negTask = min(negTask, t)
			case lag < 0:
				negLag = min(negLag, t)
			case t < pl.p && current:
				copies = append(copies, lagCopy{int32(t), i, lag})
			}
		}
		switch {
		case negTask < 0:
			return nil, fmt.Errorf("%w: lag of %q for task %d", ErrNegativeTask, id, negTask)
		case negLag != math.MaxInt:
			return nil, fmt.Errorf("%w: lag of %q for task %d is %d, need at least 0", ErrBadOption, id, negLag, opt.Lags[id][negLag])
		}
	}
	if k := min(opt.Standbys, pl.m-1); k > 0 && int64(pl.p)*int64(k) > MaxStandbyReplicas {
		return nil, fmt.Errorf("%w: %d tasks × %d standbys is more than the %d standby copies supported", ErrBadOption, pl.p, k, MaxStandbyReplicas)
	}
	if len(copies) == 0 {
		return ha, nil
	}
	ha.lags = true
	ha.warm = opt.MaxWarmupReplicas > 0
	copies = byTask(pl.p, copies, func(c lagCopy) int32 { return c.t },
		func(a, b lagCopy) int { return cmp.Compare(a.m, b.m) })
	ha.copyOff = make([]int32, pl.p+1)
	ha.cuOff = make([]int32, pl.p+1)
	ha.copyMember = make([]int32, len(copies))
	ha.copyLag = make([]int64, len(copies))
	var caught []lagCopy
	for j, c := range copies {
		ha.copyOff[c.t+1]++
		ha.copyMember[j], ha.copyLag[j] = c.m, c.lag
		if c.lag <= opt.AcceptableRecoveryLag {
			ha.cuOff[c.t+1]++
			caught = append(caught, c)
		}
	}
	for t := range pl.p {
		ha.copyOff[t+1] += ha.copyOff[t]
		ha.cuOff[t+1] += ha.cuOff[t]
	}
	caught = byTask(pl.p, caught, func(c lagCopy) int32 { return c.t },
		func(a, b lagCopy) int { return cmp.Or(cmp.Compare(a.lag, b.lag), cmp.Compare(a.m, b.m)) })
	ha.cuMember = make([]int32, len(caught))
	ha.cuLag = make([]int64, len(caught))
	for j, c := range caught {
		ha.cuMember[j], ha.cuLag[j] = c.m, c.lag
	}
	return ha, nil
}

// copyOf returns the lag of member i's copy of task t, if it reported one.
func (ha *haState) copyOf(t int, i int32) (int64, bool) {
	if !ha.lags {
		return 0, false
	}
	lo, hi := ha.copyOff[t], ha.copyOff[t+1]
	j, ok := slices.BinarySearch(ha.copyMember[lo:hi], i)
	if !ok {
		return 0, false
	}
	return ha.copyLag[int(lo)+j], true
}

// caughtUp returns the member below its target with a caught-up copy of t
// and the smallest lag (ties: smaller index), its lag, and the runner-up
// with the same lag (-1 if none); -1 when there is no such member.
func (ha *haState) caughtUp(t int, held, target []int32) (best int32, lag int64, tie int32) {
	best, tie = -1, -1
	for j := ha.cuOff[t]; j < ha.cuOff[t+1]; j++ {
		i := ha.cuMember[j]
		if held[i] >= target[i] {
			continue
		}
		if best < 0 {
			best, lag = i, ha.cuLag[j]
			continue
		}
		if ha.cuLag[j] == lag {
			tie = i
		}
		break
	}
	return best, lag, tie
}

// stay is a task kept by its previous owner because its destination holds
// no caught-up copy.
type stay struct {
	t, to int32
}

// assignHA is the rest of assign with options: the fill (lag-aware when
// there is lag information), the warm-up stays, standbys and warm-ups.
func (pl *planner) assignHA(ha *haState, tr *tracer) Plan {
	var plan Plan
	var final []int32
	var stays []stay
	if !ha.lags {
		plan = pl.fill(tr)
		if ha.opt.Standbys > 0 {
			index := make(map[string]int32, pl.m)
			for i, id := range pl.ids[:pl.m] {
				index[id] = int32(i)
			}
			final = make([]int32, pl.p)
			for id, tasks := range plan.Assignment {
				for _, t := range tasks {
					final[t] = index[id]
				}
			}
		}
	} else {
		if tr != nil {
			tr.caughtUp(pl, ha)
		}
		var moved int
		final, moved = pl.fillLag(ha, tr)
		if ha.warm {
			stays, moved = pl.stay(ha, final, moved, tr)
		}
		plan = pl.build(final, moved)
		if tr != nil {
			tr.moved = tr.moved[:0]
			for t, o := range pl.owner {
				if final[t] != o {
					tr.moved = append(tr.moved, t)
				}
			}
		}
	}
	if tr != nil {
		tr.after(pl, plan)
	}
	var sb *standbys
	if ha.opt.Standbys > 0 {
		sb = pl.standbys(ha, final, tr)
		plan.Standby = sb.lists(pl)
		if tr != nil {
			tr.memberLists("standby:", plan.Standby)
		}
	}
	if len(stays) > 0 {
		plan.Warmup = pl.warmups(ha, stays, sb, tr)
	}
	return plan
}

// fillLag is fill with the lag-aware choice: it returns the owner of every
// task and the moved count.
func (pl *planner) fillLag(ha *haState, tr *tracer) ([]int32, int) {
	m := int32(pl.m)
	held := make([]int32, m)
	h := newMemberHeap(m)
	for i := range m {
		held[i] = min(pl.count[i], pl.target[i])
		if held[i] < pl.target[i] {
			h.push(key(held[i], i))
		}
	}
	kept := make([]int32, m)
	final := make([]int32, pl.p)
	moved := 0
	for t, o := range pl.owner {
		if o >= 0 && o < m && kept[o] < pl.target[o] {
			kept[o]++
			final[t] = o
			continue
		}
		i, lag, tie := ha.caughtUp(t, held, pl.target)
		if i >= 0 {
			if tr != nil {
				tr.fillCaughtUp(pl, t, i, lag, tie)
			}
		} else {
			if tr != nil {
				next, ok := h.runnerUp()
				tr.fillKeys(pl, t, h.keys[0], next, ok)
			}
			_, i = unkey(h.keys[0])
		}
		held[i]++
		if held[i] == pl.target[i] {
			h.remove(int(h.pos[i]))
		} else {
			h.set(i, key(held[i], i))
		}
		final[t] = i
		if i != o {
			moved++
		}
	}
	return final, moved
}

// stay keeps with its previous owner every task the fill gave to a member
// without a caught-up copy while that owner is still a member. A task
// without such an owner (orphaned or unowned) that the fill gave to a
// member without a caught-up copy goes instead to the member holding its
// caught-up copy with the smallest lag (ties: smaller id), even above that
// member's target: the failover restores only the copy's tail. Both are
// stays: the member balance chose warms the task up, and a later plan
// moves it there.
func (pl *planner) stay(ha *haState, final []int32, moved int, tr *tracer) ([]stay, int) {
	m := int32(pl.m)
	var stays []stay
	for t, o := range pl.owner {
		d := final[t]
		if d == o {
			continue
		}
		lag, has := ha.copyOf(t, d)
		if has && lag <= ha.opt.AcceptableRecoveryLag {
			continue
		}
		if o < 0 || o >= m {
			j := ha.cuOff[t]
			if j == ha.cuOff[t+1] {
				continue // no caught-up copy anywhere: the fill's choice
			}
			final[t] = ha.cuMember[j]
			stays = append(stays, stay{int32(t), d})
			if tr != nil {
				tr.failover(pl, ha, t, ha.cuMember[j], ha.cuLag[j], d, lag, has)
			}
			continue
		}
		final[t] = o
		moved--
		stays = append(stays, stay{int32(t), d})
		if tr != nil {
			tr.stay(pl, ha, t, o, d, lag, has)
		}
	}
	return stays, moved
}

// build turns the owner of every task into a Plan.
func (pl *planner) build(final []int32, moved int) Plan {
	off := make([]int, pl.m+1)
	for _, o := range final {
		off[o+1]++
	}
	for i := range pl.m {
		off[i+1] += off[i]
	}
	next := slices.Clone(off[:pl.m])
	tasks := make([]int, pl.p)
	for t, o := range final {
		tasks[next[o]] = t
		next[o]++
	}
	plan := Plan{Assignment: make(map[string][]int, pl.m), Moved: moved}
	for i, id := range pl.ids[:pl.m] {
		plan.Assignment[id] = tasks[off[i]:off[i+1]:off[i+1]]
	}
	return plan
}

// warmups gives up to MaxWarmupReplicas of the stayed tasks a warm-up copy
// on the member balance chose, unless it keeps a standby of the task.
func (pl *planner) warmups(ha *haState, stays []stay, sb *standbys, tr *tracer) map[string][]int {
	out := map[string][]int{}
	used := 0
	for _, s := range stays {
		switch {
		case sb != nil && sb.has(int(s.t), s.to):
			if tr != nil {
				fmt.Fprintf(tr.w, "warm-up %d: not needed, %s keeps a standby of it\n", s.t, name(pl.ids[s.to]))
			}
		case used < ha.opt.MaxWarmupReplicas:
			used++
			id := pl.ids[s.to]
			out[id] = append(out[id], int(s.t))
			if tr != nil {
				fmt.Fprintf(tr.w, "warm-up %d on %s\n", s.t, name(id))
			}
		default:
			if tr != nil {
				fmt.Fprintf(tr.w, "warm-up %d: none, max warm-up replicas %d reached\n", s.t, ha.opt.MaxWarmupReplicas)
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	if tr != nil {
		tr.memberLists("warmup:", out)
	}
	return out
}

// standbys is the standby placement: task t's standbys are
// sb[t*k : t*k+n[t]].
type standbys struct {
	k    int32
	sb   []int32
	kept []bool // per slot of sb: placed by the keep pass
	n    []int32
	cnt  []int32   // per member
	tgt  []int32   // per member
	held [][]int32 // per member: its standby tasks, in placement order
	// The keepers of task t are keepers[keepOff[t]:keepOff[t+1]].
	keepOff []int32
	keepers []sticky
}

func (s *standbys) of(t int) []int32 { return s.sb[t*int(s.k) : t*int(s.k)+int(s.n[t])] }

func (s *standbys) has(t int, i int32) bool { return s.k > 0 && slices.Contains(s.of(t), i) }

func (s *standbys) add(t int, i int32, kept bool) {
	slot := t*int(s.k) + int(s.n[t])
	s.sb[slot], s.kept[slot] = i, kept
	s.n[t]++
	s.cnt[i]++
	s.held[i] = append(s.held[i], int32(t))
}

// keeper reports whether member i should keep a standby of task t.
func (s *standbys) keeper(t int, i int32) bool {
	for _, c := range s.keepers[s.keepOff[t]:s.keepOff[t+1]] {
		if c.m == i {
			return true
		}
	}
	return false
}

// lists returns every member's standby tasks, ascending.
func (s *standbys) lists(pl *planner) map[string][]int {
	out := make(map[string][]int, pl.m)
	off := make([]int, pl.m+1)
	for i := range pl.m {
		off[i+1] = off[i] + int(s.cnt[i])
	}
	tasks := make([]int, off[pl.m])
	next := slices.Clone(off[:pl.m])
	for t := range s.n {
		for _, i := range s.of(t) {
			tasks[next[i]] = t
			next[i]++
		}
	}
	for i, id := range pl.ids[:pl.m] {
		out[id] = tasks[off[i]:off[i+1]:off[i+1]]
	}
	return out
}

// sticky is one member that should keep a task's standby: rank orders the
// candidates of a task (smallest lag first), why says what it holds.
type sticky struct {
	t, m int32
	rank int64
	why  byte // 's' held its standby, 'o' was its owner, 'c' reports a copy
}

// standbys places min(K, M-1) standbys per task; final is the owner of
// every task. It ranks who should keep what (keepers), sets each member's
// target (targets), keeps the ranked copies within the targets, then
// fills the rest (fill).
func (pl *planner) standbys(ha *haState, final []int32, tr *tracer) *standbys {
	m := int32(pl.m)
	k := int32(min(ha.opt.Standbys, pl.m-1))
	s := &standbys{k: k, n: make([]int32, pl.p), cnt: make([]int32, m), tgt: make([]int32, m)}
	if k == 0 {
		if tr != nil {
			fmt.Fprintf(tr.w, "standbys: K = %d, M = %d -> none (no member besides the owner)\n", ha.opt.Standbys, pl.m)
		}
		return s
	}
	s.sb = make([]int32, pl.p*int(k))
	s.kept = make([]bool, pl.p*int(k))
	s.held = make([][]int32, m)
	stickyCount := s.rankKeepers(pl, ha, final)
	s.targets(pl, ha, final, stickyCount, tr)

	// Keep: ascending tasks, each task's candidates smallest lag first.
	for _, c := range s.keepers {
		if s.n[c.t] < k && s.cnt[c.m] < s.tgt[c.m] {
			s.add(int(c.t), c.m, true)
			if tr != nil {
				tr.keep(pl, c)
			}
		}
	}
	s.fill(pl, final, tr)
	return s
}

// rankKeepers sets s.keepers, the members that should keep each task's
// standby (not its owner in final), ranked per task, smallest lag first,
// and s.keepOff, their offsets by task; it returns how many tasks each
// member should keep.
func (s *standbys) rankKeepers(pl *planner, ha *haState, final []int32) (stickyCount []int32) {
	m := int32(pl.m)
	// Who should keep what, ranked per task.
	cands := make([]sticky, 0, len(ha.prevStandby)+pl.p+len(ha.copyMember))
	for _, ps := range ha.prevStandby {
		cands = append(cands, sticky{ps.t, ps.m, math.MaxInt64, 's'})
	}
	for t, o := range pl.owner {
		if o >= 0 && o < m {
			cands = append(cands, sticky{int32(t), o, 0, 'o'})
		}
	}
	if ha.lags {
		for t := range pl.p {
			for j := ha.copyOff[t]; j < ha.copyOff[t+1]; j++ {
				cands = append(cands, sticky{int32(t), ha.copyMember[j], ha.copyLag[j], 'c'})
			}
		}
	}
	// Per (task, member): a reported copy's lag ranks it, else the owner's
	// store (lag 0), else a previous standby (lag unknown: last). The
	// reason shown is the standby, else the owner, else the copy.
	cands = byTask(pl.p, cands, func(c sticky) int32 { return c.t },
		func(a, b sticky) int { return cmp.Or(cmp.Compare(a.m, b.m), cmp.Compare(a.why, b.why)) })
	merged := cands[:0]
	for _, c := range cands {
		if c.m == final[c.t] {
			continue
		}
		if n := len(merged); n > 0 && merged[n-1].t == c.t && merged[n-1].m == c.m {
			last := &merged[n-1]
			if last.why != 'c' {
				last.rank = min(last.rank, c.rank)
			}
			last.why = c.why
			continue
		}
		merged = append(merged, c)
	}
	merged = byTask(pl.p, merged, func(c sticky) int32 { return c.t },
		func(a, b sticky) int { return cmp.Or(cmp.Compare(a.rank, b.rank), cmp.Compare(a.m, b.m)) })
	stickyCount = make([]int32, m)
	s.keepOff = make([]int32, pl.p+1)
	for _, c := range merged {
		stickyCount[c.m]++
		s.keepOff[c.t+1]++
	}
	for t := range pl.p {
		s.keepOff[t+1] += s.keepOff[t]
	}
	s.keepers = merged
	return stickyCount
}

// targets sets s.tgt, the standbys each member should hold: P·k copies,
// floor/ceil, the extras to the members with the fewest active tasks
// (then the most to keep).
func (s *standbys) targets(pl *planner, ha *haState, final []int32, stickyCount []int32, tr *tracer) {
	m, k := int32(pl.m), s.k
	active := make([]int32, m)
	for _, o := range final {
		active[o]++
	}
	total := int64(pl.p) * int64(k)
	base, extra := int32(total/int64(m)), int(total%int64(m))
	order := make([]int32, m)
	for i := range m {
		s.tgt[i] = base
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int32) int {
		return cmp.Or(cmp.Compare(active[a], active[b]), cmp.Compare(stickyCount[b], stickyCount[a]), cmp.Compare(a, b))
	})
	for _, i := range order[:extra] {
		s.tgt[i]++
	}
	for i := range m {
		s.held[i] = make([]int32, 0, s.tgt[i])
	}
	if tr != nil {
		fmt.Fprintf(tr.w, "standbys: K = %d, M = %d -> %d per task, %d in all; targets:", ha.opt.Standbys, pl.m, k, total)
		for i := range m {
			fmt.Fprintf(tr.w, " %s=%d", name(pl.ids[i]), s.tgt[i])
		}
		tr.w.WriteByte('\n')
	}

}

// fill gives every task that lacks standbys after the keeps the members
// below target with the fewest standbys that may take it; when none can,
// repair makes room, or a member goes over its target.
func (s *standbys) fill(pl *planner, final []int32, tr *tracer) {
	m, k := int32(pl.m), s.k
	// Fill: the member below target with the fewest standbys.
	h := newMemberHeap(m)
	for i := range m {
		if s.cnt[i] < s.tgt[i] {
			h.push(key(s.cnt[i], i))
		}
	}
	bump := func(i int32) {
		if p := h.pos[i]; p >= 0 {
			if s.cnt[i] >= s.tgt[i] {
				h.remove(int(p))
			} else {
				h.set(i, key(s.cnt[i], i))
			}
		}
	}
	// mark[i] == t+1: member i owns task t or keeps a standby of it.
	mark := make([]int32, m)
	var popped []uint64
	var picks []int32
	for t := range pl.p {
		if s.n[t] == k {
			continue
		}
		stamp := int32(t + 1)
		mark[final[t]] = stamp
		for _, i := range s.of(t) {
			mark[i] = stamp
		}
		// The members below target with the fewest standbys that may
		// take t, as many as t needs, then back into the heap.
		popped, picks = popped[:0], picks[:0]
		for int32(len(picks)) < k-s.n[t] && len(h.keys) > 0 {
			top := h.keys[0]
			h.remove(0)
			popped = append(popped, top)
			if _, i := unkey(top); mark[i] != stamp {
				picks = append(picks, i)
			}
		}
		for _, i := range picks {
			if tr != nil {
				fmt.Fprintf(tr.w, "standby %d -> %s (has %d, fewest)\n", t, name(pl.ids[i]), s.cnt[i])
			}
			s.add(t, i, false)
			mark[i] = stamp
		}
		for _, kk := range popped {
			if _, i := unkey(kk); s.cnt[i] < s.tgt[i] {
				h.push(key(s.cnt[i], i))
			}
		}
		for s.n[t] < k {
			if x, y, ok := s.repair(pl, t, final, h, tr); ok {
				mark[x] = stamp
				bump(y)
				continue
			}
			// Nobody below target can take t (only when the active
			// counts are unbalanced by warm-ups): the eligible member
			// with the fewest standbys goes over its target.
			pick := int32(-1)
			for i := range m {
				if mark[i] != stamp && (pick < 0 || s.cnt[i] < s.cnt[pick]) {
					pick = i
				}
			}
			if tr != nil {
				fmt.Fprintf(tr.w, "standby %d -> %s (has %d, over its target: no member below target can take it)\n", t, name(pl.ids[pick]), s.cnt[pick])
			}
			s.add(t, pick, false)
			mark[pick] = stamp
		}
	}
}

// repair makes room for task t when every member below target owns t or
// keeps a standby of it: a member X that may take t hands one of its
// standbys u to a member Y below target that may take u, then takes t. It
// prefers a u that was filled, then a kept u that Y should keep too, then
// any u. It returns X and Y.
func (s *standbys) repair(pl *planner, t int, final []int32, h *memberHeap, tr *tracer) (x, y int32, ok bool) {
	m := int32(pl.m)
	k := int(s.k)
	for pass := range 3 {
		for x = range m {
			if x == final[t] || slices.Contains(s.of(t), x) {
				continue
			}
			for hi, u := range s.held[x] {
				slot := int(u)*k + slices.Index(s.of(int(u)), x)
				if pass == 0 && s.kept[slot] {
					continue
				}
				for _, hk := range h.keys {
					_, y = unkey(hk)
					if y == final[u] || slices.Contains(s.of(int(u)), y) ||
						pass == 1 && !(s.kept[slot] && s.keeper(int(u), y)) {
						continue
					}
					s.sb[slot] = y
					s.cnt[y]++
					s.held[y] = append(s.held[y], u)
					s.held[x][hi] = int32(t)
					tslot := t*k + int(s.n[t])
					s.sb[tslot], s.kept[tslot] = x, false
					s.n[t]++
					if tr != nil {
						what := "standby"
						if s.kept[slot] {
							what = "kept standby"
						}
						fmt.Fprintf(tr.w, "standby %d -> %s (every member below target owns it or keeps it: %s hands its %s of %d to %s)\n",
							t, name(pl.ids[x]), name(pl.ids[x]), what, u, name(pl.ids[y]))
					}
					s.kept[slot] = false
					return x, y, true
				}
			}
		}
	}
	return 0, 0, false
}

// memberHeap is a binary min-heap of member keys (key(count, member))
// that can also change or remove any member's key.
type memberHeap struct {
	keys []uint64
	pos  []int32 // per member: its index in keys, or -1
}

func newMemberHeap(m int32) *memberHeap {
	h := &memberHeap{keys: make([]uint64, 0, m), pos: make([]int32, m)}
	for i := range h.pos {
		h.pos[i] = -1
	}
	return h
}

func (h *memberHeap) swap(a, b int) {
	h.keys[a], h.keys[b] = h.keys[b], h.keys[a]
	h.pos[uint32(h.keys[a])] = int32(a)
	h.pos[uint32(h.keys[b])] = int32(b)
}

func (h *memberHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if h.keys[p] <= h.keys[i] {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h *memberHeap) down(i int) {
	n := len(h.keys)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if c+1 < n && h.keys[c+1] < h.keys[c] {
			c++
		}
		if h.keys[i] <= h.keys[c] {
			return
		}
		h.swap(i, c)
		i = c
	}
}

func (h *memberHeap) push(k uint64) {
	h.keys = append(h.keys, k)
	i := len(h.keys) - 1
	h.pos[uint32(k)] = int32(i)
	h.up(i)
}

func (h *memberHeap) remove(i int) {
	last := len(h.keys) - 1
	if i != last {
		h.swap(i, last)
	}
	h.pos[uint32(h.keys[last])] = -1
	h.keys = h.keys[:last]
	if i < last {
		h.down(i)
		h.up(i)
	}
}

// set changes member i's key; i must be in the heap.
func (h *memberHeap) set(i int32, k uint64) {
	p := int(h.pos[i])
	h.keys[p] = k
	h.down(p)
	h.up(int(h.pos[i]))
}

func (h *memberHeap) runnerUp() (uint64, bool) { return fillHeap(h.keys).runnerUp() }

// byTask returns items ordered by task (a counting sort over 0..p-1), and
// by less within a task.
func byTask[T any](p int, items []T, task func(T) int32, less func(a, b T) int) []T {
	if len(items) == 0 {
		return items
	}
	off := make([]int32, p+1)
	for _, it := range items {
		off[task(it)+1]++
	}
	for t := range p {
		off[t+1] += off[t]
	}
	out := make([]T, len(items))
	next := slices.Clone(off[:p])
	for _, it := range items {
		t := task(it)
		out[next[t]] = it
		next[t]++
	}
	for t := range p {
		if off[t+1]-off[t] > 1 {
			slices.SortFunc(out[off[t]:off[t+1]], less)
		}
	}
	return out
}
