package statestore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/joiner-dev/joiner/internal/fielderr"
)

// Full disks and opens that do not return.
//
//   - Before a store opens (OpenTask, Rebuild), its state dir must have
//     MinFreeBytes free (statfs). Below that the open fails with an error
//     wrapping ErrDiskFull and ENOSPC, at once: the caller fails the task
//     here and releases it (join/restore_faults.go), and a restore never
//     starts on a disk it would fill.
//   - pebble.Open runs in a goroutine the Manager owns, for at most
//     OpenTimeout, and the caller's context can end the wait. Pebble's open
//     cannot be cancelled: when the wait ends first (or when Pebble reports
//     a full disk while opening, since its WAL-replay flush retries that
//     for ever), the open is abandoned: the error wraps ErrOpenTimeout (or
//     ErrDiskFull), the dir is not opened again by this Manager, and the
//     goroutine closes the DB if Pebble ever returns it. Close waits for
//     such goroutines for Options.CloseWait at most, then returns ErrOpenStuck: the
//     process should exit 1 (node.Run returns the error, joiner exits 1).
//   - While a store is open, a write of its WAL that fails (any error), or
//     a write, sync or create of its other files that fails for want of
//     space (ENOSPC, EDQUOT), is caught in the write itself (faultFS,
//     below), before Pebble sees the error: writeFault records a
//     JOINER-CORRUPT marker (when the disk still takes it), logs one ERROR
//     line naming the task, the dir and the errno, and calls
//     Options.Fatal, which by default exits 1. Left to Pebble, a failed
//     WAL write panics in the writer's goroutine, and a failed WAL rotation
//     unlocks a mutex twice while panicking: a fatal error of the Go
//     runtime (exit 2) that no recover can stop. So Fatal must not return:
//     if it does, Pebble goes on to that panic. A disk-full background
//     error and Pebble's fatal log take the same path. The next OpenTask
//     moves a marked store aside and rebuilds it from Kafka (after the
//     free-space check).
//   - Repeated Pebble errors are logged through a rate limiter (lograte):
//     one line per task and kind per interval, with the count suppressed.

// DefaultMinFreeBytes is the default of Options.MinFreeBytes: two memtables,
// room for one flush and the WAL written meanwhile.
const DefaultMinFreeBytes = 2 * MaxMemTableBytes

// DefaultOpenTimeout is the default of Options.OpenTimeout.
const DefaultOpenTimeout = time.Minute

// DefaultCloseWait is the default of Options.CloseWait.
const DefaultCloseWait = 5 * time.Second

var (
	// ErrDiskFull is wrapped by the errors of a store that cannot open or
	// be written because its state dir is full (under MinFreeBytes free,
	// ENOSPC, EDQUOT). IsDiskFull tests for it and for those errnos.
	ErrDiskFull = errors.New("state dir is full")
	// ErrOpenTimeout is wrapped by OpenTask's error when Pebble did not
	// open the store within OpenTimeout.
	ErrOpenTimeout = errors.New("task store did not open in time")
	// ErrOpenStuck is returned (wrapped) by Close when an abandoned open
	// still has not returned, and by OpenTask for its dir.
	ErrOpenStuck = errors.New("an abandoned task store open has not returned")
)

