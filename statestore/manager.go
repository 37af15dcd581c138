// Package statestore keeps joiner's per-task state: one Pebble DB per task
// (a partition index) holding the latest price of each symbol and the market
// offset those prices reflect, written together in one batch.
//
// A Manager owns the Pebble side: the shared block cache, where task
// directories live (<state-dir>/<group>/task-<p>, placed across one or more
// state dirs), rebuilding stores that fail to open, and deleting the state
// of tasks this member no longer owns. It knows nothing about the group
// protocol or Kafka; restoring a store from the market topic is the
// caller's job, starting at Store.AppliedOffset()+1.
package statestore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/joiner-dev/joiner/internal/lograte"
)

// Placement strategies for Options.Placement.
const (
	// PlacementFreeBytes puts a new task dir in the state dir with the most
	// free bytes (KIP-178's "size" strategy). If free space cannot be read
	// for some dir, it falls back to PlacementTasks.
	PlacementFreeBytes = "free-bytes"
	// PlacementTasks puts a new task dir in the state dir holding the fewest
	// task dirs of the group, as Kafka places partitions across log.dirs.
	PlacementTasks = "tasks"
)

// DefaultOpenTables is Options.OpenTables' default.
const DefaultOpenTables = 512

// OpenFilesPerStore bounds the files an open task store holds besides its
// tables (in the shared file cache, Options.OpenTables): its LOCK, its
// write-ahead log and its MANIFEST (3, measured from /proc/self/fd with
// Pebble v2.1.7; its directories are opened only to be synced,
// lazydir.go), and one more while a WAL or MANIFEST is replaced.
const OpenFilesPerStore = 4

// DefaultCacheBytes is the default size of the shared block cache.
const DefaultCacheBytes = 256 << 20

// DefaultPlacement is Options.Placement's default.
const DefaultPlacement = PlacementFreeBytes

// NoMinFreeBytes is the Options.MinFreeBytes that turns the free-space
// check off (any negative value does): zero is the default, as in every
// Options field, so "no check" needs a value of its own.
const NoMinFreeBytes int64 = -1

var (
	// ErrClosed is returned by the methods of a closed Store or Manager.
	ErrClosed = errors.New("statestore: closed")
	// ErrTaskOpen is returned by OpenTask and RemoveTask for a task whose
	// store is open in this Manager; close the Store first.
	ErrTaskOpen = errors.New("task store is open")
	// ErrOffsetNotAfter is returned by Apply when the offset does not move
	// past the applied offset; nothing is written.
	ErrOffsetNotAfter = errors.New("offset is not after the applied offset")
)

