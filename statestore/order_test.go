package statestore

import (
	"bytes"
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestApplyOrder checks that a grouped batch yields every tick once, each
// symbol's ticks together and newest first when their timestamps grow with
// their offsets; that batches of mostly distinct symbols are not grouped
// and dense ones are; and that the store reuses the order across batches.
func TestApplyOrder(t *testing.T) {
	var o applyOrder // reused across rounds, as by a store
	rng := rand.New(rand.NewPCG(3, 3))
	for round := range 60 {
		n := rng.IntN(3000)
		symbols := 1 + rng.IntN(n+1)
		var ticks []Tick
		last := map[string]int64{}
		for off := range int64(n) {
			sym := "S" + strconv.Itoa(rng.IntN(symbols))
			ts := last[sym] + int64(rng.IntN(3))
			last[sym] = ts
			ticks = append(ticks, Tick{sym, float64(off), ts, off})
		}
		perSymbol := float64(n) / float64(max(len(last), 1))
		grouped := o.build(ticks)
		switch {
		case n >= 100 && perSymbol >= 3 && !grouped:
			t.Fatalf("round %d: %d ticks of %d symbols not grouped", round, n, len(last))
		case n >= 100 && perSymbol <= 1.2 && grouped:
			t.Fatalf("round %d: %d ticks of %d symbols grouped", round, n, len(last))
		}
		if grouped {
			seen := make([]bool, len(ticks))
			done := map[string]bool{}
			for _, g := range o.groups {
				if done[g.sym] {
					t.Fatalf("round %d: two groups of %q", round, g.sym)
				}
				done[g.sym] = true
				var prevKey []byte
				for i := g.last; i >= 0; i = o.prev[i] {
					if seen[i] || ticks[i].Symbol != g.sym {
						t.Fatalf("round %d: tick %d (%+v) yielded twice or in the group of %q", round, i, ticks[i], g.sym)
					}
					seen[i] = true
					key := versionKey(nil, g.sym, ticks[i].TimestampMs, ticks[i].Offset)
					if prevKey != nil && bytes.Compare(prevKey, key) >= 0 {
						t.Fatalf("round %d: %+v is not after the tick before in key order", round, ticks[i])
					}
					prevKey = key
				}
			}
			for i, ok := range seen {
				if !ok {
					t.Fatalf("round %d: tick %d (%+v) not yielded", round, i, ticks[i])
				}
			}
		}
		o.reset()
		if len(o.index) != 0 || len(o.groups) != 0 {
			t.Fatalf("round %d: reset left %d symbols, %d groups", round, len(o.index), len(o.groups))
		}
	}
}

// TestApplyOrderSparseDense: the restore figure's batches (every symbol
// once) go in batch order, a few thousand symbols' are grouped.
func TestApplyOrderSparseDense(t *testing.T) {
	var o applyOrder
	for _, c := range []struct {
		n, symbols int
		grouped    bool
	}{{50000, 50000, false}, {50000, 40000, false}, {8000, 1000, true}, {20000, 5000, true}, {1, 1, false}} {
		ticks := make([]Tick, c.n)
		for i := range ticks {
			ticks[i] = Tick{Symbol: "S" + strconv.Itoa(i%c.symbols), Offset: int64(i)}
		}
		if got := o.build(ticks); got != c.grouped {
			t.Errorf("%d ticks of %d symbols: grouped = %v, want %v", c.n, c.symbols, got, c.grouped)
		}
		o.reset()
	}
}

// TestDistinctEstimate checks linear counting within 2% (its error at 8 bits per tick is a fraction of that).
func TestDistinctEstimate(t *testing.T) {
	var o applyOrder
	for _, c := range []struct{ n, symbols int }{{1000, 10}, {8000, 1000}, {50000, 25000}, {50000, 50000}, {3000, 3000}} {
		ticks := make([]Tick, c.n)
		for i := range ticks {
			ticks[i].Symbol = "S" + strconv.Itoa(i%c.symbols)
		}
		if got := o.distinct(ticks); got < 0.98*float64(c.symbols) || got > 1.02*float64(c.symbols) {
			t.Errorf("distinct of %d ticks of %d symbols = %.0f", c.n, c.symbols, got)
		}
	}
}
