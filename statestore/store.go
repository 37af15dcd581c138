package statestore

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Tick is one version of a symbol's price: the price a market record
// carried, the record's timestamp and its offset in the market partition.
type Tick struct {
	Symbol      string
	Price       float64
	TimestampMs int64
	Offset      int64
}

// newer reports whether t is a later version than u: a later timestamp,
// or the same timestamp and a later offset.
func (t Tick) newer(u Tick) bool {
	return t.TimestampMs > u.TimestampMs || (t.TimestampMs == u.TimestampMs && t.Offset > u.Offset)
}

// Match says what GetAsOf found.
type Match uint8

const (
	// Miss: the symbol has no version at or before the time asked for, and
	// none was pruned: there was no price then.
	Miss Match = iota
	// AsOf: the version as of the time asked for, exactly.
	AsOf
	// Late: the time asked for is older than the retained history of the
	// symbol (older versions were pruned); the Tick is the oldest kept
	// version, which is not the price as of that time.
	Late
)

func (m Match) String() string {
	switch m {
	case AsOf:
		return "as-of"
	case Late:
		return "late"
	default:
		return "miss"
	}
}

// Store is the Pebble DB of one task: every version of every symbol's price
// within the retention, and the market offset those versions reflect.
//
// GetAsOf, Latest, Scan and AppliedOffset are safe to call from any number
// of goroutines while another goroutine calls Apply or Prune; Apply and
// Prune calls are serialised. After Close every method returns ErrClosed
// (AppliedOffset keeps returning the last value).
//
// The store keeps no string it is given: the symbols passed to Apply and
// GetAsOf may alias buffers of the caller (join decodes records without
// copying them), which a kept alias would pin and see change.
type Store struct {
	task int
	dir  string
	mgr  *Manager
	sync *pebble.WriteOptions
	// popts are the options the DB was opened with (Loader writes tables
	// with them).
	popts *pebble.Options

	mu      sync.RWMutex // write-locked only by Close
	db      *pebble.DB   // nil once closed
	applyMu sync.Mutex   // serialises Apply and Prune
	applied atomic.Int64
	order   applyOrder // Apply's, under applyMu
	// prunedSinceFlush counts the versions Prune deleted since it last
	// had the memtable flushed at flushedAt (or the store opened), under
	// applyMu: see flushPruned.
	prunedSinceFlush int
	flushedAt        time.Time

	// latest caches the newest version of the symbols looked up, so that
	// the common lookup (a notification newer than its symbol's latest
	// tick) needs no Pebble read. gen counts Applies: a lookup fills the
	// cache only if no Apply ran since it read Pebble, so the cache never
	// holds a version older than the store's latest.
	cacheMu sync.RWMutex
	latest  map[string]Tick
	gen     uint64

	// reader is a Pebble iterator kept between the lookups that need an
	// older version than the cached latest (a backlog joined after the
	// market was restored past it): creating one per lookup cost more
	// than the lookup. It sees the DB as of its creation, so every write
	// of versions (Apply, Prune) drops it; the next lookup makes a new one.
	readerMu sync.Mutex
	reader   *pebble.Iterator
	bounds   [2][2][]byte // the reader's lower and upper bounds, two sets in turn (see SetBounds)
	boundsAt int
}

// Task is the partition index this store holds.
func (s *Store) Task() int { return s.task }

// Dir is the directory of the store's Pebble DB.
func (s *Store) Dir() string { return s.dir }

// MemTableSize is the size its memtable grows to before a flush, chosen
// when it opened (Options.MemTableBudget, Manager.Expect).
func (s *Store) MemTableSize() uint64 { return s.popts.MemTableSize }

// AppliedOffset is the market offset of the last record applied, or -1 when
// nothing has been applied (a new or rebuilt store). Restore reads the
// market partition from AppliedOffset()+1.
func (s *Store) AppliedOffset() int64 { return s.applied.Load() }

