package join

import (
	"strings"
	"sync"
)

// symbolTable interns the symbols that a task's store may keep. Records
// are decoded with record's shared decoders, whose strings alias the
// fetched value (see decode), and the store's latest-version cache keeps
// the symbol of an applied tick and of a lookup as a map key and in its
// value: an alias kept there would pin its whole fetch slab (up to
// 64 KiB) for as long as the symbol stays cached. Interning gives each
// symbol one private copy, made once; every later record of the symbol
// costs a map lookup, not an allocation. Safe for concurrent use (the
// restore's decoder and the lookups run in different goroutines).
type symbolTable struct {
	mu sync.Mutex
	m  map[string]string
}

// maxInternedSymbols bounds a table; past it, a new symbol is copied each
// time, not kept.
const maxInternedSymbols = 1 << 16

// intern returns a copy of s that shares no memory with s, the same copy
// for every call with the same symbol while the table has room.
func (t *symbolTable) intern(s string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c, ok := t.m[s]; ok {
		return c
	}
	c := strings.Clone(s)
	if len(t.m) < maxInternedSymbols {
		if t.m == nil {
			t.m = make(map[string]string)
		}
		t.m[c] = c
	}
	return c
}
