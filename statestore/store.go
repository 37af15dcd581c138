package statestore

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
)

// Tick is the latest price of a symbol.
type Tick struct {
	Symbol      string
	Price       float64
	TimestampMs int64
}

// Store is the Pebble DB of one task: the latest price per symbol and the
// market offset those prices reflect.
//
// Get, Scan and AppliedOffset are safe to call from any number of goroutines
// while another goroutine calls Apply; concurrent Apply calls are
// serialised. After Close every method returns ErrClosed (AppliedOffset
// keeps returning the last value).
type Store struct {
	task int
	dir  string
	mgr  *Manager
	sync *pebble.WriteOptions

	mu      sync.RWMutex // write-locked only by Close
	db      *pebble.DB   // nil once closed
	applyMu sync.Mutex   // serialises Apply
	applied atomic.Int64
}

// Task is the partition index this store holds.
func (s *Store) Task() int { return s.task }

// Dir is the directory of the store's Pebble DB.
func (s *Store) Dir() string { return s.dir }

// AppliedOffset is the market offset of the last record applied, or -1 when
// nothing has been applied (a new or rebuilt store). Restore reads the
// market partition from AppliedOffset()+1.
func (s *Store) AppliedOffset() int64 { return s.applied.Load() }

// Apply writes ticks and offset in ONE Pebble batch: for each symbol the
// last tick of the slice wins, and offset (the market offset of the last
// record the batch covers) becomes the applied offset. Either all of it is
// stored or none, so the prices and the offset never disagree, even after a
// crash. ticks may be empty to advance the offset past records that carry no
// price.
//
// offset must be greater than AppliedOffset(); otherwise Apply returns an
// error wrapping ErrOffsetNotAfter and writes nothing.
//
// Durability follows Options.Sync: by default the batch goes to the WAL
// without an fsync, so a machine crash may lose the most recent batches
// (never part of one); restore then resumes from the older offset.
func (s *Store) Apply(ticks []Tick, offset int64) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return fmt.Errorf("statestore: apply to task %d: %w", s.task, ErrClosed)
	}
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	if prev := s.applied.Load(); offset <= prev {
		return fmt.Errorf("statestore: apply offset %d to task %d, which is already at %d: %w",
			offset, s.task, prev, ErrOffsetNotAfter)
	}

	b := s.db.NewBatch()
	defer b.Close()
	var val []byte
	for _, t := range ticks {
		val = appendPrice(val[:0], t)
		if err := b.Set(priceKey(t.Symbol), val, nil); err != nil {
			return fmt.Errorf("statestore: task %d: batch set %q: %w", s.task, t.Symbol, err)
		}
	}
	if err := b.Set([]byte(offsetKey), appendOffset(nil, offset), nil); err != nil {
		return fmt.Errorf("statestore: task %d: batch set offset: %w", s.task, err)
	}
	if err := b.Commit(s.sync); err != nil {
		return fmt.Errorf("statestore: task %d: commit batch up to offset %d in %s: %w (the store is unchanged; check the disk)",
			s.task, offset, s.dir, err)
	}
	s.applied.Store(offset)
	return nil
}

// Get returns the latest price of symbol and whether there is one.
func (s *Store) Get(symbol string) (Tick, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return Tick{}, false, fmt.Errorf("statestore: get from task %d: %w", s.task, ErrClosed)
	}
	v, closer, err := s.db.Get(priceKey(symbol))
	if errors.Is(err, pebble.ErrNotFound) {
		return Tick{}, false, nil
	}
	if err != nil {
		return Tick{}, false, fmt.Errorf("statestore: task %d: get %q: %w", s.task, symbol, err)
	}
	defer closer.Close()
	t, err := decodePrice(symbol, v)
	if err != nil {
		return Tick{}, false, fmt.Errorf("statestore: task %d in %s: %w", s.task, s.dir, err)
	}
	return t, true, nil
}

// Scan calls fn with every stored price in symbol order, on a consistent
// snapshot. It stops at and returns the first error of fn.
func (s *Store) Scan(fn func(Tick) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return fmt.Errorf("statestore: scan task %d: %w", s.task, ErrClosed)
	}
	upper := []byte(pricePrefix)
	upper[len(upper)-1]++
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(pricePrefix), UpperBound: upper})
	if err != nil {
		return fmt.Errorf("statestore: task %d: scan: %w", s.task, err)
	}
	for valid := it.First(); valid; valid = it.Next() {
		sym := string(bytes.TrimPrefix(it.Key(), []byte(pricePrefix)))
		t, err := decodePrice(sym, it.Value())
		if err != nil {
			it.Close()
			return fmt.Errorf("statestore: task %d in %s: %w", s.task, s.dir, err)
		}
		if err := fn(t); err != nil {
			it.Close()
			return err
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("statestore: task %d: scan: %w", s.task, err)
	}
	return nil
}

// Close closes the DB. It waits for running Get, Scan and Apply calls. A
// second Close returns ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	db := s.db
	s.db = nil
	s.mu.Unlock()
	if db == nil {
		return fmt.Errorf("statestore: close task %d: %w", s.task, ErrClosed)
	}
	s.mgr.forget(s.task, s)
	if err := db.Close(); err != nil {
		return fmt.Errorf("statestore: close task %d in %s: %w", s.task, s.dir, err)
	}
	return nil
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