// Apply writes ticks and offset in ONE Pebble batch: each tick becomes a
// version of its symbol (keyed by its timestamp and offset, so applying a
// tick twice is harmless), and offset (the market offset of the last record
// the batch covers) becomes the applied offset. Either all of it is stored
// or none, so the versions and the offset never disagree, even after a
// crash. ticks may be empty to advance the offset past records that carry
// no price. Every tick's Offset must be in [0, offset].
//
// offset must be greater than AppliedOffset(); otherwise Apply returns an
// error wrapping ErrOffsetNotAfter and writes nothing.
//
// Durability follows Options.Sync: by default the batch goes to the WAL
// without an fsync, so a crash of the process or the machine may lose the
// most recent batches (never part of one); restore then resumes from the
// older offset.
func (s *Store) Apply(ticks []Tick, offset int64) error {
	unlock, err := s.lockWrite("apply", offset)
	if err != nil {
		return err
	}
	defer unlock()
	for _, t := range ticks {
		if t.Offset < 0 || t.Offset > offset {
			return fmt.Errorf("statestore: task %d: tick of %q has offset %d outside [0, %d]", s.task, t.Symbol, t.Offset, offset)
		}
	}

	b := s.db.NewBatchWithSize(batchBytes(ticks))
	defer b.Close()
	// Grouped by symbol or in batch order: see applyOrder.
	grouped := s.order.build(ticks)
	defer s.order.reset()
	if grouped {
		for _, g := range s.order.groups {
			for i := g.last; i >= 0; i = s.order.prev[i] {
				if err := setVersion(b, &ticks[i]); err != nil {
					return fmt.Errorf("statestore: task %d: batch set %q: %w", s.task, ticks[i].Symbol, err)
				}
			}
		}
	} else {
		for i := range ticks {
			if err := setVersion(b, &ticks[i]); err != nil {
				return fmt.Errorf("statestore: task %d: batch set %q: %w", s.task, ticks[i].Symbol, err)
			}
		}
	}
	if err := b.Set([]byte(offsetKey), appendOffset(nil, offset), nil); err != nil {
		return fmt.Errorf("statestore: task %d: batch set offset: %w", s.task, err)
	}
	if err := b.Commit(s.sync); err != nil {
		return fmt.Errorf("statestore: task %d: commit batch up to offset %d in %s: %w (the store is unchanged; check the disk)",
			s.task, offset, s.dir, err)
	}
	// The cache and the reader are brought up to date before the new
	// offset is published: whoever reads AppliedOffset and then looks up
	// sees at least that.
	s.dropReader()
	s.cacheMu.Lock()
	s.gen++
	for _, t := range ticks {
		if c, ok := s.latest[t.Symbol]; ok && t.newer(c) {
			// The cache keeps its own copy of the symbol (see
			// GetAsOf): t's may alias the caller's buffer.
			t.Symbol = c.Symbol
			s.latest[c.Symbol] = t
		}
	}
	s.cacheMu.Unlock()
	s.applied.Store(offset)
	return nil
}

// lockWrite takes the locks of a write of versions up to offset (Apply,
// Loader.Commit, named by what in errors): the store must be open, and
// offset after AppliedOffset(). Call unlock when done.
func (s *Store) lockWrite(what string, offset int64) (unlock func(), err error) {
	s.mu.RLock()
	if s.db == nil {
		s.mu.RUnlock()
		return nil, fmt.Errorf("statestore: %s to task %d: %w", what, s.task, ErrClosed)
	}
	s.applyMu.Lock()
	unlock = func() { s.applyMu.Unlock(); s.mu.RUnlock() }
	if prev := s.applied.Load(); offset <= prev {
		unlock()
		return nil, fmt.Errorf("statestore: %s offset %d to task %d, which is already at %d: %w",
			what, offset, s.task, prev, ErrOffsetNotAfter)
	}
	return unlock, nil
}

// setVersion adds t to b as a version, building its key and value in place.
func setVersion(b *pebble.Batch, t *Tick) error {
	op := b.SetDeferred(versionKeyLen(t.Symbol), versionValueLen)
	versionKey(op.Key[:0], t.Symbol, t.TimestampMs, t.Offset)
	appendVersionValue(op.Value[:0], t.Price, versionMeta{})
	return op.Finish()
}

