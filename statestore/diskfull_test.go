package statestore

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// A state dir under MinFreeBytes free fails the open at once, with an
// error that says disk full and ENOSPC, and the store is kept as it is
// (a full disk is not the store's fault: no move aside, no rebuild).
func TestOpenRefusesAFullStateDir(t *testing.T) {
	var free atomic.Uint64
	free.Store(1 << 30)
	fs := &usageFS{FS: vfs.NewMem()}
	fs.set(func(string) (uint64, error) { return free.Load(), nil })
	m := openManager(t, Options{Dirs: []string{"/a"}, FS: fs, MinFreeBytes: 1 << 20})
	s := openTask(t, m, 0)
	if err := s.Apply([]Tick{{"X", 1, 1, 5}}, 5); err != nil {
		t.Fatal(err)
	}
	s.Close()
	free.Store(1<<20 - 1)
	for _, open := range []func() (*Store, error){func() (*Store, error) { return m.OpenTask(0) }, func() (*Store, error) { return m.Rebuild(1) }} {
		_, err := open()
		if !IsDiskFull(err) || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "1048575 bytes free") {
			t.Fatalf("open with 1 byte under the minimum free: %v, want ErrDiskFull naming the free bytes", err)
		}
	}
	if m.Rebuilds() != 0 || m.CorruptDirs() != 0 {
		t.Errorf("a full disk rebuilt %d stores, moved %d aside; want none", m.Rebuilds(), m.CorruptDirs())
	}
	free.Store(1 << 20)
	s = openTask(t, m, 0)
	if s.AppliedOffset() != 5 {
		t.Errorf("after space was freed the store opened at offset %d, want its own 5", s.AppliedOffset())
	}
	s.Close()
}

// lockBlockFS blocks Pebble's LOCK of the task dirs until release is
// closed: an open that does not return.
type lockBlockFS struct {
	vfs.FS
	release chan struct{}
	entered chan struct{}
}

func (f lockBlockFS) Lock(name string) (io.Closer, error) {
	if strings.Contains(name, "task-") {
		select {
		case f.entered <- struct{}{}:
		default:
		}
		<-f.release
	}
	return f.FS.Lock(name)
}

