package statestore

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkGet reads random symbols of a flushed store (prices in sstables,
// not the memtable), with the default shared block cache and with a
// near-empty one for comparison.
func BenchmarkGet(b *testing.B) {
	for _, bc := range []struct {
		name  string
		cache int64
	}{{"cache=256MiB", DefaultCacheBytes}, {"cache=1B", 1}} {
		b.Run(bc.name, func(b *testing.B) {
			m := openManager(b, Options{Dirs: []string{b.TempDir()}, CacheBytes: bc.cache})
			s := openTask(b, m, 0)
			const n = 20000
			syms := make([]string, n)
			ticks := make([]Tick, 0, 1000)
			for i := range syms {
				syms[i] = fmt.Sprintf("SYM%05d", i)
				ticks = append(ticks, Tick{syms[i], float64(i), int64(i), int64(i)})
				if len(ticks) == cap(ticks) {
					if err := s.Apply(ticks, int64(i)); err != nil {
						b.Fatal(err)
					}
					ticks = ticks[:0]
				}
			}
			if err := s.db.Flush(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			i := 0
			for b.Loop() {
				i = (i + 7919) % n
				if _, ok, err := s.Latest(syms[i]); err != nil || !ok {
					b.Fatalf("Get(%s) = %v, %v", syms[i], ok, err)
				}
			}
		})
	}
}

// BenchmarkGetAsOf reads a flushed store holding 10 versions of each of
// 2,000 symbols: "latest" asks for a time after every version (the common
// case of a live notification, answered from the latest-version cache once
// warm), "history" for a time between versions (one Pebble seek), and
// "latest-uncached" the common case with the cache defeated, for
// comparison.
func BenchmarkGetAsOf(b *testing.B) {
	m := openManager(b, Options{Dirs: []string{b.TempDir()}, CacheBytes: DefaultCacheBytes})
	s := openTask(b, m, 0)
	const symbols, versions = 2000, 10
	syms := make([]string, symbols)
	var off int64
	for v := range versions {
		ticks := make([]Tick, 0, symbols)
		for i := range syms {
			syms[i] = fmt.Sprintf("SYM%05d", i)
			ticks = append(ticks, Tick{syms[i], float64(v), int64(v * 1000), off})
			off++
		}
		if err := s.Apply(ticks, off-1); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.db.Flush(); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		ts      int64
		nocache bool
	}{{"latest", 1 << 40, false}, {"history", 4500, false}, {"latest-uncached", 1 << 40, true}} {
		b.Run(c.name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				i = (i + 7919) % symbols
				if c.nocache {
					s.cacheMu.Lock()
					s.latest = nil
					s.cacheMu.Unlock()
				}
				if _, m, err := s.GetAsOf(syms[i], c.ts); err != nil || m != AsOf {
					b.Fatalf("GetAsOf(%s) = %v, %v", syms[i], m, err)
				}
			}
		})
	}
}

// BenchmarkApply writes batches of ticks as a restore applies its fetches
// (per tick: one version key and value in the batch; per batch: the offset
// and one commit), the symbols round-robin like loadgen's: 8,000-tick
// batches of 1,000 symbols, and the restore figure of scripts/bench,
// 50,000-tick batches of 100,000 symbols (named like loadgen's).
func BenchmarkApply(b *testing.B) {
	for _, c := range []struct{ symbols, batch int }{{1000, 8000}, {100000, 50000}} {
		b.Run(fmt.Sprintf("symbols=%d/batch=%d", c.symbols, c.batch), func(b *testing.B) {
			m := openManager(b, Options{Dirs: []string{b.TempDir()}})
			s := openTask(b, m, 0)
			syms := make([]string, c.symbols)
			for i := range syms {
				syms[i] = "S" + strconv.Itoa(i)
			}
			ticks := make([]Tick, c.batch)
			off := int64(0)
			b.ReportAllocs()
			for b.Loop() {
				for i := range ticks {
					ticks[i] = Tick{syms[int(off)%len(syms)], float64(off), off, off}
					off++
				}
				if err := s.Apply(ticks, off-1); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*c.batch), "ns/tick")
		})
	}
}

// BenchmarkRestoreStore writes what a restore of one market partition
// writes, 100,000 symbols × 10 ticks in offset order (the symbols
// interleaved, as the load generator produces them), in batches of 50,000:
// with Apply per batch ("apply", then a flush, so that both end with the
// ticks in tables), and with a Loader committed once ("load"). cpu-s/op
// is the process's CPU time, which counts Pebble's background flushes and
// compactions too.
func BenchmarkRestoreStore(b *testing.B) {
	const symbols, rounds, batch = 100_000, 10, 50_000
	ticks := make([]Tick, 0, symbols*rounds)
	for r := range rounds {
		for i := range symbols {
			off := int64(len(ticks))
			ticks = append(ticks, Tick{"SYM" + strconv.Itoa(100000+i), float64(r) + 0.25, 1_700_000_000_000 + off, off})
		}
	}
	for _, mode := range []string{"apply", "load"} {
		b.Run(mode, func(b *testing.B) {
			var cpu time.Duration
			for b.Loop() {
				b.StopTimer()
				m := openManager(b, Options{Dirs: []string{b.TempDir()}})
				s := openTask(b, m, 0)
				c0 := processCPU()
				b.StartTimer()
				if mode == "apply" {
					for i := 0; i < len(ticks); i += batch {
						if err := s.Apply(ticks[i:i+batch], int64(i+batch-1)); err != nil {
							b.Fatal(err)
						}
					}
					if err := s.db.Flush(); err != nil {
						b.Fatal(err)
					}
				} else {
					l := s.NewLoader(len(ticks))
					for i := 0; i < len(ticks); i += batch {
						l.Add(ticks[i : i+batch])
					}
					if err := l.Commit(int64(len(ticks) - 1)); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				if err := m.Close(); err != nil { // waits for compactions
					b.Fatal(err)
				}
				cpu += processCPU() - c0
				b.StartTimer()
			}
			b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
		})
	}
}

// processCPU is the user and system time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSortGroups is the sort in Commit of a restore's 100,000
// symbols (the part of its tail before the tables are written).
func BenchmarkSortGroups(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	l := &Loader{}
	for i := range 100_000 {
		sym := "SYM" + strconv.Itoa(100000+r.IntN(900000)) // Add's own copies, scattered
		l.groups = append(l.groups, loadGroup{sym: strings.Clone(sym), last: int32(i)})
	}
	for b.Loop() {
		l.sortGroups()
	}
	if !slices.IsSortedFunc(l.sorted, func(a, b loadGroup) int { return strings.Compare(a.sym, b.sym) }) {
		b.Fatal("not sorted")
	}
}
