package statestore

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
)

// Loader bulk-loads many ticks into a Store: the restore of a task from
// the market topic. Add keeps the ticks in memory; Commit writes them, with
// the applied offset, as sorted tables that Pebble ingests in one atomic
// step, as if one Apply had written them all.
//
// Why: Apply inserts each tick into the memtable, which Pebble then
// flushes and compacts. A restore of a million ticks cost about 1.4 CPU-s
// there, part of it in flushes and compactions that go on after the
// restore, on the cores the worker and the broker share; the same ticks
// sorted and ingested as tables cost about 0.35 CPU-s and no compaction,
// since a table that overlaps nothing goes straight to the bottom level
// (BenchmarkRestoreStore).
//
// A Loader belongs to one goroutine. It is reused after Commit, keeping
// its memory until it is dropped.
type Loader struct {
	s *Store

	index   symbolIndex // symbol → its group
	groups  []loadGroup // in order of first appearance
	entries []loadEntry
	minOff  int64 // smallest tick offset added, math.MaxInt64 for none

	sorted   []loadGroup // Commit's: the groups in key order
	sortKeys []sortKey   // sortGroups' scratch
	order    []int32     // Commit's scratch: one group's entries, newest first
	seq      atomic.Uint64
}

// loadGroup chains the entries of one symbol, newest added first.
type loadGroup struct {
	sym  string // the Loader's own copy
	last int32  // index of the symbol's last entry, -1 for none
	n    int32  // entries of the symbol
	hash uint64 // of sym, for symbolIndex
}

// loadEntry is one tick, its symbol given by the group it is chained in.
type loadEntry struct {
	ts, off int64
	price   float64
	prev    int32 // the symbol's entry added before, -1 for none
}

// NewLoader returns a Loader into s, with room for about ticks ticks
// (growing the room as it fills costs more than the rest of Add).
func (s *Store) NewLoader(ticks int) *Loader {
	l := &Loader{s: s, minOff: math.MaxInt64, entries: make([]loadEntry, 0, max(ticks, 0))}
	l.index.seed = maphash.MakeSeed()
	return l
}

// Len is the number of ticks added since the last Commit.
func (l *Loader) Len() int { return len(l.entries) }

// Add keeps ticks for the next Commit. It keeps no string of theirs: the
// symbols may alias the caller's buffers.
func (l *Loader) Add(ticks []Tick) {
	l.entries = slices.Grow(l.entries, len(ticks))
	for i := range ticks {
		t := &ticks[i]
		h := l.index.hash(t.Symbol)
		g, ok := l.index.find(l.groups, t.Symbol, h)
		if !ok {
			g = int32(len(l.groups))
			l.groups = append(l.groups, loadGroup{sym: strings.Clone(t.Symbol), last: -1, hash: h})
			l.index.insert(l.groups, g)
		}
		l.minOff = min(l.minOff, t.Offset)
		grp := &l.groups[g]
		l.entries = append(l.entries, loadEntry{ts: t.TimestampMs, off: t.Offset, price: t.Price, prev: grp.last})
		grp.last = int32(len(l.entries) - 1)
		grp.n++
	}
}

// reset forgets what was added but keeps the memory.
func (l *Loader) reset() {
	l.index.reset()
	clear(l.groups) // drop the symbols
	clear(l.sorted)
	l.groups, l.sorted, l.entries = l.groups[:0], l.sorted[:0], l.entries[:0]
	l.minOff = math.MaxInt64
}

// loadPartMin is the fewest ticks per table when Commit writes several in
// parallel: below it, one table is written.
const loadPartMin = 100_000

// loadTmpSuffix names the tables a Commit writes into the store's dir
// before Pebble ingests (and so removes) them; Open deletes any a crash
// left behind.
const loadTmpSuffix = ".joiner-load"

// Commit stores the ticks added since the last Commit and offset as the
// applied offset, all or nothing, like Apply(ticks, offset): the same
// rules (offset after AppliedOffset(), every tick's offset in
// [0, offset]), errors and cache updates. The table files are synced
// before they are ingested, whatever Options.Sync says. On success the
// Loader is empty; on failure it keeps its ticks, and Commit may be
// called again.
func (l *Loader) Commit(offset int64) error {
	s := l.s
	unlock, err := s.lockWrite("load", offset)
	if err != nil {
		return err
	}
	defer unlock()
	if len(l.entries) > 0 && l.minOff < 0 {
		return fmt.Errorf("statestore: task %d: load of a tick with offset %d outside [0, %d]", s.task, l.minOff, offset)
	}
	for i := range l.entries {
		if e := &l.entries[i]; e.off > offset {
			return fmt.Errorf("statestore: task %d: load of a tick with offset %d outside [0, %d]", s.task, e.off, offset)
		}
	}
	l.sortGroups()
	if err := l.writeAndIngest(offset); err != nil {
		return err
	}
	s.dropReader()
	s.cacheMu.Lock()
	s.gen++
	for _, g := range l.sorted {
		c, ok := s.latest[g.sym]
		if !ok {
			continue
		}
		if t := l.newest(g); t.newer(c) {
			t.Symbol = c.Symbol
			s.latest[c.Symbol] = t
		}
	}
	s.cacheMu.Unlock()
	s.applied.Store(offset)
	l.reset()
	return nil
}