// Options configures a Manager.
type Options struct {
	// Dirs are the state dirs. A task's DB lives in exactly one of them, at
	// <dir>/<Group>/task-<p>. Required, no duplicates.
	Dirs []string
	// Group names the consumer group; it is one path element. Required.
	Group string
	// MemTableBudget bounds the memtables of the Manager's stores
	// together: a store opened while the worker expects n stores
	// (Manager.Expect) grows its memtable to at most MemTableBudget/n,
	// between MinMemTableBytes and MaxMemTableBytes. A worker of a few
	// tasks gives each the largest; one of a thousand gives each the
	// smallest, so that an idle task's memtable costs 64 KiB of heap
	// instead of Pebble's 256 KiB start. Default: DefaultMemTableBudget.
	MemTableBudget int64
	// CacheBytes is the Pebble block cache shared by all tasks. Pebble's own
	// default is effectively empty: a probe measured 52k Gets/s without a
	// cache against 250k/s with a 256 MiB one. Default: DefaultCacheBytes.
	CacheBytes int64
	// OpenTables bounds the table files open across every task store of
	// the Manager: the stores share one Pebble file cache of this many
	// files, so an idle store holds only the files it cannot close (its
	// lock, WAL, MANIFEST and dir; see OpenFilesPerStore). Default:
	// DefaultOpenTables.
	OpenTables int
	// Placement chooses the dir of a task that has none yet:
	// PlacementFreeBytes or PlacementTasks. A task dir that already exists in
	// any of Dirs is always reused. Default: PlacementFreeBytes.
	Placement string
	// Sync makes every Apply fsync the WAL before returning. Default: false,
	// the batch is written to the WAL without fsync; a machine crash may then
	// lose the latest batches (whole batches only: prices and offset stay
	// consistent) and restore re-reads them from Kafka.
	Sync bool
	// Logger receives the Manager's logs and Pebble's (Pebble's info lines
	// at Debug). Default: slog.Default().
	Logger *slog.Logger
	// FS is the filesystem, e.g. vfs.NewMem() in tests. Default: vfs.Default.
	FS vfs.FS
	// OnRebuild, if set, is called (synchronously, from OpenTask) each time a
	// store that failed to open was moved aside and replaced by an empty
	// one; err is the open failure.
	OnRebuild func(task int, err error)

	// InstanceID is written into the lock file of each state dir, so that a
	// second worker on the same dir and group is told who holds it.
	InstanceID string
	// CorruptRetention is how long moved-aside stores (task-<p>.corrupt-*)
	// are kept before Open or a rebuild deletes them. Default:
	// DefaultCorruptRetention.
	CorruptRetention time.Duration
	// Fatal is called when Pebble reports corruption (or a fatal error) in
	// a task store at run time, after a marker recording it was written to
	// the task dir: the next OpenTask moves that store aside and rebuilds
	// it. Pebble expects it not to return. Default: exit the process with
	// status 1. A write the disk refused (a full disk) goes the same way
	// (diskfull.go).
	Fatal func(task int, err error)

	// MinFreeBytes is the free space a state dir must have before a store
	// opens there (and so before its restore starts); below it the open
	// fails with ErrDiskFull (diskfull.go). Default: DefaultMinFreeBytes;
	// negative (NoMinFreeBytes): no check.
	MinFreeBytes int64
	// OpenTimeout bounds how long OpenTask waits for Pebble to open a
	// store (its WAL replay). Default: DefaultOpenTimeout.
	OpenTimeout time.Duration
	// CloseWait bounds how long Close waits for the goroutines of opens
	// that OpenTimeout abandoned before it returns ErrOpenStuck.
	// Default: DefaultCloseWait.
	CloseWait time.Duration
}