// GetAsOf returns the version of symbol as of tsMs: the one with the
// greatest timestamp ≤ tsMs, and among those the greatest offset. Versions
// newer than tsMs, whenever they were applied, do not change the answer.
// See Match for what is returned when there is no such version.
func (s *Store) GetAsOf(symbol string, tsMs int64) (Tick, Match, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return Tick{}, Miss, fmt.Errorf("statestore: get from task %d: %w", s.task, ErrClosed)
	}
	s.cacheMu.RLock()
	c, cached := s.latest[symbol]
	gen := s.gen
	s.cacheMu.RUnlock()
	if cached && c.TimestampMs <= tsMs {
		return c, AsOf, nil
	}

	it, release, err := s.readSymbol(symbol)
	if err != nil {
		return Tick{}, Miss, err
	}
	defer release()
	if !cached {
		if !it.First() {
			return Tick{}, Miss, s.iterErr(it, symbol)
		}
		latest, _, err := decodeVersion(it.Key(), it.Value())
		if err != nil {
			return Tick{}, Miss, s.corrupt(err)
		}
		s.cacheMu.Lock()
		if s.gen == gen {
			if s.latest == nil {
				s.latest = map[string]Tick{}
			}
			// Keyed by the symbol read from Pebble, a string of its
			// own: the caller's may alias a buffer it would pin.
			s.latest[latest.Symbol] = latest
		}
		s.cacheMu.Unlock()
		if latest.TimestampMs <= tsMs {
			return latest, AsOf, nil
		}
	}
	if it.SeekGE(versionSeekKey(nil, symbol, tsMs)) {
		t, _, err := decodeVersion(it.Key(), it.Value())
		if err != nil {
			return Tick{}, Miss, s.corrupt(err)
		}
		return t, AsOf, nil
	}
	if err := s.iterErr(it, symbol); err != nil {
		return Tick{}, Miss, err
	}
	// Nothing at or before tsMs: late if older versions were pruned.
	if !it.Last() {
		return Tick{}, Miss, s.iterErr(it, symbol)
	}
	oldest, meta, err := decodeVersion(it.Key(), it.Value())
	if err != nil {
		return Tick{}, Miss, s.corrupt(err)
	}
	if meta.truncated() && meta.firstTs <= tsMs {
		return oldest, Late, nil
	}
	return Tick{}, Miss, nil
}

// Latest returns the newest version of symbol and whether there is one.
func (s *Store) Latest(symbol string) (Tick, bool, error) {
	t, m, err := s.GetAsOf(symbol, maxTs)
	return t, m == AsOf, err
}

const maxTs = int64(^uint64(0) >> 1)

// History returns every stored version of symbol, newest first.
func (s *Store) History(symbol string) ([]Tick, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return nil, fmt.Errorf("statestore: history of task %d: %w", s.task, ErrClosed)
	}
	it, err := s.symbolIter(symbol)
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []Tick
	for valid := it.First(); valid; valid = it.Next() {
		t, _, err := decodeVersion(it.Key(), it.Value())
		if err != nil {
			return nil, s.corrupt(err)
		}
		out = append(out, t)
	}
	return out, s.iterErr(it, symbol)
}

// Scan calls fn with the newest version of every symbol, in symbol order,
// on a consistent snapshot. It stops at and returns the first error of fn.
func (s *Store) Scan(fn func(Tick) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return fmt.Errorf("statestore: scan task %d: %w", s.task, ErrClosed)
	}
	it, err := s.allVersionsIter()
	if err != nil {
		return err
	}
	defer it.Close()
	for valid := it.First(); valid; {
		t, _, err := decodeVersion(it.Key(), it.Value())
		if err != nil {
			return s.corrupt(err)
		}
		if err := fn(t); err != nil {
			return err
		}
		valid = it.SeekGE(symbolUpper(nil, t.Symbol))
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("statestore: task %d: scan: %w", s.task, err)
	}
	return nil
}