// IsDiskFull reports whether err means a full disk or quota.
func IsDiskFull(err error) bool {
	return errors.Is(err, ErrDiskFull) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// notTheStore reports whether an open failed for a reason outside the
// store (a full disk, a wait given up), so that moving it aside and
// rebuilding it would not help.
func notTheStore(err error) bool {
	return IsDiskFull(err) || errors.Is(err, ErrOpenTimeout) || errors.Is(err, ErrOpenStuck) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// diskFullText reports whether a Pebble message (a fatal log) is about a
// full disk; Pebble formats the error into the text.
func diskFullText(msg string) bool {
	return strings.Contains(msg, syscall.ENOSPC.Error()) || strings.Contains(msg, syscall.EDQUOT.Error())
}

// checkFree fails when dir has less than MinFreeBytes free. A dir whose
// free space cannot be read (an in-memory FS) is not checked.
func (m *Manager) checkFree(task int, dir string) error {
	min := m.opts.MinFreeBytes
	if min < 0 {
		return nil
	}
	free, err := m.freeBytes(dir)
	if err != nil {
		return nil
	}
	if free < uint64(min) {
		return fielderr.Errorf("statestore: task %d: %s has %d bytes free, under the %d a store needs ({MinFreeBytes}): %w (%w); free space there or give another state dir",
			task, dir, free, min, ErrDiskFull, syscall.ENOSPC)
	}
	return nil
}

// storeEvents is what the Pebble hooks of one store know: whether it is
// still opening, and where a disk-full error met then goes.
type storeEvents struct {
	opening  atomic.Bool
	diskErr  chan error // capacity 1
	failures atomic.Int64
}

func newStoreEvents() *storeEvents {
	ev := &storeEvents{diskErr: make(chan error, 1)}
	ev.opening.Store(true)
	return ev
}

// writeFailed handles a write the disk refused to a store: a WAL write,
// or a write or create of its files that failed with ENOSPC or EDQUOT
// (faultFS), or a disk-full background error of Pebble. While the store opens, the open is told (it gives
// up) and the writer is slowed down (Pebble retries a failed flush at once
// and for ever, from its own goroutine). Once open, it is a write fault:
// marker, one ERROR line, Options.Fatal. That happens here, in the write
// that failed, before Pebble sees the error: Pebble panics on a failed WAL
// write, and on a failed WAL rotation its panic unlocks a mutex twice, a
// fatal error of the runtime (exit 2) that no recover can stop.
func (m *Manager) writeFailed(task int, dir string, ev *storeEvents, err error) {
	if !ev.opening.Load() {
		m.writeFault(task, dir, err)
		return
	}
	select {
	case ev.diskErr <- err:
	default:
	}
	n := ev.failures.Add(1)
	// Not backoff.Do: no retry here, a growing pause that slows Pebble's own retry of the failed write (on Pebble's goroutine, which has no context).
	time.Sleep(min(10*time.Millisecond<<min(n, 10), time.Second))
}

// faultFS is the FS of one store's Pebble: every error of a write, sync or
// create that says the disk is full, and every write or sync error of a
// WAL file, goes to hit first.
type faultFS struct {
	vfs.FS
	hit func(error)
}

func (f *faultFS) check(err error) error {
	if err != nil && IsDiskFull(err) {
		f.hit(err)
	}
	return err
}

func (f *faultFS) file(name string, file vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, f.check(err)
	}
	return faultFile{File: file, fs: f, wal: strings.HasSuffix(name, ".log")}, nil
}

func (f *faultFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	file, err := f.FS.Create(name, c)
	return f.file(name, file, err)
}

func (f *faultFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	file, err := f.FS.ReuseForWrite(oldname, newname, c)
	return f.file(newname, file, err)
}

func (f *faultFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	file, err := f.FS.OpenReadWrite(name, c, opts...)
	return f.file(name, file, err)
}

func (f *faultFS) Link(oldname, newname string) error { return f.check(f.FS.Link(oldname, newname)) }

func (f *faultFS) Rename(oldname, newname string) error {
	return f.check(f.FS.Rename(oldname, newname))
}

func (f *faultFS) MkdirAll(dir string, perm os.FileMode) error {
	return f.check(f.FS.MkdirAll(dir, perm))
}

func (f *faultFS) Unwrap() vfs.FS { return f.FS }

type faultFile struct {
	vfs.File
	fs  *faultFS
	wal bool // a WAL file: every write error is fatal to Pebble
}

func (f faultFile) check(err error) error {
	if err != nil && f.wal && !IsDiskFull(err) {
		f.fs.hit(err)
		return err
	}
	return f.fs.check(err)
}

func (f faultFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	return n, f.check(err)
}

func (f faultFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(p, off)
	return n, f.check(err)
}

// Preallocate is the file's own: Pebble ignores its errors (a WAL
// preallocates 110% of the memtable, more than a small disk may hold), and
// so does faultFS.

func (f faultFile) Sync() error { return f.check(f.File.Sync()) }

func (f faultFile) SyncData() error { return f.check(f.File.SyncData()) }

func (f faultFile) SyncTo(n int64) (bool, error) {
	full, err := f.File.SyncTo(n)
	return full, f.check(err)
}

// openResult is one pebble.Open run by openDB.
type openResult struct {
	mu        sync.Mutex
	abandoned bool
	done      chan struct{}
	db        *pebble.DB
	err       error
}

// openDB runs pebble.Open (then prepare, on the DB it opened) in a
// goroutine of the Manager and waits for it for at most OpenTimeout, until
// ctx ends or until Pebble reports a full disk. Whatever the wait gives up
// on is abandoned (see the top of this file).
func (m *Manager) openDB(ctx context.Context, task int, dir string, popts *pebble.Options, ev *storeEvents,
	prepare func(*pebble.DB) error) (*pebble.DB, error) {
	m.mu.Lock()
	if m.stuck[dir] {
		m.mu.Unlock()
		return nil, fmt.Errorf("%w (an earlier open of this store gave up waiting; restart the worker)", ErrOpenStuck)
	}
	m.mu.Unlock()
	r := &openResult{done: make(chan struct{})}
	m.bg.Add(1)
	go func() {
		defer m.bg.Done()
		db, err := openRecovering(dir, popts, prepare)
		r.mu.Lock()
		if !r.abandoned {
			r.db, r.err = db, err
			r.mu.Unlock()
			close(r.done)
			return
		}
		r.mu.Unlock()
		if db != nil {
			_ = db.Close()
		}
		m.mu.Lock()
		delete(m.stuck, dir)
		m.mu.Unlock()
		m.log.Warn("statestore: an abandoned task store open returned at last; closed it", "task", task, "dir", dir, "err", err)
	}()
	timer := time.NewTimer(m.opts.OpenTimeout)
	defer timer.Stop()
	var why error
	select {
	case <-r.done:
		return r.db, r.err
	case <-timer.C:
		why = fmt.Errorf("%w (%s, OpenTimeout)", ErrOpenTimeout, m.opts.OpenTimeout)
	case err := <-ev.diskErr:
		why = fmt.Errorf("the disk refused a write while the store opened (Pebble would retry it for ever): %w", err)
	case <-ctx.Done():
		why = ctx.Err()
	}
	r.mu.Lock()
	select {
	case <-r.done:
		r.mu.Unlock()
		return r.db, r.err
	default:
	}
	r.abandoned = true
	r.mu.Unlock()
	m.mu.Lock()
	if m.stuck == nil {
		m.stuck = map[string]bool{}
	}
	m.stuck[dir] = true
	m.mu.Unlock()
	m.log.Warn("statestore: gave up waiting for a task store to open; the open goes on in the background", "task", task, "dir", dir, "err", why)
	return nil, fmt.Errorf("gave up waiting: %w; the open goes on in the background (the worker exits 1 at shutdown if it never returns)", why)
}

// openRecovering is pebble.Open then prepare, with a panic of Pebble (a
// failed WAL write) turned into an error. The DB of a panic is left as it
// is: its commit pipeline is locked, so it cannot be closed.
func openRecovering(dir string, popts *pebble.Options, prepare func(*pebble.DB) error) (db *pebble.DB, err error) {
	defer func() {
		if r := recover(); r != nil {
			db, err = nil, fmt.Errorf("pebble panicked: %w", panicError(r))
		}
	}()
	db, err = pebble.Open(dir, popts)
	if err != nil {
		return nil, err
	}
	if err := prepare(db); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

func panicError(r any) error {
	if err, ok := r.(error); ok {
		return err
	}
	return fmt.Errorf("%v", r)
}

// StuckOpens is the number of abandoned store opens that have not returned
// yet: the process cannot clean them up and should be restarted (the
// worker's /healthz fails while it is above 0).
func (m *Manager) StuckOpens() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.stuck)
}

