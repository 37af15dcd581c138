package statestore

import (
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// growthRun is a simulated market of one task: rate ticks per simulated
// second over symbols symbols, a prune every pruneEvery seconds with the
// cut retention seconds back, and lookups as live notifications make them
// (at the latest price, plus one in ten in the past, which needs a Pebble
// iterator). Time is simulated: the run goes as fast as the store allows.
type growthRun struct {
	symbols, rate        int
	retention, pruneEvry int // seconds
	seconds, sampleEvery int // seconds
}

// growthSample is the state of the store at one simulated second.
type growthSample struct {
	sec    int
	heap   uint64        // Go heap in use after a GC
	mem    uint64        // Pebble's memtables (off the Go heap with cgo)
	disk   int64         // bytes in the store's dir
	tables int64         // of them, in sstables
	cpu    time.Duration // process CPU since the previous sample
	ticks  int           // ticks applied since the previous sample
}

func (g growthRun) run(t testing.TB) []growthSample {
	t.Helper()
	dir := t.TempDir()
	m := openManager(t, Options{Dirs: []string{dir}})
	s := openTask(t, m, 0)
	syms := make([]string, g.symbols)
	for i := range syms {
		syms[i] = "SYM" + strconv.Itoa(10000+i)
	}
	r := rand.New(rand.NewPCG(7, 11))
	var out []growthSample
	var off int64
	cpu0, ticks := processCPU(), 0
	batch := make([]Tick, 0, 100)
	const t0 = 1_700_000_000_000
	for sec := range g.seconds {
		for i := range g.rate {
			ts := int64(t0 + sec*1000 + i*1000/g.rate)
			batch = append(batch, Tick{syms[r.IntN(len(syms))], float64(off), ts, off})
			off++
			if len(batch) == cap(batch) {
				if err := s.Apply(batch, off-1); err != nil {
					t.Fatal(err)
				}
				ticks += len(batch)
				batch = batch[:0]
				sym := syms[r.IntN(len(syms))]
				if _, _, err := s.GetAsOf(sym, ts); err != nil {
					t.Fatal(err)
				}
				if _, _, err := s.GetAsOf(sym, ts-int64(r.IntN(g.retention*1000))); err != nil {
					t.Fatal(err)
				}
			}
		}
		if sec%g.pruneEvry == 0 && sec >= g.retention {
			if _, err := s.Prune(int64(t0 + (sec-g.retention)*1000)); err != nil {
				t.Fatal(err)
			}
		}
		if sec%g.sampleEvery == g.sampleEvery-1 {
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			pm := s.db.Metrics()
			cpu := processCPU()
			out = append(out, growthSample{
				sec: sec + 1, heap: ms.HeapInuse, mem: pm.MemTable.Size, disk: dirBytes(t, s.Dir(), ""), tables: dirBytes(t, s.Dir(), ".sst"),
				cpu: cpu - cpu0, ticks: ticks,
			})
			cpu0, ticks = cpu, 0
		}
	}
	return out
}

// dirBytes is the size of the files under dir whose names end in suffix.
func dirBytes(t testing.TB, dir, suffix string) int64 {
	var n int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil // a file Pebble deleted while walking
			}
			return err
		}
		if info, err := d.Info(); err == nil && !d.IsDir() && strings.HasSuffix(path, suffix) {
			n += info.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (s growthSample) String() string {
	return fmt.Sprintf("t=%4ds heap=%6.1fMB memtables=%6.1fMB disk=%6.1fMB (tables %5.1fMB) cpu/tick=%5.2fµs",
		s.sec, float64(s.heap)/1e6, float64(s.mem)/1e6, float64(s.disk)/1e6, float64(s.tables)/1e6,
		float64(s.cpu.Microseconds())/float64(max(s.ticks, 1)))
}

// TestPruneKeepsTheStoreBounded runs many prune intervals over a steady
// market (a retention of 20 simulated seconds, a prune every second, 360
// seconds: 340 prunes) and asserts that the Go heap, the store's disk and
// the CPU per tick reach a plateau: their values over the last third of
// the run are within 10% (plus a little slack for GC and WAL rotation
// noise; the CPU, measured on a shared machine, within 50%) of those over
// the middle third. A range deletion per symbol per prune grew the heap to
// 300 MB and the CPU per tick 40-fold in 300 seconds of this run.
//
// JOINER_STORE_GROWTH_SECONDS runs it longer, and _RATE (ticks per
// simulated second), _RETENTION (seconds) and _SYMBOLS change the market;
// -v prints the samples.
func TestPruneKeepsTheStoreBounded(t *testing.T) {
	g := growthRun{symbols: 500, rate: 2000, retention: 20, pruneEvry: 1, seconds: 360, sampleEvery: 20}
	for _, e := range []struct {
		name string
		dst  *int
		min  int
	}{
		{"JOINER_STORE_GROWTH_SECONDS", &g.seconds, 120},
		{"JOINER_STORE_GROWTH_RATE", &g.rate, 100},
		{"JOINER_STORE_GROWTH_RETENTION", &g.retention, 1},
		{"JOINER_STORE_GROWTH_SYMBOLS", &g.symbols, 1},
	} {
		if v := os.Getenv(e.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < e.min {
				t.Fatalf("%s=%q: want a number ≥ %d", e.name, v, e.min)
			}
			*e.dst = n
		}
	}
	if g.seconds < 3*g.retention {
		t.Fatalf("a run of %d s for a retention of %d s: want at least 3 retentions", g.seconds, g.retention)
	}
	samples := g.run(t)
	for _, s := range samples {
		t.Log(s)
	}
	assertPlateau(t, samples)
}

// assertPlateau fails t unless the heap and disk peaks and the mean CPU
// per tick over the last third of samples are within bounds of those over
// the middle third.
func assertPlateau(t *testing.T, samples []growthSample) {
	t.Helper()
	third := len(samples) / 3
	mid, last := samples[third:2*third], samples[2*third:]
	peak := func(ss []growthSample, f func(growthSample) float64) float64 {
		m := 0.0
		for _, s := range ss {
			m = max(m, f(s))
		}
		return m
	}
	cpuPerTick := func(ss []growthSample) float64 {
		var cpu time.Duration
		n := 0
		for _, s := range ss {
			cpu += s.cpu
			n += s.ticks
		}
		return float64(cpu.Nanoseconds()) / float64(max(n, 1))
	}
	const mib = 1 << 20
	for _, c := range []struct {
		what      string
		mid, last float64
		factor    float64
		slack     float64
		show      string
	}{
		{"Go heap", peak(mid, func(s growthSample) float64 { return float64(s.heap) }), peak(last, func(s growthSample) float64 { return float64(s.heap) }), 1.1, 4 * mib, "MiB"},
		{"disk", peak(mid, func(s growthSample) float64 { return float64(s.disk) }), peak(last, func(s growthSample) float64 { return float64(s.disk) }), 1.1, 8 * mib, "MiB"},
		{"CPU per tick", cpuPerTick(mid), cpuPerTick(last), 1.5, 0, "ns"},
	} {
		div := 1.0
		if c.show == "MiB" {
			div = mib
		}
		if c.last > c.mid*c.factor+c.slack {
			t.Errorf("%s grows: %.1f %s over the last third against %.1f over the middle third (allowed: ×%.1f + %.0f)",
				c.what, c.last/div, c.show, c.mid/div, c.factor, c.slack/div)
		}
	}
}

// TestPruneFlushesTheMemtable checks when Prune has the memtable flushed:
// pruneFlushEvery after the last flush if it deleted anything, not sooner (below
// pruneFlushDeletes), and never when it deleted nothing.
func TestPruneFlushesTheMemtable(t *testing.T) {
	m := openManager(t, Options{Dirs: []string{t.TempDir()}})
	s := openTask(t, m, 0)
	flushes := func() int64 { return s.db.Metrics().Flush.Count }
	var off int64
	apply := func(ts ...int64) {
		t.Helper()
		var ticks []Tick
		for _, x := range ts {
			ticks = append(ticks, Tick{"X", float64(x), x, off})
			off++
		}
		if err := s.Apply(ticks, off-1); err != nil {
			t.Fatal(err)
		}
	}
	prune := func(cut int64, wantFlush bool) {
		t.Helper()
		before := flushes()
		if _, err := s.Prune(cut); err != nil {
			t.Fatal(err)
		}
		if !wantFlush {
			// A flush is started, not waited for: give one time to show.
			time.Sleep(200 * time.Millisecond)
			if got := flushes(); got != before {
				t.Fatalf("Prune(%d) flushed the memtable (%d flushes, before %d)", cut, got, before)
			}
			return
		}
		deadline := time.Now().Add(10 * time.Second)
		for flushes() == before {
			if time.Now().After(deadline) {
				t.Fatalf("Prune(%d) did not flush the memtable %s after the last flush", cut, pruneFlushEvery)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	apply(10, 20, 30, 40)
	prune(25, false) // deleted 10, but the store was opened just now
	s.flushedAt = time.Now().Add(-pruneFlushEvery - time.Second)
	prune(25, false) // nothing more to delete
	prune(35, true)  // deleted 20
	apply(50, 60)
	prune(55, false) // deleted 30 and 40, a moment after the flush
	if tk, m := mustAsOf(t, s, "X", 55); m != AsOf || tk.Price != 50 {
		t.Errorf("X as of 55 = %+v %v, want 50", tk, m)
	}
}
