package statestore

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// loadCase is a restore's worth of ticks, cut into the batches it is
// committed in, each with its last offset.
type loadCase struct {
	batches [][]Tick
	offsets []int64
}

// randomLoad makes n ticks of syms symbols, some of which are prefixes of
// others, with timestamps that mostly grow with the offset but sometimes
// go back (producers set them), and a few ticks repeated.
func randomLoad(r *rand.Rand, n, syms, commits int) loadCase {
	names := make([]string, syms)
	for i := range names {
		names[i] = fmt.Sprintf("S%d", r.IntN(syms*3)) // "S1", "S12", "S123": prefixes
		if i%3 == 0 {
			// Long symbols: their first 8 bytes are not enough to order them.
			names[i] = fmt.Sprintf("LONGNAME%d", r.IntN(syms*3))
		}
	}
	var all []Tick
	for off := range int64(n) {
		ts := 1_700_000_000_000 + off*10
		if r.IntN(10) == 0 {
			ts -= int64(r.IntN(5000)) // older than ticks before it
		}
		if r.IntN(20) == 0 && off > 0 {
			ts = all[len(all)-1].TimestampMs // the same timestamp, a later offset
		}
		all = append(all, Tick{Symbol: names[r.IntN(syms)], Price: float64(r.IntN(1e6)) / 100, TimestampMs: ts, Offset: off})
	}
	var c loadCase
	for len(all) > 0 {
		k := min(len(all), 1+r.IntN(2*n/commits+1))
		b := all[:k:k]
		if r.IntN(4) == 0 {
			b = append(b, b[r.IntN(len(b))]) // one tick added twice
		}
		c.batches = append(c.batches, b)
		c.offsets = append(c.offsets, all[k-1].Offset+int64(r.IntN(3))) // records with no tick may follow
		all = all[k:]
	}
	return c
}

// dump is every version and the applied offset of s.
func dump(t *testing.T, s *Store) ([]Tick, int64) {
	t.Helper()
	var got []Tick
	err := s.Scan(func(newest Tick) error {
		h, err := s.History(newest.Symbol)
		got = append(got, h...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return got, s.AppliedOffset()
}

// TestLoaderMatchesApply loads the same ticks with Apply into one store
// and with a Loader into another, with one or several Commits, and with
// enough ticks for Commit to write its tables in parallel: the versions,
// the applied offset and the as-of lookups must be the same.
func TestLoaderMatchesApply(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		n, syms, commits, by int // by: batches per Commit
	}{
		{"small", 500, 20, 3, 1},
		{"one-commit", 3000, 300, 5, 5},
		{"parallel-tables", 3 * loadPartMin, 2000, 4, 4},
		{"parallel-few-symbols", 3 * loadPartMin, 3, 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(tc.n), uint64(tc.syms)))
			c := randomLoad(r, tc.n, tc.syms, tc.commits*tc.by)
			m := openManager(t, Options{Dirs: []string{t.TempDir()}})
			want, got := openTask(t, m, 0), openTask(t, m, 1)
			l := got.NewLoader(0)
			for i, b := range c.batches {
				if err := want.Apply(b, c.offsets[i]); err != nil {
					t.Fatal(err)
				}
				l.Add(b)
				if (i+1)%tc.by == 0 || i == len(c.batches)-1 {
					if err := l.Commit(c.offsets[i]); err != nil {
						t.Fatal(err)
					}
					if l.Len() != 0 {
						t.Fatalf("Len after Commit = %d", l.Len())
					}
				}
			}
			wv, wo := dump(t, want)
			gv, gotOff := dump(t, got)
			if wo != gotOff {
				t.Fatalf("applied offset: Loader %d, Apply %d", gotOff, wo)
			}
			if !slices.Equal(wv, gv) {
				t.Fatalf("Loader stored %d versions, Apply %d; first difference %v", len(gv), len(wv), firstDiff(wv, gv))
			}
			for range 2000 {
				b := c.batches[r.IntN(len(c.batches))]
				tk := b[r.IntN(len(b))]
				at := tk.TimestampMs + int64(r.IntN(30)) - 15
				w1, m1, err1 := want.GetAsOf(tk.Symbol, at)
				w2, m2, err2 := got.GetAsOf(tk.Symbol, at)
				if err1 != nil || err2 != nil || w1 != w2 || m1 != m2 {
					t.Fatalf("GetAsOf(%s, %d): Apply %v %v %v, Loader %v %v %v", tk.Symbol, at, w1, m1, err1, w2, m2, err2)
				}
			}
		})
	}
}

func firstDiff(a, b []Tick) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("at %d: Apply %v, Loader %v", i, a[i], b[i])
		}
	}
	return "one is a prefix of the other"
}