// sortGroups fills l.sorted with the groups in key order: versionKey's
// separator makes it Go's string order of their symbols. A copy: Add's
// index refers to groups by position. The sort compares the first 8 bytes
// of the symbols as integers (zero-padded, big-endian: the same order) and
// reads whole symbols only where those are equal. Comparing the strings
// themselves, scattered in memory, took 45 ms for 100,000 symbols, in the
// tail of a restore after its last fetch; this takes 28-33 ms
// (BenchmarkSortGroups, 9-byte symbols, most sharing their first 8 bytes
// with others).
func (l *Loader) sortGroups() {
	keys := slices.Grow(l.sortKeys[:0], len(l.groups))
	for i := range l.groups {
		keys = append(keys, sortKey{prefix: symbolPrefix8(l.groups[i].sym), group: int32(i)})
	}
	slices.SortFunc(keys, func(a, b sortKey) int {
		if a.prefix != b.prefix {
			return cmp.Compare(a.prefix, b.prefix)
		}
		return strings.Compare(l.groups[a.group].sym, l.groups[b.group].sym)
	})
	l.sorted = l.sorted[:0]
	for _, k := range keys {
		l.sorted = append(l.sorted, l.groups[k.group])
	}
	l.sortKeys = keys
}

// sortKey is a group to sort and the first bytes of its symbol.
type sortKey struct {
	prefix uint64
	group  int32
}

// symbolPrefix8 is the first 8 bytes of sym as a big-endian integer, zero
// bytes standing in for those past its end: for two symbols a < b in Go's
// string order, symbolPrefix8(a) <= symbolPrefix8(b).
func symbolPrefix8(sym string) uint64 {
	var b [8]byte
	copy(b[:], sym)
	return binary.BigEndian.Uint64(b[:])
}

// newest is the newest tick of a group.
func (l *Loader) newest(g loadGroup) Tick {
	var best Tick
	for i := g.last; i >= 0; i = l.entries[i].prev {
		e := &l.entries[i]
		t := Tick{Symbol: g.sym, Price: e.price, TimestampMs: e.ts, Offset: e.off}
		if i == g.last || t.newer(best) {
			best = t
		}
	}
	return best
}

