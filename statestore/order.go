package statestore

import (
	"slices"
	"strings"
)

// applyOrder puts the ticks of one Apply in key order without sorting
// them: it chains the ticks of each symbol (in batch order, which is offset
// order) and sorts only the symbols. Walking a chain backwards yields the
// symbol's ticks newest first, the key order, whenever their timestamps do
// not go back as their offsets grow (the usual case; otherwise the order is
// only less favourable to the memtable, never wrong: Pebble takes a batch
// in any order). One map lookup per tick instead of a sort's
// O(log n) string comparisons per tick, which cost more than the memtable
// inserts they sped up.
//
// It is reused by the Applies of one store (under Store.applyMu).
type applyOrder struct {
	index  map[string]int32 // symbol → its group
	groups []symbolGroup    // sorted by symbol after build
	prev   []int32          // per tick: the index of the symbol's tick before it, -1 for none
}

// symbolGroup is the chain of one symbol's ticks in a batch.
type symbolGroup struct {
	sym    string
	last   int32 // index of the symbol's last tick in the batch
	newest Tick  // the symbol's newest version in the batch
}

// build chains ticks by symbol and returns the receiver, its groups in
// symbol order. Call reset after use.
func (o *applyOrder) build(ticks []Tick) *applyOrder {
	if o.index == nil {
		o.index = map[string]int32{}
	}
	o.prev = slices.Grow(o.prev[:0], len(ticks))[:len(ticks)]
	for i := range ticks {
		t := &ticks[i]
		g, ok := o.index[t.Symbol]
		if !ok {
			g = int32(len(o.groups))
			o.index[t.Symbol] = g
			o.groups = append(o.groups, symbolGroup{sym: t.Symbol, last: -1, newest: *t})
		}
		grp := &o.groups[g]
		o.prev[i] = grp.last
		grp.last = int32(i)
		if t.newer(grp.newest) {
			grp.newest = *t
		}
	}
	slices.SortFunc(o.groups, func(x, y symbolGroup) int { return strings.Compare(x.sym, y.sym) })
	return o
}

// reset forgets the last batch (and its symbols) but keeps the memory.
func (o *applyOrder) reset() {
	clear(o.index)
	clear(o.groups) // drop the symbols' strings
	o.groups = o.groups[:0]
	o.prev = o.prev[:0]
}