// Validate reports the first problem with o, ignoring defaults.
func (o *Options) Validate() error {
	if len(o.Dirs) == 0 {
		return errors.New("statestore: no state dir given; set at least one")
	}
	seen := map[string]bool{}
	for _, d := range o.Dirs {
		if d == "" {
			return errors.New("statestore: empty state dir in the list")
		}
		if seen[d] {
			return fmt.Errorf("statestore: state dir %q given twice", d)
		}
		seen[d] = true
	}
	if o.Group == "" || o.Group == "." || o.Group == ".." || strings.ContainsAny(o.Group, `/\`) {
		return fmt.Errorf("statestore: group %q is not a usable directory name", o.Group)
	}
	if o.OpenTimeout < 0 {
		return fmt.Errorf("statestore: open timeout %s is negative", o.OpenTimeout)
	}
	if o.CloseWait < 0 {
		return fmt.Errorf("statestore: close wait %s is negative", o.CloseWait)
	}
	if o.OpenTables < 0 {
		return fmt.Errorf("statestore: open tables %d is negative", o.OpenTables)
	}
	if o.CacheBytes < 0 {
		return fmt.Errorf("statestore: cache size %d bytes is negative", o.CacheBytes)
	}
	if o.MemTableBudget < 0 {
		return fmt.Errorf("statestore: memtable budget %d bytes is negative", o.MemTableBudget)
	}
	switch o.Placement {
	case "", PlacementFreeBytes, PlacementTasks:
	default:
		return fmt.Errorf("statestore: unknown placement %q; use %q or %q",
			o.Placement, PlacementFreeBytes, PlacementTasks)
	}
	return nil
}

// withDefaults returns o with its Dirs copied and every zero field set to
// the default its doc comment names: the one place statestore's defaults
// are applied.
func (o Options) withDefaults() Options {
	o.Dirs = slices.Clone(o.Dirs)
	if o.OpenTables == 0 {
		o.OpenTables = DefaultOpenTables
	}
	if o.CacheBytes == 0 {
		o.CacheBytes = DefaultCacheBytes
	}
	if o.MemTableBudget == 0 {
		o.MemTableBudget = DefaultMemTableBudget
	}
	if o.Placement == "" {
		o.Placement = DefaultPlacement
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.CorruptRetention <= 0 {
		o.CorruptRetention = DefaultCorruptRetention
	}
	if o.Fatal == nil {
		o.Fatal = exitOne
	}
	if o.MinFreeBytes == 0 {
		o.MinFreeBytes = DefaultMinFreeBytes
	}
	if o.OpenTimeout == 0 {
		o.OpenTimeout = DefaultOpenTimeout
	}
	if o.CloseWait == 0 {
		o.CloseWait = DefaultCloseWait
	}
	return o
}

// Manager opens the per-task stores of one group. Its methods are safe for
// concurrent use.
type Manager struct {
	opts  Options // defaults filled
	fs    vfs.FS
	log   *slog.Logger
	cache *pebble.Cache
	// files is the table file cache every store shares
	// (Options.OpenTables).
	files    *pebble.FileCache
	rebuilds atomic.Int64
	expect   atomic.Int64 // the stores the worker expects to hold (Expect)

	locks       []*dirLock       // lock.go
	corruptDirs atomic.Int64     // corrupt.go
	byReason    map[string]int64 // rebuilds by reason; guarded by mu
	override    map[int]string   // task dir chosen by Rebuild; guarded by mu
	held        map[int]int64    // Held's cache of closed stores (held.go); guarded by mu

	rl    *lograte.Limiter // Pebble's repeated errors (diskfull.go)
	bg    sync.WaitGroup   // the goroutines of pebble.Open (diskfull.go)
	stuck map[string]bool  // dirs of abandoned opens; guarded by mu

	mu     sync.Mutex
	closed bool
	open   map[int]*Store // a nil value marks a task being opened
}

// Open validates opts, creates <dir>/<group> in every state dir, checks
// that it can be written and fsynced and locks it (check.go: a dir that
// cannot be used fails Open, naming the dir and the errno), and allocates
// the shared block cache. Close the Manager to release it.
func Open(opts Options) (*Manager, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	m := &Manager{
		opts: opts,
		fs:   opts.FS,
		log:  opts.Logger.With("group", opts.Group),
		open: map[int]*Store{},
	}
	m.rl = lograte.New(m.log, lograte.DefaultInterval)
	for _, d := range opts.Dirs { // fail at start on a dir that cannot be used (check.go)
		if err := checkDir(m.fs, m.groupDir(d)); IsDiskFull(err) {
			m.log.Warn("statestore: a state dir is full; the tasks placed there fail on this worker and move to others until space is freed",
				"dir", m.groupDir(d), "err", err)
		} else if err != nil {
			return nil, err
		}
	}
	if err := m.lockGroupDirs(); err != nil {
		return nil, err
	}
	m.sweepCorrupt()
	m.cache = pebble.NewCache(opts.CacheBytes)
	m.files = pebble.NewFileCache(fileCacheShards, opts.OpenTables)
	return m, nil
}

// Rebuilds counts the stores that failed to open and were replaced by
// empty ones since Open.
func (m *Manager) Rebuilds() int64 { return m.rebuilds.Load() }

// Close closes every store still open, then releases the block cache.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	m.closed = true
	var stores []*Store
	for _, s := range m.open {
		if s != nil {
			stores = append(stores, s)
		}
	}
	m.mu.Unlock()

	var errs []error
	for _, s := range stores {
		if err := s.Close(); err != nil && !errors.Is(err, ErrClosed) {
			errs = append(errs, err)
		}
	}
	if err := m.waitOpens(); err != nil { // abandoned opens (diskfull.go)
		errs = append(errs, err)
	}
	m.cache.Unref() // each open DB holds its own reference
	m.files.Unref()
	m.unlockGroupDirs()
	return errors.Join(errs...)
}

// OpenTask opens the store of task, creating it if it has no dir yet.
//
// If an existing store fails to open or its applied offset cannot be read
// (corruption, an unreadable format), its dir is renamed to
// task-<p>.corrupt-<unixnano> beside it for inspection, the failure is
// logged at Warn and counted (Rebuilds, OnRebuild), and a fresh empty store
// is returned: AppliedOffset is -1 and the caller restores it from Kafka.
// A store locked by another process is never moved; that is an error.
//
// The caller must Close the Store. Opening a task that is already open in
// this Manager returns ErrTaskOpen.
//
// A store whose state dir is full (under MinFreeBytes free, or Pebble
// reports ENOSPC or EDQUOT) or that does not open within OpenTimeout is
// neither moved nor rebuilt: the error wraps ErrDiskFull or ErrOpenTimeout
// (diskfull.go).
func (m *Manager) OpenTask(task int) (*Store, error) {
	return m.OpenTaskContext(context.Background(), task)
}

// OpenTaskContext is OpenTask, giving up waiting for Pebble when ctx ends.
func (m *Manager) OpenTaskContext(ctx context.Context, task int) (*Store, error) {
	if task < 0 {
		return nil, fmt.Errorf("statestore: task %d is negative", task)
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, fmt.Errorf("statestore: open task %d: %w", task, ErrClosed)
	}
	if _, ok := m.open[task]; ok {
		m.mu.Unlock()
		return nil, fmt.Errorf("statestore: open task %d: %w", task, ErrTaskOpen)
	}
	dir, err := m.placeLocked(task)
	if err != nil {
		m.mu.Unlock()
		return nil, err
	}
	m.dropSidecarLocked(task, dir)
	m.open[task] = nil // reserve while opening outside the lock
	m.mu.Unlock()

	s, err := m.openOrRebuild(ctx, task, dir)

	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		delete(m.open, task)
		return nil, err
	}
	if m.closed {
		delete(m.open, task)
		s.db.Close()
		return nil, fmt.Errorf("statestore: open task %d: %w", task, ErrClosed)
	}
	m.open[task] = s
	return s, nil
}

func (m *Manager) openOrRebuild(ctx context.Context, task int, dir string) (*Store, error) {
	reason := RebuildOpenFailed
	var openErr error
	var s *Store
	if what, ok := m.marked(dir); ok {
		reason, openErr = RebuildCorruption, fmt.Errorf("%w: recorded at run time: %s", ErrCorrupt, what)
	} else if s, openErr = m.openStore(ctx, task, dir); openErr == nil {
		return s, nil
	}
	if notTheStore(openErr) { // the disk or the wait failed, not the store: keep it
		return nil, openErr
	}
	if errors.Is(openErr, errOldFormat) {
		return m.rebuildOldFormat(task, dir, openErr)
	}
	// Never move a store another process (or Manager) has open.
	lock, err := m.fs.Lock(m.fs.PathJoin(dir, "LOCK"))
	if err != nil {
		return nil, fmt.Errorf("statestore: open task %d in %s: %w (its lock is held too: %v; is another joiner using this state dir?)",
			task, dir, openErr, err)
	}
	lock.Close()

	aside := dir + ".corrupt-" + strconv.FormatInt(time.Now().UnixNano(), 10)
	if err := m.fs.Rename(dir, aside); err != nil {
		return nil, fmt.Errorf("statestore: open task %d in %s: %w; moving it aside to %s also failed: %v (remove the dir by hand to rebuild it from Kafka)",
			task, dir, openErr, aside, err)
	}
	m.countRebuild(reason)
	m.sweepCorrupt()
	m.log.Warn("statestore: task store failed to open; moved it aside and rebuilding from Kafka",
		"task", task, "dir", dir, "moved_to", aside, "reason", reason, "err", openErr)
	if m.opts.OnRebuild != nil {
		m.opts.OnRebuild(task, openErr)
	}
	if err := m.fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("statestore: recreate %s for task %d: %w", dir, task, err)
	}
	s, err = m.openStore(ctx, task, dir)
	if err != nil {
		return nil, fmt.Errorf("statestore: open fresh store for task %d in %s after moving the old one to %s: %w",
			task, dir, aside, err)
	}
	return s, nil
}

// fileCacheShards is the shared file cache's shard count: Pebble's
// default is 2×GOMAXPROCS, each shard holding its share of the bound.
const fileCacheShards = 4

// MaxMemTableBytes is the size the memtable of a task grows to before it
// is flushed, when the worker holds few tasks (Options.MemTableBudget).
// It is Pebble's default, 4 MiB, which starts each memtable at 256 KiB
// and doubles it at each rotation. Joiner is built without cgo, so each
// memtable's arena is allocated whole on the Go heap: a task holds up to
// three (the one written, one being flushed, one kept for reuse), 12 MiB.
// An earlier 32 MiB (fewer flushes for a restore applied batch by batch)
// took a task's heap to ~100 MiB for a few MiB of history; large
// restores bulk-load tables (Loader) and use no memtable, and
// BenchmarkRestoreStore/apply measured 0.89-0.98 CPU-s per 1M ticks with
// 4 MiB against 0.78-0.93 with 32 MiB (2 cores under load 10).
const MaxMemTableBytes = 4 << 20

// MinMemTableBytes is the smallest memtable a task gets, in a worker of
// many tasks: Pebble starts a memtable at the smaller of 256 KiB and its
// size, so an idle task's arena is 64 KiB of heap, not 256 KiB
// (TestIdleStoreHeap). A busy task flushes a table every 64 KiB of ticks.
const MinMemTableBytes = 64 << 10

// DefaultMemTableBudget is the default of Options.MemTableBudget: 16 tasks
// or fewer get MaxMemTableBytes each, 1,024 get MinMemTableBytes.
const DefaultMemTableBudget = 64 << 20

// storeHeapBytes is the Go heap an open store holds besides its memtable
// arena, whatever its load: Pebble's WAL writer with its block, its commit
// pipeline, its MANIFEST writer, its cleanup manager
// (TestHeldHeapBytes measures it).
const storeHeapBytes = 235 << 10

// pebbleFirstMemTable is the size Pebble starts a memtable at when its
// MemTableSize is larger.
const pebbleFirstMemTable = 256 << 10

// HeldHeapBytes is about how much Go heap the open stores hold whatever
// their load: per store storeHeapBytes and its first memtable's arena
// (joiner is built without cgo: Pebble's arenas are Go heap). The
// collector's target is set over the rest (internal/gctune.Tune).
func (m *Manager) HeldHeapBytes() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var n int64
	for _, s := range m.open {
		if s != nil {
			n += storeHeapBytes + int64(min(s.popts.MemTableSize, pebbleFirstMemTable))
		}
	}
	return n
}

// Expect tells the Manager that the worker is about to hold n stores (its
// active and standby tasks): the stores opened afterwards size their
// memtables for n (Options.MemTableBudget). Stores already open keep
// theirs.
func (m *Manager) Expect(n int) { m.expect.Store(int64(n)) }

// memTableSize is the memtable size of a store opened now.
func (m *Manager) memTableSize() uint64 {
	return memTableSizeFor(m.opts.MemTableBudget, m.expect.Load())
}

// memTableSizeFor is budget shared by n stores, between MinMemTableBytes
// and MaxMemTableBytes.
func memTableSizeFor(budget, n int64) uint64 {
	return uint64(min(max(budget/max(n, 1), MinMemTableBytes), MaxMemTableBytes))
}

func (m *Manager) openStore(ctx context.Context, task int, dir string) (*Store, error) {
	if err := m.checkFree(task, dir); err != nil {
		return nil, err
	}
	ev := newStoreEvents()
	popts := &pebble.Options{
		Cache:        m.cache,
		FileCache:    m.files,
		MemTableSize: m.memTableSize(),
		FS:           &faultFS{FS: m.fs, hit: func(err error) { m.writeFailed(task, dir, ev, err) }},
		Logger: pebbleLogger{l: m.log.With("task", task), rl: m.rl, task: task, fatal: func(msg string) {
			if diskFullText(msg) {
				m.writeFault(task, dir, fmt.Errorf("%w: %s", ErrDiskFull, msg))
				return
			}
			m.corruption(task, dir, msg)
		}},
		EventListener: m.eventListener(task, dir, ev),
	}
	popts.EnsureDefaults() // what Open would use; Loader's tables are written with them
	m.removeLoadTables(task, dir)
	var off int64 // written by the open's goroutine, read once it returned
	db, err := m.openDB(ctx, task, dir, popts, ev, func(db *pebble.DB) error {
		if err := checkFormat(db); err != nil {
			return err
		}
		var err error
		if off, err = readAppliedOffset(db); err != nil {
			return fmt.Errorf("read the applied offset: %w", err)
		}
		return nil
	})
	if err != nil { // an abandoned open stays "opening": its disk errors never exit
		return nil, fmt.Errorf("statestore: open task %d in %s: %w", task, dir, err)
	}
	ev.opening.Store(false)
	wo := pebble.NoSync
	if m.opts.Sync {
		wo = pebble.Sync
	}
	s := &Store{task: task, dir: dir, mgr: m, db: db, popts: popts, sync: wo, flushedAt: time.Now()}
	s.applied.Store(off)
	return s, nil
}

// rebuildOldFormat replaces a store written by an earlier version of joiner
// with an empty one, restored from Kafka by the caller: once, since the new
// store has this version's layout.
func (m *Manager) rebuildOldFormat(task int, dir string, why error) (*Store, error) {
	if err := m.fs.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("statestore: task %d: delete the old-format store %s: %w (delete it by hand; it is rebuilt from Kafka)", task, dir, err)
	}
	if err := m.fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("statestore: recreate %s for task %d: %w", dir, task, err)
	}
	m.rebuilds.Add(1)
	m.log.Info("statestore: the task store was written by an earlier version of joiner; rebuilding it from Kafka once",
		"task", task, "dir", dir, "reason", why)
	if m.opts.OnRebuild != nil {
		m.opts.OnRebuild(task, why)
	}
	return m.openStore(context.Background(), task, dir)
}

// forget drops s from the open set, remembering for Held the offset it
// was closed at; called by Store.Close.
func (m *Manager) forget(task int, s *Store, applied int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.open[task] == s {
		delete(m.open, task)
		if m.held == nil {
			m.held = map[int]int64{}
		}
		m.held[task] = applied + 1
	}
}

// RemoveTask deletes the state of a task this member no longer owns, in
// every state dir, including copies moved aside as corrupt. Removing a task
// with no state is not an error.
func (m *Manager) RemoveTask(task int) error {
	if task < 0 {
		return fmt.Errorf("statestore: task %d is negative", task)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return fmt.Errorf("statestore: remove task %d: %w", task, ErrClosed)
	}
	if _, ok := m.open[task]; ok {
		return fmt.Errorf("statestore: remove task %d: %w", task, ErrTaskOpen)
	}
	name := taskDirName(task)
	delete(m.override, task)
	delete(m.held, task)
	for _, d := range m.opts.Dirs {
		gdir := m.groupDir(d)
		names, err := m.fs.List(gdir)
		if err != nil {
			if isNotExist(err) {
				continue
			}
			return fmt.Errorf("statestore: remove task %d: list %s: %w", task, gdir, err)
		}
		for _, n := range names {
			if n != name && n != name+".rebuilt" && !strings.HasPrefix(n, name+".corrupt-") {
				continue
			}
			p := m.fs.PathJoin(gdir, n)
			if err := m.fs.RemoveAll(p); err != nil {
				return fmt.Errorf("statestore: remove task %d: delete %s: %w", task, p, err)
			}
			m.log.Info("statestore: removed state of a task not owned any more", "task", task, "dir", p)
		}
	}
	return nil
}

// Tasks returns the tasks that have a dir in some state dir, ascending,
// whether open or not. Moved-aside copies are not listed.
func (m *Manager) Tasks() ([]int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.tasksLocked(nil)
}

// tasksLocked returns the tasks that have a dir in some state dir and the
// extra ones given, ascending, without repeats. m.mu must be held.
func (m *Manager) tasksLocked(extra []int) ([]int, error) {
	tasks := extra
	for _, d := range m.opts.Dirs {
		ts, err := m.tasksIn(d)
		if err != nil {
			return nil, err
		}
		tasks = append(tasks, ts...)
	}
	slices.Sort(tasks)
	return slices.Compact(tasks), nil
}

// placeLocked returns the dir of task, creating it where the placement
// strategy says if it exists nowhere. m.mu must be held, so that concurrent
// placements see each other's dirs.
func (m *Manager) placeLocked(task int) (string, error) {
	if p, ok := m.override[task]; ok {
		if fi, err := m.fs.Stat(p); err == nil && fi.IsDir() {
			return p, nil
		}
	}
	var found []string
	for _, d := range m.opts.Dirs {
		p := m.taskDir(d, task)
		if fi, err := m.fs.Stat(p); err == nil && fi.IsDir() {
			found = append(found, p)
		}
	}
	if len(found) > 0 {
		if len(found) > 1 {
			m.log.Warn("statestore: task has a dir in more than one state dir; using the first, delete the others",
				"task", task, "using", found[0], "ignored", found[1:])
		}
		return found[0], nil
	}

	dir, err := m.chooseDir()
	if err != nil {
		return "", fmt.Errorf("statestore: place task %d: %w", task, err)
	}
	p := m.taskDir(dir, task)
	if err := m.fs.MkdirAll(p, 0o755); err != nil {
		return "", fmt.Errorf("statestore: create %s for task %d: %w (check that the state dir is writable)", p, task, err)
	}
	m.log.Debug("statestore: placed new task dir", "task", task, "dir", p, "placement", m.opts.Placement)
	return p, nil
}

// chooseDir picks the state dir of a new task. Ties go to the dir listed
// first.
// freeBytes is the space left to the worker in dir (the FS's
// GetDiskUsage; Options.FS may be a test's wrapper of it).
func (m *Manager) freeBytes(dir string) (uint64, error) {
	u, err := m.fs.GetDiskUsage(dir)
	return u.AvailBytes, err
}

func (m *Manager) chooseDir() (string, error) {
	if len(m.opts.Dirs) == 1 {
		return m.opts.Dirs[0], nil
	}
	if m.opts.Placement == PlacementFreeBytes {
		best, bestFree := "", uint64(0)
		for _, d := range m.opts.Dirs {
			free, err := m.freeBytes(d)
			if err != nil {
				m.log.Warn("statestore: cannot read free space; placing by task count instead",
					"dir", d, "err", err)
				best = ""
				break
			}
			if best == "" || free > bestFree {
				best, bestFree = d, free
			}
		}
		if best != "" {
			return best, nil
		}
	}
	best, bestN := "", 0
	for _, d := range m.opts.Dirs {
		ts, err := m.tasksIn(d)
		if err != nil {
			return "", err
		}
		if best == "" || len(ts) < bestN {
			best, bestN = d, len(ts)
		}
	}
	return best, nil
}

// tasksIn lists the task dirs of the group in state dir d.
func (m *Manager) tasksIn(d string) ([]int, error) {
	gdir := m.groupDir(d)
	names, err := m.fs.List(gdir)
	if err != nil {
		if isNotExist(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("statestore: list %s: %w", gdir, err)
	}
	var tasks []int
	for _, n := range names {
		if t, ok := parseTaskDirName(n); ok {
			if fi, err := m.fs.Stat(m.fs.PathJoin(gdir, n)); err == nil && fi.IsDir() {
				tasks = append(tasks, t)
			}
		}
	}
	return tasks, nil
}

func (m *Manager) groupDir(d string) string { return m.fs.PathJoin(d, m.opts.Group) }

func (m *Manager) taskDir(d string, task int) string {
	return m.fs.PathJoin(m.groupDir(d), taskDirName(task))
}

func taskDirName(task int) string { return "task-" + strconv.Itoa(task) }

// parseTaskDirName accepts exactly the names taskDirName produces.
func parseTaskDirName(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, "task-")
	if !ok {
		return 0, false
	}
	t, err := strconv.Atoi(s)
	if err != nil || t < 0 || taskDirName(t) != name {
		return 0, false
	}
	return t, true
}

func isNotExist(err error) bool { return errors.Is(err, os.ErrNotExist) }
