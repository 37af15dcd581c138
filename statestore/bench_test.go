package statestore

import (
	"fmt"
	"testing"
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
				ticks = append(ticks, Tick{syms[i], float64(i), int64(i)})
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
				if _, ok, err := s.Get(syms[i]); err != nil || !ok {
					b.Fatalf("Get(%s) = %v, %v", syms[i], ok, err)
				}
			}
		})
	}
}