// writeAndIngest writes the sorted groups as tables, in parallel when
// there are many ticks, and has Pebble ingest them, the first one also
// holding offset.
func (l *Loader) writeAndIngest(offset int64) error {
	s := l.s
	parts := 1
	if len(l.entries) >= 2*loadPartMin {
		parts = min(runtime.GOMAXPROCS(0), len(l.entries)/loadPartMin, 4)
	}
	// Cut the groups into parts of about as many ticks each.
	cuts := make([]int, 0, parts+1)
	cuts = append(cuts, 0)
	if parts > 1 {
		per, n := len(l.entries)/parts, 0
		for i, g := range l.sorted {
			n += int(g.n)
			if n >= per*len(cuts) && len(cuts) < parts && i+1 < len(l.sorted) {
				cuts = append(cuts, i+1)
			}
		}
	}
	cuts = append(cuts, len(l.sorted))
	paths := make([]string, len(cuts)-1)
	errs := make([]error, len(paths))
	base := s.mgr.fs.PathJoin(s.dir, "load-"+strconv.FormatUint(l.seq.Add(1), 10))
	var wg sync.WaitGroup
	for p := range paths {
		paths[p] = base + "-" + strconv.Itoa(p) + loadTmpSuffix
		order := &l.order
		if p > 0 {
			order = new([]int32)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[p] = l.writeTable(paths[p], l.sorted[cuts[p]:cuts[p+1]], p == 0, offset, order)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		l.removeTables(paths)
		return fmt.Errorf("statestore: task %d: write the tables of %d ticks up to offset %d in %s: %w (the store is unchanged; check the disk)",
			s.task, len(l.entries), offset, s.dir, err)
	}
	if err := s.db.Ingest(context.Background(), paths); err != nil {
		l.removeTables(paths)
		return fmt.Errorf("statestore: task %d: ingest %d ticks up to offset %d in %s: %w (the store is unchanged; check the disk)",
			s.task, len(l.entries), offset, s.dir, err)
	}
	return nil
}

// writeTable writes one table: the applied offset when withOffset, then
// the versions of groups, each symbol's newest first.
func (l *Loader) writeTable(path string, groups []loadGroup, withOffset bool, offset int64, order *[]int32) (err error) {
	s := l.s
	f, err := s.popts.FS.Create(path, "") // the store's faultFS: a full disk takes the fatal path (diskfull.go)
	if err != nil {
		return err
	}
	w := sstable.NewWriter(objstorageprovider.NewFileWritable(f), s.popts.MakeWriterOptions(6, s.db.TableFormat()))
	defer func() {
		if cerr := w.Close(); err == nil {
			err = cerr // Close syncs the file
		}
	}()
	var key, val []byte
	if withOffset {
		// "m/offset" sorts before every version key ("v/…").
		if err := w.Set([]byte(offsetKey), appendOffset(val[:0], offset)); err != nil {
			return err
		}
	}
	for _, g := range groups {
		o := (*order)[:0]
		sorted := true
		for i := g.last; i >= 0; i = l.entries[i].prev {
			if len(o) > 0 && !l.before(o[len(o)-1], i) {
				sorted = false
			}
			o = append(o, i)
		}
		if !sorted {
			slices.SortFunc(o, func(a, b int32) int {
				switch {
				case l.before(a, b):
					return -1
				case l.before(b, a):
					return 1
				}
				return 0
			})
		}
		*order = o
		for k, i := range o {
			e := &l.entries[i]
			if k > 0 && !l.before(o[k-1], i) {
				continue // the same version added twice
			}
			key = versionKey(key[:0], g.sym, e.ts, e.off)
			val = appendVersionValue(val[:0], e.price, versionMeta{})
			if err := w.Set(key, val); err != nil {
				return err
			}
		}
	}
	return nil
}

// before reports whether entry a sorts before entry b of the same symbol:
// newer first (see versionKey).
func (l *Loader) before(a, b int32) bool {
	x, y := &l.entries[a], &l.entries[b]
	return x.ts > y.ts || (x.ts == y.ts && x.off > y.off)
}

// removeTables deletes the tables of a failed Commit.
func (l *Loader) removeTables(paths []string) {
	for _, p := range paths {
		if err := l.s.mgr.fs.Remove(p); err != nil && !isNotExist(err) {
			l.s.mgr.log.Warn("cannot delete a table of a failed restore; delete it by hand", "path", p, "err", err)
		}
	}
}

// removeLoadTables deletes the tables a Loader's Commit left in dir when
// the process died before Pebble ingested them.
func (m *Manager) removeLoadTables(task int, dir string) {
	names, err := m.fs.List(dir)
	if err != nil {
		return // a new store: no dir yet
	}
	for _, name := range names {
		if !strings.HasSuffix(name, loadTmpSuffix) {
			continue
		}
		if err := m.fs.Remove(m.fs.PathJoin(dir, name)); err != nil {
			m.log.Warn("cannot delete a table left by an interrupted restore; delete it by hand", "task", task, "path", m.fs.PathJoin(dir, name), "err", err)
		}
	}
}

// symbolIndex maps the symbols of a Loader to their groups: an open
// addressing table of group numbers, probed linearly. Add looks up every
// tick's symbol; a Go map of strings cost it 0.2 µs per tick on a restore
// of 100,000 symbols, mostly cache misses of its larger slots, where a
// slot here is 8 bytes: the hash's top half and the group number + 1 (0
// for an empty slot).
type symbolIndex struct {
	seed  maphash.Seed
	slots []uint64
	used  int
}

func (x *symbolIndex) hash(sym string) uint64 { return maphash.String(x.seed, sym) }

// find returns the group of sym, whose hash is h.
func (x *symbolIndex) find(groups []loadGroup, sym string, h uint64) (int32, bool) {
	if len(x.slots) == 0 {
		return 0, false
	}
	mask := uint64(len(x.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := x.slots[i]
		if s == 0 {
			return 0, false
		}
		if s>>32 == h>>32 {
			if g := int32(uint32(s)) - 1; groups[g].sym == sym {
				return g, true
			}
		}
	}
}

// insert adds group g of groups, which find does not know yet.
func (x *symbolIndex) insert(groups []loadGroup, g int32) {
	if 2*(x.used+1) > len(x.slots) {
		x.slots = make([]uint64, max(2*len(x.slots), 1024))
		x.used = 0
		for i := range g {
			x.put(groups[i].hash, i)
		}
	}
	x.put(groups[g].hash, g)
}

func (x *symbolIndex) put(h uint64, g int32) {
	mask := uint64(len(x.slots) - 1)
	i := h & mask
	for x.slots[i] != 0 {
		i = (i + 1) & mask
	}
	x.slots[i] = h>>32<<32 | uint64(uint32(g+1))
	x.used++
}

// reset empties the table but keeps its memory.
func (x *symbolIndex) reset() {
	clear(x.slots)
	x.used = 0
}