// An open that does not return is given up after OpenTimeout or when the
// caller's context ends, the task's later opens fail at once (not a second
// Pebble on the same dir), and Close says the open still hangs; once it
// returns, its DB is closed and the dir can be opened again.
func TestOpenIsBoundedAndAbandoned(t *testing.T) {
	fs := lockBlockFS{FS: vfs.NewMem(), release: make(chan struct{}), entered: make(chan struct{}, 1)}
	m, err := Open(Options{Dirs: []string{"/a"}, Group: "g", FS: fs, Logger: quiet, CacheBytes: 1 << 20, OpenTimeout: 300 * time.Millisecond, CloseWait: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = m.OpenTask(0)
	if !errors.Is(err, ErrOpenTimeout) || time.Since(start) > 3*time.Second {
		t.Fatalf("OpenTask of a hanging open: %v after %s, want ErrOpenTimeout after 300ms", err, time.Since(start))
	}
	if _, err := m.OpenTask(0); !errors.Is(err, ErrOpenStuck) {
		t.Errorf("second OpenTask while the first hangs: %v, want ErrOpenStuck", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-fs.entered; cancel() }()
	start = time.Now()
	if _, err := m.OpenTaskContext(ctx, 1); !errors.Is(err, context.Canceled) || time.Since(start) > 250*time.Millisecond {
		t.Errorf("OpenTaskContext cancelled: %v after %s, want context.Canceled at once", err, time.Since(start))
	}
	if m.Rebuilds() != 0 {
		t.Errorf("%d rebuilds of stores whose open only hung", m.Rebuilds())
	}
	// Close while both opens hang: bounded, and it says so.
	start = time.Now()
	if err := m.Close(); !errors.Is(err, ErrOpenStuck) || time.Since(start) > 2*time.Second {
		t.Errorf("Close with hanging opens: %v after %s, want ErrOpenStuck after CloseWait", err, time.Since(start))
	}
	close(fs.release)
	deadline := time.Now().Add(5 * time.Second)
	for {
		m.mu.Lock()
		n := len(m.stuck)
		m.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d abandoned opens never cleaned up after they returned", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	m.bg.Wait()
}

// enospcFS makes the writes of Pebble's WAL files fail with ENOSPC once
// full is set, as a full disk does.
type enospcFS struct {
	vfs.FS
	full *atomic.Bool
}

type enospcFile struct {
	vfs.File
	full *atomic.Bool
	name string
}

func (f enospcFile) Write(p []byte) (int, error) {
	if f.full.Load() {
		return 0, &os.PathError{Op: "write", Path: f.name, Err: syscall.ENOSPC}
	}
	return f.File.Write(p)
}

func (f enospcFile) Sync() error {
	if f.full.Load() {
		return &os.PathError{Op: "fsync", Path: f.name, Err: syscall.ENOSPC}
	}
	return f.File.Sync()
}

func (f enospcFS) wrap(name string, file vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return file, err
	}
	return enospcFile{File: file, full: f.full, name: name}, nil
}

func (f enospcFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	file, err := f.FS.Create(name, c)
	return f.wrap(name, file, err)
}

func (f enospcFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	file, err := f.FS.ReuseForWrite(oldname, newname, c)
	return f.wrap(newname, file, err)
}

// A WAL write the disk refuses would panic inside Pebble (and a WAL
// rotation after it is a fatal error of the runtime, exit 2). It takes the
// fatal path in the write itself instead: the marker is written into the
// task dir and Options.Fatal (exit 1 by default) is called with an error
// saying ENOSPC; the next open moves the store aside and rebuilds it from
// Kafka. Fatal here blocks, as an exit would never return.
func TestWALWriteOnAFullDiskTakesTheFatalPath(t *testing.T) {
	mem := vfs.NewMem()
	var full atomic.Bool
	var once sync.Once
	fatal := make(chan error, 1)
	opts := Options{Dirs: []string{"/a"}, Group: "g", FS: enospcFS{FS: mem, full: &full}, Logger: quiet, CacheBytes: 1 << 20,
		Fatal: func(_ int, err error) { once.Do(func() { fatal <- err }); select {} }}
	m, err := Open(opts) // not closed: the DB whose commit panicked cannot be
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.OpenTask(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Apply([]Tick{{"X", 1, 1, 1}}, 1); err != nil {
		t.Fatal(err)
	}
	full.Store(true)
	got := applyUntilFatal(t, s, fatal)
	if !IsDiskFull(got) || !strings.Contains(got.Error(), "task 0") {
		t.Errorf("fatal error %v, want it to name task 0 and ENOSPC", got)
	}
	what, ok := m.marked(s.Dir())
	if !ok || !strings.Contains(what, "errno ENOSPC") {
		t.Errorf("marker %q (present %v), want one naming ENOSPC", what, ok)
	}
	// The next start rebuilds it (a fresh Manager on a copy of the files,
	// as after the exit: the copy has no lock of the old DB).
	after := vfs.NewMem()
	if _, err := vfs.Clone(mem, after, "/a", "/a"); err != nil {
		t.Fatal(err)
	}
	m2 := openManager(t, Options{Dirs: []string{"/a"}, Group: "g", FS: after})
	s2 := openTask(t, m2, 0)
	if s2.AppliedOffset() != -1 || m2.RebuildsFor(RebuildCorruption) != 1 {
		t.Errorf("after the fault: offset %d, corruption rebuilds %d; want a rebuilt store", s2.AppliedOffset(), m2.RebuildsFor(RebuildCorruption))
	}
	s2.Close()
}

// eioFS fails the writes of Pebble's WAL files with EIO once bad is set:
// not a full disk, so it reaches Pebble, which panics in the commit.
type eioFS struct{ enospcFS }

type eioFile struct{ enospcFile }

func (f eioFile) Write(p []byte) (int, error) {
	if f.full.Load() {
		return 0, &os.PathError{Op: "write", Path: f.name, Err: syscall.EIO}
	}
	return f.File.Write(p)
}

func (f eioFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	file, err := f.enospcFS.Create(name, c)
	if ef, ok := file.(enospcFile); ok {
		return eioFile{ef}, err
	}
	return file, err
}

// A WAL write error that is not a full disk takes the same fatal path in
// the write (Pebble would panic, and on a WAL rotation crash with exit 2).
func TestWALWriteErrorTakesTheFatalPath(t *testing.T) {
	var bad atomic.Bool
	fatal := make(chan error, 1)
	var once sync.Once
	m, err := Open(Options{Dirs: []string{"/a"}, Group: "g", FS: eioFS{enospcFS{FS: vfs.NewMem(), full: &bad}}, Logger: quiet, CacheBytes: 1 << 20,
		Fatal: func(_ int, err error) { once.Do(func() { fatal <- err }); select {} }})
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.OpenTask(0)
	if err != nil {
		t.Fatal(err)
	}
	bad.Store(true)
	got := applyUntilFatal(t, s, fatal)
	if !errors.Is(got, syscall.EIO) || IsDiskFull(got) {
		t.Fatalf("fatal error %v, want EIO (not a full disk)", got)
	}
	if what, ok := m.marked(s.Dir()); !ok || !strings.Contains(what, "errno EIO") {
		t.Errorf("marker %q (present %v), want one naming EIO", what, ok)
	}
}

// applyUntilFatal applies batches of 1,000 ticks to s from a goroutine of
// its own (it blocks for good once Fatal blocks Pebble's WAL writer, as an
// exit would end it) until fatal receives, and returns what it received.
// Pebble's WAL writer reports a failed write when its next 32 KiB block is
// queued, hence the large batches.
func applyUntilFatal(t *testing.T, s *Store, fatal <-chan error) error {
	t.Helper()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		batch := make([]Tick, 1000)
		for off := int64(2); off < 500; off++ {
			select {
			case <-stop:
				return
			default:
			}
			for i := range batch {
				batch[i] = Tick{"S" + strconv.Itoa(i), 2, off, off}
			}
			_ = s.Apply(batch, off)
			time.Sleep(2 * time.Millisecond)
		}
	}()
	select {
	case err := <-fatal:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("no fatal call within 30s of writes on a failing disk")
		return nil
	}
}

// sstFullFS fails the creation of tables with ENOSPC once full is set.
type sstFullFS struct {
	vfs.FS
	full *atomic.Bool
}

func (f sstFullFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if f.full.Load() && strings.HasSuffix(name, ".sst") {
		return nil, &os.PathError{Op: "open", Path: name, Err: syscall.ENOSPC}
	}
	return f.FS.Create(name, c)
}

// On a restart with a full disk, Pebble's open waits for the flush of the
// WAL it replayed, which retries ENOSPC at once and for ever. The open
// gives up at the first such error instead: the task fails here (an error
// saying disk full, no rebuild), and the repeated errors are slowed down
// and logged once per interval.
func TestOpenGivesUpWhenTheReplayFlushFindsTheDiskFull(t *testing.T) {
	mem := vfs.NewMem()
	var full atomic.Bool
	var logs lockedBuffer
	m := openManager(t, Options{Dirs: []string{"/a"}, FS: sstFullFS{FS: mem, full: &full}, OpenTimeout: time.Minute, CloseWait: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	s := openTask(t, m, 0)
	batch := make([]Tick, 1000)
	for off := int64(1); off <= 40; off++ {
		for i := range batch {
			batch[i] = Tick{"S" + strconv.Itoa(i), 2, off, off}
		}
		if err := s.Apply(batch, off); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	full.Store(true)
	start := time.Now()
	_, err := m.OpenTask(0)
	if !IsDiskFull(err) || time.Since(start) > 10*time.Second {
		t.Fatalf("reopen on a full disk: %v after %s, want a disk-full error at once", err, time.Since(start))
	}
	if m.Rebuilds() != 0 {
		t.Errorf("%d rebuilds: a full disk is not the store's fault", m.Rebuilds())
	}
	time.Sleep(time.Second) // Pebble keeps retrying its flush meanwhile
	if n := strings.Count(logs.String(), "pebble: background error"); n != 1 {
		t.Errorf("%d background error lines in a second of retries, want 1 (rate-limited):\n%s", n, logs.String())
	}
	// Space comes back: the abandoned open returns, is closed, and the
	// store opens again with what it held.
	full.Store(false)
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err = m.OpenTask(0)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store does not open after space came back: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if s.AppliedOffset() != 40 {
		t.Errorf("reopened at offset %d, want 40", s.AppliedOffset())
	}
	s.Close()
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// createFullFS refuses to create files under prefix with ENOSPC.
type createFullFS struct {
	vfs.FS
	prefix string
}

func (f createFullFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if strings.HasPrefix(name, f.prefix) {
		return nil, &os.PathError{Op: "open", Path: name, Err: syscall.ENOSPC}
	}
	return f.FS.Create(name, c)
}

// A full state dir at start is not an unusable one: Open goes on (its
// tasks fail their free-space check and move), unlike a read-only dir.
func TestOpenGoesOnWithAFullStateDir(t *testing.T) {
	m := openManager(t, Options{Dirs: []string{"/full", "/ok"}, FS: createFullFS{FS: vfs.NewMem(), prefix: "/full"}, Placement: PlacementTasks})
	if m == nil {
		t.Fatal("no Manager")
	}
}

// On the OS's filesystem, a full tmpfs at the first start (no room, and no
// inode even for the lock file) is a WARN too, and its stores fail their free-space
// check. Needs root to mount the tmpfs; skipped otherwise.
func TestOpenOnAFullTmpfs(t *testing.T) {
	dir := t.TempDir()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	// Three inodes: the root, the filler and the group dir; the lock
	// file finds none.
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m,nr_inodes=3", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	for buf := make([]byte, 64<<10); ; {
		if _, err := f.Write(buf); err != nil {
			break
		}
	}
	f.Close()
	m, err := Open(Options{Dirs: []string{dir}, Group: "g", Logger: quiet, CacheBytes: 1 << 20, MinFreeBytes: 1})
	if err != nil {
		t.Fatalf("Open on a full tmpfs: %v, want a WARN only", err)
	}
	defer m.Close()
	if _, err := m.OpenTask(0); !IsDiskFull(err) {
		t.Errorf("OpenTask on a full tmpfs: %v, want a disk-full error", err)
	}
}

// usageFS is an FS whose free space the test sets (GetDiskUsage's
// AvailBytes); an unset one answers as the FS it wraps.
type usageFS struct {
	vfs.FS
	mu    sync.Mutex
	avail func(dir string) (uint64, error)
}

func (f *usageFS) set(avail func(dir string) (uint64, error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.avail = avail
}

func (f *usageFS) GetDiskUsage(dir string) (vfs.DiskUsage, error) {
	f.mu.Lock()
	avail := f.avail
	f.mu.Unlock()
	if avail == nil {
		return f.FS.GetDiskUsage(dir)
	}
	n, err := avail(dir)
	return vfs.DiskUsage{AvailBytes: n, TotalBytes: n, UsedBytes: 0}, err
}
