package statestore

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestApplyOrder checks that applyOrder yields every tick of a batch once,
// in key order when each symbol's timestamps do not go back (a restore's
// usual batch), and that the batch size bound holds.
func TestApplyOrder(t *testing.T) {
	var o applyOrder // reused across rounds, as by a store
	rng := rand.New(rand.NewPCG(3, 3))
	for round := range 50 {
		syms := []string{"A", "AB", "B", "ZZZZ", "M", "AA"}[:1+rng.IntN(6)]
		monotonic := round%2 == 0
		var ticks []Tick
		last := map[string]int64{}
		for off := range int64(rng.IntN(300)) {
			sym := syms[rng.IntN(len(syms))]
			ts := last[sym] + int64(rng.IntN(3))
			if !monotonic {
				ts = int64(rng.IntN(50))
			}
			last[sym] = ts
			ticks = append(ticks, Tick{sym, float64(off), ts, off})
		}
		seen := make([]bool, len(ticks))
		var prevKey []byte
		for _, g := range o.build(ticks).groups {
			var newest Tick
			for i := g.last; i >= 0; i = o.prev[i] {
				if seen[i] || ticks[i].Symbol != g.sym {
					t.Fatalf("round %d: tick %d (%+v) yielded twice or in group %q", round, i, ticks[i], g.sym)
				}
				seen[i] = true
				if i == g.last || ticks[i].newer(newest) {
					newest = ticks[i]
				}
				key := versionKey(nil, g.sym, ticks[i].TimestampMs, ticks[i].Offset)
				if len(key) != versionKeyLen(g.sym) {
					t.Fatalf("versionKeyLen(%q) = %d, key has %d bytes", g.sym, versionKeyLen(g.sym), len(key))
				}
				if monotonic && prevKey != nil && bytes.Compare(prevKey, key) >= 0 {
					t.Fatalf("round %d: key of %+v not after the one before", round, ticks[i])
				}
				prevKey = key
			}
			if g.newest != newest {
				t.Fatalf("round %d: newest of %q = %+v, want %+v", round, g.sym, g.newest, newest)
			}
		}
		for i, ok := range seen {
			if !ok {
				t.Fatalf("round %d: tick %d (%+v) not yielded", round, i, ticks[i])
			}
		}
		if got := len(appendVersionValue(nil, 1, versionMeta{})); got != versionValueLen {
			t.Fatalf("version value has %d bytes, versionValueLen is %d", got, versionValueLen)
		}
		o.reset()
		if len(o.index) != 0 || len(o.groups) != 0 {
			t.Fatalf("reset left %d symbols, %d groups", len(o.index), len(o.groups))
		}
	}
}
