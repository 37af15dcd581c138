package statestore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestLockReleasedOnClose(t *testing.T) {
	dir := t.TempDir()
	m1, err := Open(Options{Dirs: []string{dir}, Group: "g", InstanceID: "a", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	// Another group on the same dir is fine.
	other := openManager(t, Options{Dirs: []string{dir}, Group: "h"})
	_ = other
	if _, err := Open(Options{Dirs: []string{dir}, Group: "g", InstanceID: "b", Logger: quiet}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	if err := m1.Close(); err != nil {
		t.Fatal(err)
	}
	m2, err := Open(Options{Dirs: []string{dir}, Group: "g", InstanceID: "b", Logger: quiet})
	if err != nil {
		t.Fatalf("Open after the holder closed: %v", err)
	}
	m2.Close()
}

// A corruption reported at run time leaves a marker; the next open moves
// the store aside and rebuilds it, once.
func TestCorruptionMarkerRebuildsOnce(t *testing.T) {
	dir := t.TempDir()
	var fatal []int
	m := openManager(t, Options{Dirs: []string{dir}, Fatal: func(task int, err error) {
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("Fatal got %v, want ErrCorrupt", err)
		}
		fatal = append(fatal, task)
	}})
	s := openTask(t, m, 3)
	if err := s.Apply([]Tick{{"X", 1, 1, 7}}, 7); err != nil {
		t.Fatal(err)
	}
	m.corruption(3, s.Dir(), "test: block checksum mismatch")
	if fmt.Sprint(fatal) != "[3]" {
		t.Fatalf("Fatal called for %v, want [3]", fatal)
	}
	s.Close()
	s = openTask(t, m, 3)
	if s.AppliedOffset() != -1 || m.RebuildsFor(RebuildCorruption) != 1 || m.Rebuilds() != 1 {
		t.Errorf("after the marker: offset %d, corruption rebuilds %d; want -1 and 1", s.AppliedOffset(), m.RebuildsFor(RebuildCorruption))
	}
	aside, _ := filepath.Glob(filepath.Join(dir, "joiner", "task-3.corrupt-*", corruptMarker))
	if len(aside) != 1 {
		t.Errorf("moved-aside store with its marker: %v", aside)
	}
	if m.CorruptDirs() != 1 {
		t.Errorf("CorruptDirs = %d, want 1", m.CorruptDirs())
	}
	s.Close()
	s = openTask(t, m, 3)
	if m.Rebuilds() != 1 {
		t.Errorf("rebuilt again: %d rebuilds, want 1 (never a loop)", m.Rebuilds())
	}
	s.Close()
}

func TestCorruptRetention(t *testing.T) {
	dir := t.TempDir()
	g := filepath.Join(dir, "joiner")
	old := filepath.Join(g, "task-1.corrupt-"+strconv.FormatInt(time.Now().Add(-2*time.Hour).UnixNano(), 10))
	recent := filepath.Join(g, "task-2.corrupt-"+strconv.FormatInt(time.Now().Add(-time.Minute).UnixNano(), 10))
	for _, d := range []string{old, recent, filepath.Join(g, "task-4")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	m := openManager(t, Options{Dirs: []string{dir}, CorruptRetention: time.Hour})
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("store moved aside 2h ago with a 1h retention still there (%v)", err)
	}
	if _, err := os.Stat(recent); err != nil {
		t.Errorf("store moved aside 1m ago deleted: %v", err)
	}
	if m.CorruptDirs() != 1 {
		t.Errorf("CorruptDirs = %d, want 1", m.CorruptDirs())
	}
}

// The real thing, in a child process: a damaged .sst makes Pebble report
// corruption while the store is open; the process exits 1 after recording
// it, and the next open rebuilds the store instead of crashing again.
func TestCorruptSSTCrashesOnceThenRebuilds(t *testing.T) {
	if os.Getenv("STATESTORE_CHILD_DIR") != "" {
		childReadAll(os.Getenv("STATESTORE_CHILD_DIR"))
		return
	}
	dir := t.TempDir()
	m := openManager(t, Options{Dirs: []string{dir}})
	s := openTask(t, m, 0)
	for i := range 200 {
		ticks := []Tick{{Symbol: fmt.Sprintf("S%04d", i), Price: float64(i), TimestampMs: int64(i), Offset: int64(i + 1)}}
		if err := s.Apply(ticks, int64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	m.Close()
	ssts, _ := filepath.Glob(filepath.Join(dir, "joiner", "task-0", "*.sst"))
	if len(ssts) == 0 {
		t.Fatal("no .sst written")
	}
	b, err := os.ReadFile(ssts[0])
	if err != nil {
		t.Fatal(err)
	}
	for i := 16; i < len(b)/2; i += 7 { // damage the data blocks, keep the footer
		b[i] ^= 0xff
	}
	if err := os.WriteFile(ssts[0], b, 0o644); err != nil {
		t.Fatal(err)
	}
	for run := 1; run <= 2; run++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCorruptSSTCrashesOnceThenRebuilds$")
		cmd.Env = append(os.Environ(), "STATESTORE_CHILD_DIR="+dir)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		switch run {
		case 1:
			if code != 1 || !strings.Contains(string(out), "task store is corrupt") {
				t.Fatalf("first run: exit %d, want 1 after recording the corruption; output:\n%s", code, out)
			}
			if _, err := os.Stat(filepath.Join(dir, "joiner", "task-0", corruptMarker)); err != nil {
				t.Fatalf("no marker after the crash: %v", err)
			}
		case 2:
			if code != 0 || !strings.Contains(string(out), "rebuilt=1") {
				t.Fatalf("second run: exit %d, want 0 with the store rebuilt; output:\n%s", code, out)
			}
		}
	}
}

// childReadAll opens task 0 and reads every key, as a worker restoring
// and serving it would, then compacts it.
func childReadAll(dir string) {
	m, err := Open(Options{Dirs: []string{dir}, Group: "joiner"})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(3)
	}
	s, err := m.OpenTask(0)
	if err != nil {
		fmt.Println("open task:", err)
		os.Exit(3)
	}
	for i := range 200 {
		_, _, _ = s.Latest(fmt.Sprintf("S%04d", i))
	}
	_ = s.db.Compact(context.Background(), []byte{0}, []byte{0xff}, true)
	fmt.Printf("rebuilt=%d\n", m.RebuildsFor(RebuildCorruption))
	s.Close()
	m.Close()
	os.Exit(0)
}

// brokenDirFS fails every rename or mkdir under prefix, as a read-only
// mount would.
type brokenDirFS struct {
	vfs.FS
	prefix string
}

func (f brokenDirFS) Rename(a, b string) error {
	if strings.HasPrefix(a, f.prefix) {
		return os.ErrPermission
	}
	return f.FS.Rename(a, b)
}

func (f brokenDirFS) MkdirAll(d string, p os.FileMode) error {
	if strings.HasPrefix(d, f.prefix) && strings.Contains(d, "task-") {
		return os.ErrPermission
	}
	return f.FS.MkdirAll(d, p)
}

// Rebuild moves the store aside and opens a fresh one; when the task's
// dir cannot even be moved, in another state dir, which later opens use.
func TestRebuildUsesAnotherStateDir(t *testing.T) {
	mem := vfs.NewMem()
	m := openManager(t, Options{Dirs: []string{"/a", "/b"}, FS: mem, Placement: PlacementTasks})
	s := openTask(t, m, 1)
	if !strings.HasPrefix(s.Dir(), "/a/") {
		t.Fatalf("task 1 placed in %s, want /a", s.Dir())
	}
	if err := s.Apply([]Tick{{"X", 1, 1, 5}}, 5); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// Same dir usable: moved aside, rebuilt in place, empty.
	s, err := m.Rebuild(1)
	if err != nil {
		t.Fatal(err)
	}
	if s.AppliedOffset() != -1 || !strings.HasPrefix(s.Dir(), "/a/") || m.RebuildsFor(RebuildUnusable) != 1 {
		t.Errorf("rebuild in place: dir %s offset %d unusable rebuilds %d", s.Dir(), s.AppliedOffset(), m.RebuildsFor(RebuildUnusable))
	}
	s.Close()
	m.Close()
	// /a turns read-only: the store cannot be moved, the fresh one goes to /b.
	m = openManager(t, Options{Dirs: []string{"/a", "/b"}, FS: brokenDirFS{FS: mem, prefix: "/a/"}})
	s, err = m.Rebuild(1)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s.Dir(), "/b/") {
		t.Errorf("rebuilt in %s, want /b", s.Dir())
	}
	s.Close()
	s = openTask(t, m, 1)
	if !strings.HasPrefix(s.Dir(), "/b/") {
		t.Errorf("reopened in %s, want the rebuilt one in /b", s.Dir())
	}
	s.Close()
}

// erofsFS refuses every write under prefix with EROFS, once on is set
// (from the start when on is nil).
type erofsFS struct {
	vfs.FS
	prefix string
	on     *atomic.Bool
}

func (f erofsFS) ro(name string) bool {
	return strings.HasPrefix(name, f.prefix) && (f.on == nil || f.on.Load())
}

func (f erofsFS) MkdirAll(d string, p os.FileMode) error {
	if f.ro(d) {
		return &os.PathError{Op: "mkdir", Path: d, Err: syscall.EROFS}
	}
	return f.FS.MkdirAll(d, p)
}

func (f erofsFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if f.ro(name) {
		return nil, &os.PathError{Op: "open", Path: name, Err: syscall.EROFS}
	}
	return f.FS.Create(name, c)
}

// A state dir that cannot be used at start fails Open, naming the dir and
// the errno (issue: a worker whose state dir was read-only never exited).
func TestOpenFailsOnUnusableStateDir(t *testing.T) {
	for _, fs := range []erofsFS{
		{FS: vfs.NewMem(), prefix: "/ro"},          // cannot even create the group dir
		{FS: vfs.NewMem(), prefix: "/ro/joiner/."}, // the group dir exists, files cannot be written
	} {
		_, err := Open(Options{Dirs: []string{"/rw", "/ro"}, Group: "joiner", FS: fs, Logger: quiet})
		if err == nil {
			t.Fatalf("Open with %s read-only succeeded", fs.prefix)
		}
		if msg := err.Error(); !strings.Contains(msg, "state dir /ro/joiner cannot be used") || !strings.Contains(msg, "errno EROFS") ||
			!errors.Is(err, syscall.EROFS) {
			t.Errorf("Open with %s read-only: %v, want it to name /ro/joiner and EROFS", fs.prefix, err)
		}
	}
}

// On the OS's filesystem, a dir that is a file cannot be used either; the
// check leaves nothing behind in a good dir.
func TestCheckDirsOnTheOS(t *testing.T) {
	good := t.TempDir()
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err := CheckDirs([]string{good, file}, "g")
	if err == nil || !strings.Contains(err.Error(), "state dir "+filepath.Join(file, "g")+" cannot be used") || !strings.Contains(err.Error(), "errno ENOTDIR") {
		t.Fatalf("CheckDirs with a file as a dir: %v", err)
	}
	if names, err := os.ReadDir(filepath.Join(good, "g")); err != nil || len(names) != 0 {
		t.Errorf("the check left %v in the good dir (%v)", names, err)
	}
}

// A state dir that turns read-only after Open does not stop the Manager:
// the tasks placed there fail and a rebuild goes to a dir that works.
func TestReadOnlyStateDirDoesNotStopOpen(t *testing.T) {
	var on atomic.Bool
	m := openManager(t, Options{Dirs: []string{"/ro", "/rw"}, FS: erofsFS{FS: vfs.NewMem(), prefix: "/ro", on: &on}, Placement: PlacementTasks})
	on.Store(true)
	if _, err := m.OpenTask(0); err == nil {
		t.Fatal("OpenTask placed in the read-only dir succeeded")
	}
	s, err := m.Rebuild(0)
	if err != nil {
		t.Fatalf("Rebuild with one writable dir: %v", err)
	}
	if !strings.HasPrefix(s.Dir(), "/rw/") {
		t.Errorf("rebuilt in %s, want /rw", s.Dir())
	}
	s.Close()
}
