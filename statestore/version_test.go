package statestore

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func mustAsOf(t *testing.T, s *Store, sym string, ts int64) (Tick, Match) {
	t.Helper()
	tk, m, err := s.GetAsOf(sym, ts)
	if err != nil {
		t.Fatalf("GetAsOf(%q, %d): %v", sym, ts, err)
	}
	return tk, m
}

func TestGetAsOf(t *testing.T) {
	m := openManager(t, Options{Dirs: []string{"/s"}, FS: vfs.NewMem()})
	s := openTask(t, m, 0)
	// Applied out of timestamp order, with two versions at ts 20: the one
	// with the greater offset is the price as of 20.
	if err := s.Apply([]Tick{
		{"AB", 2, 20, 3},
		{"AB", 1, 10, 4},
		{"ABC", 99, 15, 5},
		{"AB", 3, 20, 6},
		{"AB", 4, 30, 7},
	}, 7); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ts    int64
		want  Tick
		match Match
	}{
		{9, Tick{}, Miss},
		{10, Tick{"AB", 1, 10, 4}, AsOf},
		{19, Tick{"AB", 1, 10, 4}, AsOf},
		{20, Tick{"AB", 3, 20, 6}, AsOf},
		{29, Tick{"AB", 3, 20, 6}, AsOf},
		{30, Tick{"AB", 4, 30, 7}, AsOf},
		{1 << 50, Tick{"AB", 4, 30, 7}, AsOf},
		{-1 << 50, Tick{}, Miss},
	} {
		// Twice: the first lookup may fill the latest-version cache.
		for range 2 {
			if got, m := mustAsOf(t, s, "AB", c.ts); got != c.want || m != c.match {
				t.Errorf("AB as of %d = %+v %v, want %+v %v", c.ts, got, m, c.want, c.match)
			}
		}
	}
	if got, m := mustAsOf(t, s, "ABC", 14); m != Miss {
		t.Errorf("ABC as of 14 = %+v %v: versions of AB leaked into ABC", got, m)
	}
	if got, m := mustAsOf(t, s, "A", 100); m != Miss {
		t.Errorf("A as of 100 = %+v %v", got, m)
	}
	// A version applied after the cache was filled is seen.
	if err := s.Apply([]Tick{{"AB", 5, 40, 8}}, 8); err != nil {
		t.Fatal(err)
	}
	if got, m := mustAsOf(t, s, "AB", 45); got.Price != 5 || m != AsOf {
		t.Errorf("AB as of 45 after a new version = %+v %v", got, m)
	}
	hist, err := s.History("AB")
	if err != nil {
		t.Fatal(err)
	}
	if want := "[{AB 5 40 8} {AB 4 30 7} {AB 3 20 6} {AB 2 20 3} {AB 1 10 4}]"; fmt.Sprint(hist) != want {
		t.Errorf("History = %v, want %v", hist, want)
	}
}

func TestPruneKeepsTheVersionAtTheCut(t *testing.T) {
	m := openManager(t, Options{Dirs: []string{"/s"}, FS: vfs.NewMem()})
	s := openTask(t, m, 0)
	if err := s.Apply([]Tick{
		{"X", 1, 100, 0}, {"X", 2, 200, 1}, {"X", 3, 300, 2}, {"X", 4, 400, 3},
		{"ONE", 7, 100, 4},
		{"NEW", 8, 500, 5}, {"NEW", 9, 600, 6},
	}, 6); err != nil {
		t.Fatal(err)
	}
	n, err := s.Prune(350)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 { // only X had versions before its version at the cut
		t.Errorf("Prune pruned %d symbols, want 1", n)
	}
	hist, _ := s.History("X")
	if want := "[{X 4 400 3} {X 3 300 2}]"; fmt.Sprint(hist) != want {
		t.Errorf("X after prune = %v, want %v", hist, want)
	}
	for _, c := range []struct {
		sym   string
		ts    int64
		price float64
		match Match
	}{
		{"X", 350, 3, AsOf}, // the cut itself is still exact
		{"X", 300, 3, AsOf},
		{"X", 299, 3, Late}, // the price then (2) was pruned: the oldest kept, late
		{"X", 100, 3, Late},
		{"X", 99, 0, Miss}, // before the symbol's first price ever: a miss
		{"ONE", 50, 0, Miss},
		{"ONE", 1000, 7, AsOf},
		{"NEW", 499, 0, Miss},
	} {
		got, m := mustAsOf(t, s, c.sym, c.ts)
		if m != c.match || got.Price != c.price {
			t.Errorf("%s as of %d = %+v %v, want price %v %v", c.sym, c.ts, got, m, c.price, c.match)
		}
	}
	// A second prune carries the first price's time forward.
	if _, err := s.Prune(1000); err != nil {
		t.Fatal(err)
	}
	if got, m := mustAsOf(t, s, "X", 150); m != Late || got.Price != 4 {
		t.Errorf("X as of 150 after the second prune = %+v %v, want 4 late", got, m)
	}
	if _, m := mustAsOf(t, s, "X", 99); m != Miss {
		t.Errorf("X as of 99 after the second prune = %v, want miss", m)
	}
}

