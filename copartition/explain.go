package copartition

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
)

// tracer writes the explanation of AssignExplain. Assign passes a nil
// *tracer and every hook is guarded by a nil check, so an unexplained plan
// costs nothing extra. Write errors are sticky in the bufio.Writer and
// surface from flush.
type tracer struct {
	w       *bufio.Writer
	buf     []byte
	dropped map[string][]int
	moved   []int
}

func newTracer(w io.Writer) *tracer { return &tracer{w: bufio.NewWriter(w)} }

func (tr *tracer) flush() error { return tr.w.Flush() }

// drop records a claim of a task >= P.
func (tr *tracer) drop(id string, t int) {
	if tr.dropped == nil {
		tr.dropped = make(map[string][]int)
	}
	tr.dropped[id] = append(tr.dropped[id], t)
}

func (tr *tracer) noMembers(pl *planner) {
	fmt.Fprintf(tr.w, "P = %d, M = 0 -> no members: empty plan\nmoved = 0\n", pl.p)
}

// before writes the targets, current ownership, orphans, unowned and
// dropped claims, shed decisions and the pool.
func (tr *tracer) before(pl *planner) {
	m := int32(pl.m)
	base, extra := pl.p/pl.m, pl.p%pl.m
	fmt.Fprintf(tr.w, "P = %d, M = %d -> floor %d, remainder %d", pl.p, pl.m, base, extra)
	if extra == 0 {
		fmt.Fprintf(tr.w, ": every target is %d\n", base)
	} else {
		var heavy []int32
		for i := range m {
			if int(pl.target[i]) > base {
				heavy = append(heavy, i)
			}
		}
		slices.SortFunc(heavy, func(a, b int32) int {
			return cmp.Or(cmp.Compare(pl.count[b], pl.count[a]), cmp.Compare(a, b))
		})
		tr.w.WriteString(": extras to the members that own the most:")
		for j, i := range heavy {
			if j > 0 {
				tr.w.WriteByte(',')
			}
			fmt.Fprintf(tr.w, " %s (owns %d)", name(pl.ids[i]), pl.count[i])
		}
		tr.w.WriteString("\ntargets:")
		for i := range m {
			fmt.Fprintf(tr.w, " %s=%d", name(pl.ids[i]), pl.target[i])
		}
		tr.w.WriteByte('\n')
	}

	owned := make([][]int, len(pl.ids))
	var never, multi, pool []int
	kept := make([]int32, m)
	for t, o := range pl.owner {
		switch {
		case o == unclaimed:
			never = append(never, t)
		case o == multiClaimed:
			multi = append(multi, t)
		default:
			owned[o] = append(owned[o], t)
		}
		if o >= 0 && o < m && kept[o] < pl.target[o] {
			kept[o]++
		} else {
			pool = append(pool, t)
		}
	}

	tr.w.WriteString("current:")
	for i := range m {
		tr.list(" "+name(pl.ids[i])+"=[", owned[i], "]")
	}
	tr.w.WriteByte('\n')
	orphans := false
	for k := pl.m; k < len(pl.ids); k++ {
		if len(owned[k]) > 0 {
			orphans = true
			tr.list("orphans ("+name(pl.ids[k])+" left): ", owned[k], "\n")
		}
	}
	if !orphans {
		tr.w.WriteString("orphans: none\n")
	}
	if len(never) > 0 {
		tr.list("unowned (never claimed): ", never, "\n")
	}
	if len(multi) > 0 {
		tr.list("unowned (claimed by more than one member): ", multi, "\n")
	}
	if len(tr.dropped) > 0 {
		fmt.Fprintf(tr.w, "dropped claims (task >= %d):", pl.p)
		for _, id := range slices.Sorted(maps.Keys(tr.dropped)) {
			ts := slices.Compact(slices.Sorted(slices.Values(tr.dropped[id])))
			tr.list(" "+name(id)+":", ts, "")
		}
		tr.w.WriteByte('\n')
	}
	shed := false
	for i := range m {
		if n := pl.count[i] - pl.target[i]; n > 0 {
			shed = true
			fmt.Fprintf(tr.w, "shed: %s has %d > %d, gives up its highest ", name(pl.ids[i]), pl.count[i], pl.target[i])
			ids := owned[i][pl.target[i]:]
			if n == 1 {
				tr.list("id: ", ids, "\n")
			} else {
				tr.list("ids: ", ids, "\n")
			}
		}
	}
	if !shed {
		tr.w.WriteString("shed: none\n")
	}
	tr.list("pool = [", pool, "]\n")
}

// fill writes the decision for pool task t, just before h.take makes it.
func (tr *tracer) fill(pl *planner, t int, h fillHeap) {
	next, ok := h.runnerUp()
	tr.fillKeys(pl, t, h[0], next, ok)
}

// fillKeys writes the decision for pool task t given the heap's top key
// and, when ok, the key it would yield next.
func (tr *tracer) fillKeys(pl *planner, t int, top, next uint64, ok bool) {
	owned, i := unkey(top)
	fmt.Fprintf(tr.w, "fill %d -> %s (owns %d, ", t, name(pl.ids[i]), owned)
	nextOwned, j := unkey(next)
	switch {
	case !ok:
		tr.w.WriteString("the only one below target)\n")
	case nextOwned == owned:
		fmt.Fprintf(tr.w, "ties with %s, smaller id wins)\n", name(pl.ids[j]))
	default:
		fmt.Fprintf(tr.w, "fewest; next %s owns %d)\n", name(pl.ids[j]), nextOwned)
	}
}

// after writes the result and the moved tasks.
func (tr *tracer) after(pl *planner, plan Plan) {
	tr.w.WriteString("result:")
	for _, id := range pl.ids[:pl.m] {
		tr.list(" "+name(id)+"=[", plan.Assignment[id], "]")
	}
	fmt.Fprintf(tr.w, "\nmoved = %d", plan.Moved)
	if plan.Moved > 0 {
		tr.list(" (", tr.moved, ")")
	}
	tr.w.WriteByte('\n')
}

// list writes prefix, the tasks separated by commas, and suffix.
func (tr *tracer) list(prefix string, tasks []int, suffix string) {
	b := append(tr.buf[:0], prefix...)
	for j, t := range tasks {
		if j > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(t), 10)
	}
	b = append(b, suffix...)
	tr.w.Write(b)
	tr.buf = b
}

// name returns a member id as written in an explanation: bare when it is
// made of letters, digits and ._- only, quoted otherwise.
func name(id string) string {
	if id == "" {
		return `""`
	}
	for _, c := range []byte(id) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '.', c == '_', c == '-':
		default:
			return strconv.Quote(id)
		}
	}
	return id
}