// Prune deletes, for every symbol, the versions older than the newest
// version at or before cutMs. That one is kept, so a lookup at any time ≥
// cutMs still finds the price that was current then; it is marked with the
// timestamp of the symbol's oldest version, so that a lookup before the kept
// version but not before the symbol's first price is reported Late rather
// than Miss. Prune costs one seek per symbol, a step over each version it
// deletes and one point deletion per such version, written in one batch; it
// returns the number of symbols that had something to delete.
//
// It writes no range deletion: a range deletion per symbol per prune piled
// up in the memtable, where every new iterator fragmented all of them again
// (each symbol's ranges nest, so the fragments grow with the square of the
// prunes), and the Go heap and the CPU per tick grew without bound. A point
// deletion is an ordinary key: it is flushed with the memtable and dropped
// by compaction with the version it deletes, so a steady market keeps the
// memtables, the tables and the heap bounded (TestPruneKeepsTheStoreBounded).
func (s *Store) Prune(cutMs int64) (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return 0, fmt.Errorf("statestore: prune task %d: %w", s.task, ErrClosed)
	}
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	it, err := s.allVersionsIter()
	if err != nil {
		return 0, err
	}
	defer it.Close()
	b := s.db.NewBatch()
	defer b.Close()
	pruned, deletes := 0, 0
	var prefix, seek []byte
	for valid := it.First(); valid; valid = it.Valid() {
		sym, _, _, err := decodeVersionKey(it.Key())
		if err != nil {
			return 0, s.corrupt(err)
		}
		prefix = symbolPrefix(prefix[:0], sym)
		seek = versionSeekKey(seek[:0], sym, cutMs)
		// Every key at or after seek is a version of sym at or before
		// cutMs, or a later symbol's: the loops below leave it at the
		// next symbol's first key (or at the end).
		if !it.SeekGE(seek) || !bytes.HasPrefix(it.Key(), prefix) {
			continue
		}
		keep := bytes.Clone(it.Key())
		price, keepMeta, err := decodeVersionValue(it.Value())
		if err != nil {
			return 0, s.corrupt(fmt.Errorf("%q: %w", sym, err))
		}
		// The versions after keep are older; the last one (perhaps itself
		// the survivor of an earlier prune) says when the symbol's
		// history began.
		var oldest Tick
		var meta versionMeta
		deleted := 0
		for it.Next() && bytes.HasPrefix(it.Key(), prefix) {
			if oldest, meta, err = decodeVersion(it.Key(), it.Value()); err != nil {
				return 0, s.corrupt(err)
			}
			if err := b.Delete(it.Key(), nil); err != nil {
				return 0, fmt.Errorf("statestore: task %d: prune %q: %w", s.task, sym, err)
			}
			deleted++
		}
		if err := it.Error(); err != nil {
			return 0, s.iterErr(it, sym)
		}
		if deleted == 0 {
			continue
		}
		first := oldest.TimestampMs
		for _, m := range []versionMeta{meta, keepMeta} {
			if m.truncated() {
				first = min(first, m.firstTs)
			}
		}
		if err := b.Set(keep, appendVersionValue(nil, price, versionMeta{flags: flagTruncated, firstTs: first}), nil); err != nil {
			return 0, fmt.Errorf("statestore: task %d: prune %q: %w", s.task, sym, err)
		}
		pruned++
		deletes += deleted
	}
	if err := it.Error(); err != nil {
		return 0, fmt.Errorf("statestore: task %d: prune: %w", s.task, err)
	}
	if pruned == 0 {
		return 0, nil
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return 0, fmt.Errorf("statestore: task %d: commit prune in %s: %w", s.task, s.dir, err)
	}
	s.dropReader()
	s.flushPruned(deletes)
	return pruned, nil
}

// Prune has the memtable flushed once it deleted pruneFlushDeletes
// versions since the last flush, or pruneFlushEvery after the last flush
// when it deleted any. Until the flush, every deleted version is still in
// the memtable and the WAL next to its deletion, and each Prune (and a
// lookup before the oldest kept version) steps over all of them: a
// memtable holds hours of a quiet market's deletions, and the WAL as much
// on disk. A flush drops every version deleted in the same memtable, and
// compactions then drop the deletions. So the memtable and the WAL hold at
// most 30 s of ticks and deletions (or 50,000 deletions, or a full
// memtable, at high tick rates), besides what the market writes between
// prunes; and the memtable reaches its full size (it doubles at each
// flush from 256 KiB) within minutes, after which the heap stays flat.
const (
	pruneFlushDeletes = 50_000
	pruneFlushEvery   = 30 * time.Second
)

// flushPruned counts the versions a Prune deleted and starts a memtable
// flush, without waiting for it, when pruneFlushDeletes or pruneFlushEvery
// say so. The caller holds applyMu.
func (s *Store) flushPruned(deleted int) {
	s.prunedSinceFlush += deleted
	now := time.Now()
	if s.prunedSinceFlush < pruneFlushDeletes && now.Sub(s.flushedAt) < pruneFlushEvery {
		return
	}
	s.prunedSinceFlush, s.flushedAt = 0, now
	if _, err := s.db.AsyncFlush(); err != nil {
		s.mgr.log.Warn("statestore: flushing the memtable after pruning failed; the next prunes retry", "task", s.task, "dir", s.dir, "err", err)
	}
}

// symbolIter iterates over the versions of one symbol, newest first.
func (s *Store) symbolIter(symbol string) (*pebble.Iterator, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{
		LowerBound: symbolPrefix(nil, symbol),
		UpperBound: symbolUpper(nil, symbol),
	})
	if err != nil {
		return nil, fmt.Errorf("statestore: task %d: read %q: %w", s.task, symbol, err)
	}
	return it, nil
}