// TestVersionsAgainstModel applies random ticks (timestamps out of order
// within a window, repeated timestamps), interleaved with lookups and
// prunes, and checks every lookup against the full history: exact at or
// after every cut; before a cut either exact, or late with a kept version
// when a price existed, or a miss when none did.
func TestVersionsAgainstModel(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			m := openManager(t, Options{Dirs: []string{"/s"}, FS: vfs.NewMem()})
			s := openTask(t, m, 0)
			syms := []string{"A", "AA", "B", "C"}
			history := map[string][]Tick{}
			var offset, now, cut int64 = -1, 1000, -1 << 40
			const window = 30
			for step := 0; step < 400; step++ {
				switch r := rng.IntN(10); {
				case r < 5:
					var ticks []Tick
					for range 1 + rng.IntN(5) {
						offset++
						now += int64(rng.IntN(4))
						tk := Tick{syms[rng.IntN(len(syms))], float64(offset), now - int64(rng.IntN(window)), offset}
						ticks = append(ticks, tk)
						history[tk.Symbol] = append(history[tk.Symbol], tk)
					}
					if err := s.Apply(ticks, offset); err != nil {
						t.Fatal(err)
					}
				case r < 6:
					// Cuts stay behind the ticks still to come.
					if c := now - window - int64(rng.IntN(200)); c > cut {
						cut = c
						if _, err := s.Prune(cut); err != nil {
							t.Fatal(err)
						}
					}
				default:
					sym := syms[rng.IntN(len(syms))]
					ts := now - int64(rng.IntN(400))
					want, existed := asOf(history[sym], ts)
					got, match, err := s.GetAsOf(sym, ts)
					if err != nil {
						t.Fatal(err)
					}
					switch {
					case match == AsOf && (!existed || got != want):
						t.Fatalf("step %d: %s as of %d = %+v, want %+v (existed %v)", step, sym, ts, got, want, existed)
					case match == Miss && existed:
						t.Fatalf("step %d: %s as of %d missed, want %+v (cut %d)", step, sym, ts, want, cut)
					case match == Late && (ts >= cut || !existed || got.TimestampMs <= ts):
						t.Fatalf("step %d: %s as of %d late with %+v (cut %d, existed %v)", step, sym, ts, got, cut, existed)
					}
				}
			}
		})
	}
}

// asOf is the model: the newest tick at or before ts, ties to the greater
// offset.
func asOf(ticks []Tick, ts int64) (Tick, bool) {
	var best Tick
	found := false
	for _, tk := range ticks {
		if tk.TimestampMs <= ts && (!found || tk.newer(best)) {
			best, found = tk, true
		}
	}
	return best, found
}

func TestApplyRejectsTickOffsetsOutsideTheBatch(t *testing.T) {
	m := openManager(t, Options{Dirs: []string{"/s"}, FS: vfs.NewMem()})
	s := openTask(t, m, 0)
	for _, off := range []int64{-1, 11} {
		if err := s.Apply([]Tick{{"X", 1, 1, off}}, 10); err == nil {
			t.Errorf("Apply of a tick at offset %d in a batch up to 10 succeeded", off)
		}
	}
	if s.AppliedOffset() != -1 {
		t.Errorf("a refused Apply moved the offset to %d", s.AppliedOffset())
	}
}

// TestOldLayoutIsRebuiltOnce opens a store written in the first layout (one
// latest price per symbol under p/, no format key): it is replaced by an
// empty store once, and the new store opens as it is afterwards.
func TestOldLayoutIsRebuiltOnce(t *testing.T) {
	fs := vfs.NewMem()
	var rebuilt []error
	opts := Options{Dirs: []string{"/s"}, FS: fs, OnRebuild: func(_ int, err error) { rebuilt = append(rebuilt, err) }}
	m := openManager(t, opts)
	s := openTask(t, m, 4)
	// Make it look like a store of the first layout.
	if err := s.db.Delete([]byte(formatKey), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Set([]byte(legacyPricePrefix+"AAPL"), []byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 2}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Set([]byte(offsetKey), appendOffset(nil, 77), nil); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s = openTask(t, m, 4)
	if s.AppliedOffset() != -1 || m.Rebuilds() != 1 || len(rebuilt) != 1 || !errors.Is(rebuilt[0], errOldFormat) {
		t.Fatalf("after opening an old store: offset %d, rebuilds %d (%v); want -1, 1, errOldFormat", s.AppliedOffset(), m.Rebuilds(), rebuilt)
	}
	if err := s.Apply([]Tick{{"AAPL", 5, 5, 0}}, 0); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openTask(t, m, 4)
	if s.AppliedOffset() != 0 || m.Rebuilds() != 1 {
		t.Errorf("reopening the new store: offset %d, rebuilds %d; want 0 and still 1", s.AppliedOffset(), m.Rebuilds())
	}
}