// waitOpens waits up to Options.CloseWait for the goroutines of abandoned opens.
func (m *Manager) waitOpens() error {
	done := make(chan struct{})
	go func() { m.bg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-time.After(m.opts.CloseWait):
		m.mu.Lock()
		n := len(m.stuck)
		m.mu.Unlock()
		return fmt.Errorf("statestore: %w: %d store opens still hang after %s (a full or failing disk?); exit and restart the process", ErrOpenStuck, n, m.opts.CloseWait)
	}
}

// writeFault handles a write the store's disk refused: it records the
// marker, then calls Options.Fatal (by default: exit 1).
func (m *Manager) writeFault(task int, dir string, cause error) {
	what := "write failed (" + Errno(cause) + "): " + cause.Error()
	if merr := m.writeMarker(dir, what); merr != nil {
		m.log.Error("statestore: cannot record the write fault in the task dir (the disk refuses that too)",
			"task", task, "dir", dir, "err", merr)
	}
	m.log.Error("statestore: the task store's disk refused a write; exiting 1 so that the next start rebuilds it from Kafka or, if the disk is still full, fails the task and the group moves it",
		"task", task, "dir", dir, "errno", Errno(cause), "disk_full", IsDiskFull(cause), "err", cause)
	m.opts.Fatal(task, fmt.Errorf("statestore: task %d in %s: %w", task, dir, cause))
}

// rateKey is the lograte key of a repeated Pebble log line of a task.
func rateKey(task int, kind string) string { return strconv.Itoa(task) + "/" + kind }
