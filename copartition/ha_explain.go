package copartition

import (
	"fmt"
	"maps"
	"slices"
)

// caughtUp writes the caught-up copies per task, before the fill.
func (tr *tracer) caughtUp(pl *planner, ha *haState) {
	fmt.Fprintf(tr.w, "caught-up copies (lag <= %d):", ha.opt.AcceptableRecoveryLag)
	if len(ha.cuMember) == 0 {
		tr.w.WriteString(" none")
	}
	first := true
	for t := range pl.p {
		lo, hi := ha.cuOff[t], ha.cuOff[t+1]
		if lo == hi {
			continue
		}
		if !first {
			tr.w.WriteByte(';')
		}
		first = false
		fmt.Fprintf(tr.w, " %d on ", t)
		for j := lo; j < hi; j++ {
			if j > lo {
				tr.w.WriteByte(',')
			}
			fmt.Fprintf(tr.w, "%s(%d)", name(pl.ids[ha.cuMember[j]]), ha.cuLag[j])
		}
	}
	tr.w.WriteByte('\n')
	if ha.warm {
		fmt.Fprintf(tr.w, "warm-ups: on, at most %d\n", ha.opt.MaxWarmupReplicas)
	} else {
		tr.w.WriteString("warm-ups: off (max warm-up replicas 0)\n")
	}
}

// fillCaughtUp writes a fill decision made by the lag-aware rule.
func (tr *tracer) fillCaughtUp(pl *planner, t int, i int32, lag int64, tie int32) {
	fmt.Fprintf(tr.w, "fill %d -> %s (below target with a caught-up copy, lag %d", t, name(pl.ids[i]), lag)
	if tie >= 0 {
		fmt.Fprintf(tr.w, ", ties with %s, smaller id wins)\n", name(pl.ids[tie]))
	} else {
		tr.w.WriteString(", the smallest)\n")
	}
}

// stay writes a task kept by its previous owner o instead of moving to d.
func (tr *tracer) stay(pl *planner, ha *haState, t int, o, d int32, lag int64, has bool) {
	fmt.Fprintf(tr.w, "stay %d with %s: %s holds no caught-up copy (", t, name(pl.ids[o]), name(pl.ids[d]))
	if has {
		fmt.Fprintf(tr.w, "lag %d > %d)\n", lag, ha.opt.AcceptableRecoveryLag)
	} else {
		tr.w.WriteString("no copy)\n")
	}
}

// failover writes an orphaned task given to the holder of its caught-up
// copy instead of the fill's choice d, which holds none.
func (tr *tracer) failover(pl *planner, ha *haState, t int, h int32, hlag int64, d int32, lag int64, has bool) {
	fmt.Fprintf(tr.w, "failover %d -> %s (holds a caught-up copy, lag %d; above its target until a warm-up moves it): %s holds no caught-up copy (",
		t, name(pl.ids[h]), hlag, name(pl.ids[d]))
	if has {
		fmt.Fprintf(tr.w, "lag %d > %d)\n", lag, ha.opt.AcceptableRecoveryLag)
	} else {
		tr.w.WriteString("no copy)\n")
	}
}

// keep writes a standby kept by a member that had it or holds a copy.
func (tr *tracer) keep(pl *planner, c sticky) {
	fmt.Fprintf(tr.w, "standby keep %d -> %s (", c.t, name(pl.ids[c.m]))
	switch c.why {
	case 's':
		tr.w.WriteString("held its standby)\n")
	case 'o':
		tr.w.WriteString("was its active owner)\n")
	default:
		fmt.Fprintf(tr.w, "holds a copy, lag %d)\n", c.rank)
	}
}

// memberLists writes "label X=[..] Y=[..]" for the members of lists in
// bytewise order.
func (tr *tracer) memberLists(label string, lists map[string][]int) {
	tr.w.WriteString(label)
	for _, id := range slices.Sorted(maps.Keys(lists)) {
		tr.list(" "+name(id)+"=[", lists[id], "]")
	}
	tr.w.WriteByte('\n')
}