// readSymbol returns an iterator over the versions of symbol and the
// function to call when done with it: the store's kept reader when no
// other lookup holds it (made anew if a write dropped it), else a new
// iterator of its own. The caller holds s.mu for reading.
func (s *Store) readSymbol(symbol string) (*pebble.Iterator, func(), error) {
	if !s.readerMu.TryLock() {
		it, err := s.symbolIter(symbol)
		if err != nil {
			return nil, nil, err
		}
		return it, func() { it.Close() }, nil
	}
	// Pebble compares the new bounds with the last ones: they must stay
	// unchanged until the next SetBounds, hence two sets used in turn.
	b := &s.bounds[s.boundsAt]
	s.boundsAt = 1 - s.boundsAt
	b[0], b[1] = symbolPrefix(b[0][:0], symbol), symbolUpper(b[1][:0], symbol)
	if s.reader == nil {
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: b[0], UpperBound: b[1]})
		if err != nil {
			s.readerMu.Unlock()
			return nil, nil, fmt.Errorf("statestore: task %d: read %q: %w", s.task, symbol, err)
		}
		s.reader = it
	} else {
		s.reader.SetBounds(b[0], b[1])
	}
	return s.reader, s.readerMu.Unlock, nil
}

// dropReader closes the kept reader, which no longer sees the DB as it is:
// called after every write of versions.
func (s *Store) dropReader() {
	s.readerMu.Lock()
	defer s.readerMu.Unlock()
	if s.reader != nil {
		_ = s.reader.Close()
		s.reader = nil
	}
}

func (s *Store) allVersionsIter() (*pebble.Iterator, error) {
	upper := []byte(versionPrefix)
	upper[len(upper)-1]++
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(versionPrefix), UpperBound: upper})
	if err != nil {
		return nil, fmt.Errorf("statestore: task %d: iterate: %w", s.task, err)
	}
	return it, nil
}

func (s *Store) iterErr(it *pebble.Iterator, symbol string) error {
	if err := it.Error(); err != nil {
		return fmt.Errorf("statestore: task %d: read %q: %w", s.task, symbol, err)
	}
	return nil
}

func (s *Store) corrupt(err error) error {
	return fmt.Errorf("statestore: task %d in %s: %w", s.task, s.dir, err)
}

// Close closes the DB. It waits for running reads, Apply and Prune calls. A
// second Close returns ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	db := s.db
	s.db = nil
	s.mu.Unlock()
	if db == nil {
		return fmt.Errorf("statestore: close task %d: %w", s.task, ErrClosed)
	}
	s.dropReader() // no lookup holds it: they all hold s.mu
	// Every Apply has returned: the applied offset is final. Record it for
	// Manager.Held before the task can be opened again.
	applied := s.applied.Load()
	s.mgr.writeSidecar(s.dir, applied)
	s.mgr.forget(s.task, s, applied)
	if err := db.Close(); err != nil {
		return fmt.Errorf("statestore: close task %d in %s: %w", s.task, s.dir, err)
	}
	return nil
}

// errOldFormat marks a store written by an earlier version of joiner, with
// another key layout. It is rebuilt from Kafka, not migrated.
var errOldFormat = errors.New("store written by an earlier version of joiner")

// checkFormat checks that a freshly opened DB has this version's layout,
// stamping an empty DB with it. It returns an error wrapping errOldFormat
// when the DB holds data in another layout.
func checkFormat(db *pebble.DB) error {
	v, closer, err := db.Get([]byte(formatKey))
	if err == nil {
		defer closer.Close()
		if len(v) != 1 || v[0] != formatVersioned {
			return fmt.Errorf("layout %x, this joiner writes %d: %w", v, formatVersioned, errOldFormat)
		}
		return nil
	}
	if !errors.Is(err, pebble.ErrNotFound) {
		return err
	}
	it, err := db.NewIter(nil)
	if err != nil {
		return err
	}
	empty := !it.First()
	if err := it.Close(); err != nil {
		return err
	}
	if !empty {
		return fmt.Errorf("no layout version (the first layout kept only the latest price per symbol): %w", errOldFormat)
	}
	return db.Set([]byte(formatKey), []byte{formatVersioned}, pebble.Sync)
}

// readAppliedOffset reads the stored offset of a freshly opened DB.
func readAppliedOffset(db *pebble.DB) (int64, error) {
	v, closer, err := db.Get([]byte(offsetKey))
	if errors.Is(err, pebble.ErrNotFound) {
		return -1, nil
	}
	if err != nil {
		return 0, err
	}
	defer closer.Close()
	return decodeOffset(v)
}