// TestLoaderCommitIsAnApply checks the rules Commit shares with Apply:
// the offset must move forward and bound the ticks' offsets, a refused
// Commit writes nothing and keeps the ticks for another try, the cache of
// latest versions follows, a closed store refuses, and a reopened store
// has what was committed.
func TestLoaderCommitIsAnApply(t *testing.T) {
	dir := t.TempDir()
	m := openManager(t, Options{Dirs: []string{dir}})
	s := openTask(t, m, 0)
	if err := s.Apply([]Tick{{"AAPL", 1, 1000, 3}}, 5); err != nil {
		t.Fatal(err)
	}
	if tk, ok := mustGet(t, s, "AAPL"); !ok || tk.Price != 1 { // fills the cache
		t.Fatalf("Latest = %v %v", tk, ok)
	}
	l := s.NewLoader(2)
	l.Add([]Tick{{"AAPL", 2, 2000, 6}, {"MSFT", 3, 2000, 7}})
	if err := l.Commit(5); !errors.Is(err, ErrOffsetNotAfter) {
		t.Fatalf("Commit(5) at applied 5: %v, want ErrOffsetNotAfter", err)
	}
	if err := l.Commit(6); err == nil || !strings.Contains(err.Error(), "offset 7 outside") {
		t.Fatalf("Commit(6) with a tick at 7: %v", err)
	}
	if got := s.AppliedOffset(); got != 5 {
		t.Fatalf("applied offset after refused Commits = %d", got)
	}
	if _, ok := mustGet(t, s, "MSFT"); ok {
		t.Fatal("a refused Commit wrote MSFT")
	}
	if l.Len() != 2 {
		t.Fatalf("a refused Commit dropped ticks: Len = %d", l.Len())
	}
	neg := s.NewLoader(1)
	neg.Add([]Tick{{"AAPL", 2, 2000, -1}})
	if err := neg.Commit(9); err == nil || !strings.Contains(err.Error(), "offset -1 outside") {
		t.Fatalf("Commit of a tick at offset -1: %v", err)
	}
	if err := l.Commit(9); err != nil {
		t.Fatal(err)
	}
	if tk, _ := mustGet(t, s, "AAPL"); tk.Price != 2 || tk.Offset != 6 {
		t.Fatalf("Latest(AAPL) after Commit = %v, want the committed version (price 2)", tk)
	}
	if got := s.AppliedOffset(); got != 9 {
		t.Fatalf("applied offset = %d, want 9", got)
	}
	// Nothing of the load is left in the store's dir.
	names, err := vfs.Default.List(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if strings.HasSuffix(n, loadTmpSuffix) {
			t.Fatalf("left behind: %s", n)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Commit(10); !errors.Is(err, ErrClosed) {
		t.Fatalf("Commit on a closed store: %v, want ErrClosed", err)
	}
	s = openTask(t, m, 0)
	defer s.Close()
	if got := s.AppliedOffset(); got != 9 {
		t.Fatalf("applied offset after reopen = %d, want 9", got)
	}
	if tk, ok := mustGet(t, s, "MSFT"); !ok || tk.Price != 3 {
		t.Fatalf("Latest(MSFT) after reopen = %v %v", tk, ok)
	}
}

// TestLoaderTablesLeftByACrashAreRemoved: a table written but not yet
// ingested when the process died is deleted when the store opens, and
// the store opens.
func TestLoaderTablesLeftByACrashAreRemoved(t *testing.T) {
	m := openManager(t, Options{Dirs: []string{t.TempDir()}})
	s := openTask(t, m, 0)
	dir := s.Dir()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	left := dir + "/load-1-0" + loadTmpSuffix
	if err := os.WriteFile(left, []byte("half a table"), 0o644); err != nil {
		t.Fatal(err)
	}
	s = openTask(t, m, 0)
	defer s.Close()
	if _, err := os.Stat(left); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s: %v, want it deleted", left, err)
	}
}

// TestSymbolIndex fills the index with symbols whose hashes collide (in
// the top half that the slots keep, and in the slot they start from), as
// well as distinct ones, growing it several times: each symbol must be
// found as its own group, and a symbol never added must not be.
func TestSymbolIndex(t *testing.T) {
	x := symbolIndex{seed: maphash.MakeSeed()}
	var groups []loadGroup
	for i := range 5000 {
		sym := fmt.Sprintf("S%d", i)
		h := uint64(i%7)<<32 | 3 // 7 hashes for all of them
		if i%2 == 0 {
			h = x.hash(sym)
		}
		if _, ok := x.find(groups, sym, h); ok {
			t.Fatalf("%s found before it was added", sym)
		}
		groups = append(groups, loadGroup{sym: sym, hash: h})
		x.insert(groups, int32(i))
	}
	for i, g := range groups {
		if got, ok := x.find(groups, g.sym, g.hash); !ok || got != int32(i) {
			t.Fatalf("find(%s) = %d, %v; want %d", g.sym, got, ok, i)
		}
		if _, ok := x.find(groups, g.sym+"x", g.hash); ok {
			t.Fatalf("find(%sx), never added, with the hash of %s: found", g.sym, g.sym)
		}
	}
	x.reset()
	if _, ok := x.find(groups, "S1", groups[1].hash); ok {
		t.Fatal("found after reset")
	}
}
