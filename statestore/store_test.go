package statestore

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/cockroachdb/pebble/v2/vfs"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// fsCases runs a test on an in-memory FS and on a real temp dir.
func fsCases(t *testing.T, fn func(t *testing.T, fs vfs.FS, dir string)) {
	t.Run("mem", func(t *testing.T) { fn(t, vfs.NewMem(), "/state") })
	t.Run("disk", func(t *testing.T) { fn(t, vfs.Default, t.TempDir()) })
}

func openManager(t testing.TB, opts Options) *Manager {
	t.Helper()
	if opts.Group == "" {
		opts.Group = "joiner"
	}
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	if opts.CacheBytes == 0 {
		opts.CacheBytes = 8 << 20
	}
	m, err := Open(opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func openTask(t testing.TB, m *Manager, task int) *Store {
	t.Helper()
	s, err := m.OpenTask(task)
	if err != nil {
		t.Fatalf("OpenTask(%d): %v", task, err)
	}
	return s
}

func mustGet(t *testing.T, s *Store, sym string) (Tick, bool) {
	t.Helper()
	tk, ok, err := s.Latest(sym)
	if err != nil {
		t.Fatalf("Latest(%q): %v", sym, err)
	}
	return tk, ok
}

func scanAll(t *testing.T, s *Store) []Tick {
	t.Helper()
	var out []Tick
	if err := s.Scan(func(tk Tick) error { out = append(out, tk); return nil }); err != nil {
		t.Fatalf("Scan: %v", err)
	}
	return out
}

func TestApplyGetScan(t *testing.T) {
	fsCases(t, func(t *testing.T, fs vfs.FS, dir string) {
		m := openManager(t, Options{Dirs: []string{dir}, FS: fs})
		s := openTask(t, m, 3)
		if got := s.AppliedOffset(); got != -1 {
			t.Fatalf("new store AppliedOffset = %d, want -1", got)
		}
		if want := filepath.Join(dir, "joiner", "task-3"); s.Dir() != want {
			t.Errorf("Dir = %q, want %q", s.Dir(), want)
		}
		if _, ok := mustGet(t, s, "AAPL"); ok {
			t.Fatal("Get on empty store found a price")
		}
		err := s.Apply([]Tick{
			{"MSFT", 410.5, 1000, 30},
			{"AAPL", 190.25, 1001, 31},
			{"MSFT", 411, 1002, 32}, // the newer version is the latest
			{"NEG", -1.5, -7, 33},
		}, 41)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.AppliedOffset(); got != 41 {
			t.Errorf("AppliedOffset = %d, want 41", got)
		}
		if tk, ok := mustGet(t, s, "MSFT"); !ok || tk != (Tick{"MSFT", 411, 1002, 32}) {
			t.Errorf("Get(MSFT) = %+v %v", tk, ok)
		}
		want := []Tick{{"AAPL", 190.25, 1001, 31}, {"MSFT", 411, 1002, 32}, {"NEG", -1.5, -7, 33}}
		if got := scanAll(t, s); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("Scan = %v, want %v", got, want)
		}
		stop := errors.New("stop")
		n := 0
		if err := s.Scan(func(Tick) error { n++; return stop }); err != stop || n != 1 {
			t.Errorf("Scan with failing fn = %v after %d calls, want stop after 1", err, n)
		}

		// Offset-only batches advance the offset; going back is refused.
		if err := s.Apply(nil, 45); err != nil {
			t.Fatal(err)
		}
		for _, off := range []int64{45, 44, -1} {
			if err := s.Apply([]Tick{{"AAPL", 1, 1, 0}}, off); !errors.Is(err, ErrOffsetNotAfter) {
				t.Errorf("Apply at %d after 45: err = %v, want ErrOffsetNotAfter", off, err)
			}
		}
		if tk, _ := mustGet(t, s, "AAPL"); tk.Price != 190.25 {
			t.Errorf("refused Apply changed AAPL to %v", tk.Price)
		}
	})
}

func TestReopenKeepsPricesAndOffset(t *testing.T) {
	fsCases(t, func(t *testing.T, fs vfs.FS, dir string) {
		opts := Options{Dirs: []string{dir}, FS: fs}
		m := openManager(t, opts)
		s := openTask(t, m, 0)
		if err := s.Apply([]Tick{{"AAPL", 190, 1, 10}}, 10); err != nil {
			t.Fatal(err)
		}
		if err := s.Apply([]Tick{{"AAPL", 191, 2, 16}, {"IBM", 150, 3, 17}}, 17); err != nil {
			t.Fatal(err)
		}
		if err := m.Close(); err != nil { // closes s too
			t.Fatal(err)
		}
		if _, _, err := s.GetAsOf("AAPL", 5); !errors.Is(err, ErrClosed) {
			t.Errorf("GetAsOf after Manager.Close: %v, want ErrClosed", err)
		}

		m2 := openManager(t, opts)
		s2 := openTask(t, m2, 0)
		if got := s2.AppliedOffset(); got != 17 {
			t.Errorf("AppliedOffset after reopen = %d, want 17", got)
		}
		want := []Tick{{"AAPL", 191, 2, 16}, {"IBM", 150, 3, 17}}
		if got := scanAll(t, s2); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("Scan after reopen = %v, want %v", got, want)
		}
		if m2.Rebuilds() != 0 {
			t.Errorf("Rebuilds = %d, want 0", m2.Rebuilds())
		}
	})
}

// TestCrashKeepsBatchesWhole crashes a filesystem at random points, keeping
// a random share of unsynced writes, and checks that the prices and the
// offset that survive always belong to the same batch.
func TestCrashKeepsBatchesWhole(t *testing.T) {
	syms := []string{"A", "B", "C", "D", "E"}
	rng := rand.New(rand.NewPCG(7, 7))
	for round := 0; round < 8; round++ {
		fs := vfs.NewCrashableMem()
		m := openManager(t, Options{Dirs: []string{"/s"}, FS: fs})
		s := openTask(t, m, 1)
		var crashed *vfs.MemFS
		crashAt := rng.IntN(200)
		for off := int64(0); off < 200; off++ {
			ticks := make([]Tick, len(syms))
			for i, sym := range syms {
				ticks[i] = Tick{sym, float64(off), off, off}
			}
			if err := s.Apply(ticks, off); err != nil {
				t.Fatal(err)
			}
			if off == int64(crashAt) {
				crashed = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rand.New(rand.NewPCG(uint64(round), 1))})
			}
		}
		m.Close()

		m2 := openManager(t, Options{Dirs: []string{"/s"}, FS: crashed})
		s2 := openTask(t, m2, 1)
		off := s2.AppliedOffset()
		got := scanAll(t, s2)
		if off == -1 {
			if len(got) != 0 {
				t.Fatalf("round %d: no offset but prices %v", round, got)
			}
			continue
		}
		if off > int64(crashAt) {
			t.Fatalf("round %d: offset %d is past the crash at %d", round, off, crashAt)
		}
		if len(got) != len(syms) {
			t.Fatalf("round %d: offset %d but prices %v", round, off, got)
		}
		for _, tk := range got {
			if tk.TimestampMs != off {
				t.Fatalf("round %d: offset %d but %+v", round, off, tk)
			}
		}
		m2.Close()
	}
}

func TestCorruptStoreIsMovedAsideAndRebuilt(t *testing.T) {
	dir := t.TempDir()
	var logBuf strings.Builder
	var mu sync.Mutex
	var rebuilt []int
	opts := Options{
		Dirs:      []string{dir},
		Logger:    slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelWarn})),
		OnRebuild: func(task int, err error) { mu.Lock(); rebuilt = append(rebuilt, task); mu.Unlock() },
	}
	m := openManager(t, opts)
	s := openTask(t, m, 2)
	if err := s.Apply([]Tick{{"AAPL", 1, 1, 99}}, 99); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	taskDir := filepath.Join(dir, "joiner", "task-2")
	manifests, _ := filepath.Glob(filepath.Join(taskDir, "MANIFEST-*"))
	if len(manifests) == 0 {
		t.Fatalf("no MANIFEST in %s", taskDir)
	}
	for _, f := range manifests {
		if err := os.WriteFile(f, []byte("this is not a manifest\x00\xff garbage"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	s = openTask(t, m, 2)
	if got := s.AppliedOffset(); got != -1 {
		t.Errorf("rebuilt store AppliedOffset = %d, want -1", got)
	}
	if got := scanAll(t, s); len(got) != 0 {
		t.Errorf("rebuilt store has prices %v", got)
	}
	if m.Rebuilds() != 1 || fmt.Sprint(rebuilt) != "[2]" {
		t.Errorf("Rebuilds = %d, OnRebuild tasks = %v; want 1 and [2]", m.Rebuilds(), rebuilt)
	}
	aside, _ := filepath.Glob(taskDir + ".corrupt-*")
	if len(aside) != 1 {
		t.Fatalf("moved-aside dirs = %v, want one", aside)
	}
	if !strings.Contains(logBuf.String(), "level=WARN") || !strings.Contains(logBuf.String(), "task=2") {
		t.Errorf("no Warn log naming the task: %q", logBuf.String())
	}
	// The rebuilt store works and survives a reopen.
	if err := s.Apply([]Tick{{"AAPL", 2, 2, 100}}, 100); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openTask(t, m, 2)
	if s.AppliedOffset() != 100 || m.Rebuilds() != 1 {
		t.Errorf("after reopen: offset %d rebuilds %d, want 100 and 1", s.AppliedOffset(), m.Rebuilds())
	}
	if tasks, err := m.Tasks(); err != nil || fmt.Sprint(tasks) != "[2]" {
		t.Errorf("Tasks = %v, %v; want [2] (moved-aside copies are not tasks)", tasks, err)
	}
	s.Close()

	if err := m.RemoveTask(2); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "joiner", "*")); len(left) != 0 {
		t.Errorf("RemoveTask left %v", left)
	}
}

func TestCorruptOffsetValueIsRebuilt(t *testing.T) {
	fs := vfs.NewMem()
	m := openManager(t, Options{Dirs: []string{"/s"}, FS: fs})
	s := openTask(t, m, 0)
	if err := s.db.Set([]byte(offsetKey), []byte{9, 9, 9}, nil); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openTask(t, m, 0)
	if s.AppliedOffset() != -1 || m.Rebuilds() != 1 {
		t.Errorf("offset %d rebuilds %d, want -1 and 1", s.AppliedOffset(), m.Rebuilds())
	}
}

func TestLockedStoreIsNotMoved(t *testing.T) {
	dir := t.TempDir()
	m1 := openManager(t, Options{Dirs: []string{dir}, InstanceID: "worker-1"})
	// A second Manager of the group on the same dir is refused at Open,
	// naming the holder (lock.go).
	if _, err := Open(Options{Dirs: []string{dir}, Group: "joiner", InstanceID: "worker-2"}); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "instance=worker-1") {
		t.Fatalf("second Open on a locked state dir: err = %v, want ErrLocked naming worker-1", err)
	}
	// Past that lock (released here by hand), each store's own Pebble lock
	// still keeps it from being moved.
	m1.unlockGroupDirs()
	m2 := openManager(t, Options{Dirs: []string{dir}})
	s := openTask(t, m1, 5)
	if err := s.Apply([]Tick{{"X", 1, 1, 1}}, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := m2.OpenTask(5); err == nil || !strings.Contains(err.Error(), "another joiner") {
		t.Fatalf("second Manager OpenTask of a locked store: err = %v", err)
	}
	if m2.Rebuilds() != 0 {
		t.Errorf("locked store counted as rebuilt")
	}
	if aside, _ := filepath.Glob(filepath.Join(dir, "joiner", "task-5.corrupt-*")); len(aside) != 0 {
		t.Errorf("locked store moved aside: %v", aside)
	}
	if tk, ok := mustGet(t, s, "X"); !ok || tk.Price != 1 {
		t.Errorf("store of the first manager damaged: %+v %v", tk, ok)
	}
}

func TestOpenTaskTwiceAndRemoveOpen(t *testing.T) {
	m := openManager(t, Options{Dirs: []string{"/s"}, FS: vfs.NewMem()})
	s := openTask(t, m, 1)
	if _, err := m.OpenTask(1); !errors.Is(err, ErrTaskOpen) {
		t.Errorf("second OpenTask: %v, want ErrTaskOpen", err)
	}
	if err := m.RemoveTask(1); !errors.Is(err, ErrTaskOpen) {
		t.Errorf("RemoveTask of open task: %v, want ErrTaskOpen", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close: %v, want ErrClosed", err)
	}
	if err := s.Apply(nil, 1); !errors.Is(err, ErrClosed) {
		t.Errorf("Apply after Close: %v, want ErrClosed", err)
	}
	if err := s.Scan(func(Tick) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Errorf("Scan after Close: %v, want ErrClosed", err)
	}
	if err := m.RemoveTask(1); err != nil {
		t.Fatal(err)
	}
	if err := m.RemoveTask(1); err != nil {
		t.Errorf("RemoveTask of absent task: %v", err)
	}
	if _, err := m.OpenTask(-1); err == nil {
		t.Error("OpenTask(-1) succeeded")
	}
	m.Close()
	if _, err := m.OpenTask(2); !errors.Is(err, ErrClosed) {
		t.Errorf("OpenTask after Close: %v, want ErrClosed", err)
	}
}

func TestTasksListsOnlyTaskDirs(t *testing.T) {
	fs := vfs.NewMem()
	// MinFreeBytes off: the free-space check reads free bytes too; this
	// test is about placement alone.
	m := openManager(t, Options{Dirs: []string{"/a", "/b"}, FS: fs, Placement: PlacementTasks, MinFreeBytes: NoMinFreeBytes})
	for _, task := range []int{4, 0, 11} {
		openTask(t, m, task).Close()
	}
	for _, junk := range []string{"/a/joiner/task-x", "/a/joiner/task-07", "/b/joiner/notes", "/b/joiner/task-4.corrupt-1", "/a/other/task-9"} {
		if err := fs.MkdirAll(junk, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f, _ := fs.Create("/b/joiner/task-8", vfs.WriteCategoryUnspecified) // a file, not a dir
	f.Close()
	tasks, err := m.Tasks()
	if err != nil || fmt.Sprint(tasks) != "[0 4 11]" {
		t.Errorf("Tasks = %v, %v; want [0 4 11]", tasks, err)
	}
}

func TestPlacementByFreeBytes(t *testing.T) {
	fs := &usageFS{FS: vfs.NewMem()}
	// The free-space check (off here) reads the free bytes of a task's
	// dir; this test gives those of the state dirs, for placement.
	m := openManager(t, Options{Dirs: []string{"/a", "/b", "/c"}, FS: fs, MinFreeBytes: NoMinFreeBytes})
	free := map[string]uint64{"/a": 10, "/b": 30, "/c": 20}
	fs.set(func(d string) (uint64, error) { return free[d], nil })

	if s := openTask(t, m, 0); s.Dir() != "/b/joiner/task-0" {
		t.Errorf("task 0 in %s, want /b (most free)", s.Dir())
	}
	free["/c"] = 40
	if s := openTask(t, m, 1); s.Dir() != "/c/joiner/task-1" {
		t.Errorf("task 1 in %s, want /c (most free)", s.Dir())
	}
	// Ties go to the first listed dir.
	free = map[string]uint64{"/a": 5, "/b": 5, "/c": 5}
	if s := openTask(t, m, 2); s.Dir() != "/a/joiner/task-2" {
		t.Errorf("task 2 in %s, want /a (tie)", s.Dir())
	}
	// An existing dir is reused whatever the free space says.
	s := m.open[0]
	s.Close()
	free["/a"] = 1000
	if s := openTask(t, m, 0); s.Dir() != "/b/joiner/task-0" {
		t.Errorf("reopened task 0 in %s, want its existing dir in /b", s.Dir())
	}
	// If free space is unknown, fall back to the fewest tasks. Before task
	// 3: /a holds task 2, /b task 0, /c task 1.
	fs.set(func(d string) (uint64, error) { return 0, errors.New("statfs failed") })
	if s := openTask(t, m, 3); s.Dir() != "/a/joiner/task-3" {
		t.Errorf("task 3 in %s, want /a (fallback to fewest tasks, tie to first)", s.Dir())
	}
	if s := openTask(t, m, 4); s.Dir() != "/b/joiner/task-4" {
		t.Errorf("task 4 in %s, want /b (fallback to fewest tasks, tie to first)", s.Dir())
	}
	if s := openTask(t, m, 5); s.Dir() != "/c/joiner/task-5" {
		t.Errorf("task 5 in %s, want /c (fallback to fewest tasks)", s.Dir())
	}
}

func TestPlacementByTasks(t *testing.T) {
	fs := &usageFS{FS: vfs.NewMem()}
	// Placement reads the free bytes of a state dir itself; Pebble reads
	// those of a store's dir, and the free-space check is off here.
	fs.set(func(dir string) (uint64, error) {
		if dir == "/a" || dir == "/b" {
			t.Errorf("free bytes of %s read with tasks placement", dir)
		}
		return 1 << 30, nil
	})
	m := openManager(t, Options{Dirs: []string{"/a", "/b"}, FS: fs, Placement: PlacementTasks, MinFreeBytes: NoMinFreeBytes})
	if err := fs.MkdirAll("/a/joiner/task-9", 0o755); err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for task := 0; task < 5; task++ {
		dirs = append(dirs, filepath.Dir(filepath.Dir(openTask(t, m, task).Dir())))
	}
	if got := strings.Join(dirs, " "); got != "/b /a /b /a /b" {
		t.Errorf("dirs of tasks 0..4 = %s, want /b /a /b /a /b", got)
	}
	if s := openTask(t, m, 9); s.Dir() != "/a/joiner/task-9" {
		t.Errorf("existing task 9 opened in %s", s.Dir())
	}
}

func TestPlacementConcurrentOpens(t *testing.T) {
	m := openManager(t, Options{Dirs: []string{"/a", "/b"}, FS: vfs.NewMem(), Placement: PlacementTasks})
	var wg sync.WaitGroup
	for task := 0; task < 8; task++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := m.OpenTask(task); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	a, _ := m.tasksIn("/a")
	b, _ := m.tasksIn("/b")
	if len(a) != 4 || len(b) != 4 {
		t.Errorf("tasks per dir: /a %v, /b %v; want 4 each", a, b)
	}
}

func TestValidate(t *testing.T) {
	for _, o := range []Options{
		{Group: "g"},
		{Dirs: []string{"/a"}},
		{Dirs: []string{"/a", "/a"}, Group: "g"},
		{Dirs: []string{""}, Group: "g"},
		{Dirs: []string{"/a"}, Group: "../x"},
		{Dirs: []string{"/a"}, Group: ".."},
		{Dirs: []string{"/a"}, Group: "g", CacheBytes: -1},
		{Dirs: []string{"/a"}, Group: "g", Placement: "random"},
	} {
		if err := o.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", o)
		}
		if _, err := Open(o); err == nil {
			t.Errorf("Open(%+v) succeeded", o)
		}
	}
	if err := (&Options{Dirs: []string{"/a"}, Group: "joiner"}).Validate(); err != nil {
		t.Errorf("valid options: %v", err)
	}
}

func TestConcurrentGetDuringApply(t *testing.T) {
	m := openManager(t, Options{Dirs: []string{t.TempDir()}})
	s := openTask(t, m, 0)
	syms := []string{"A", "B", "C", "D"}
	const batches = 500
	done := make(chan struct{})
	var wg sync.WaitGroup
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				// Prices only move forward: each batch writes its offset.
				lo := s.AppliedOffset()
				for _, sym := range syms {
					tk, ok, err := s.Latest(sym)
					if err != nil {
						t.Error(err)
						return
					}
					if ok && tk.TimestampMs < lo {
						t.Errorf("Get(%s) = %+v older than applied offset %d read before it", sym, tk, lo)
						return
					}
				}
			}
		}()
	}
	for off := int64(0); off < batches; off++ {
		ticks := make([]Tick, len(syms))
		for i, sym := range syms {
			ticks[i] = Tick{sym, float64(off), off, off}
		}
		if err := s.Apply(ticks, off); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
}

func TestCodecRoundTrip(t *testing.T) {
	for _, tk := range []Tick{{"A", 0, 0, 0}, {"B", -1.25, -1 << 62, 7}, {"C!~", 1e300, 1 << 62, 1 << 50}, {"D", 1, -1, 0}} {
		for _, meta := range []versionMeta{{}, {flagTruncated, -5}, {flagTruncated, 1 << 60}} {
			got, gotMeta, err := decodeVersion(versionKey(nil, tk.Symbol, tk.TimestampMs, tk.Offset), appendVersionValue(nil, tk.Price, meta))
			if err != nil || got != tk || gotMeta != meta {
				t.Errorf("version round trip of %+v/%+v = %+v/%+v, %v", tk, meta, got, gotMeta, err)
			}
		}
		// Apply builds keys and values in place, in slots of these sizes.
		if k := versionKey(nil, tk.Symbol, tk.TimestampMs, tk.Offset); len(k) != versionKeyLen(tk.Symbol) {
			t.Errorf("versionKeyLen(%q) = %d, the key has %d bytes", tk.Symbol, versionKeyLen(tk.Symbol), len(k))
		}
		if v := appendVersionValue(nil, tk.Price, versionMeta{}); len(v) != versionValueLen {
			t.Errorf("versionValueLen = %d, the value of %+v has %d bytes", versionValueLen, tk, len(v))
		}
	}
	for _, off := range []int64{-1, 0, 1, 1 << 40} {
		got, err := decodeOffset(appendOffset(nil, off))
		if err != nil || got != off {
			t.Errorf("offset round trip of %d = %d, %v", off, got, err)
		}
	}
	for _, bad := range [][]byte{nil, {}, {2, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {1, 0, 0}, {1, 0, 0, 0, 0, 0, 0, 0, 0}, {1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {1, 0, 0, 0, 0, 0, 0, 0, 0, 2}, {1, 0, 0, 0, 0, 0, 0, 0, 0, 1}} {
		if _, _, err := decodeVersionValue(bad); !errors.Is(err, errCorruptValue) {
			t.Errorf("decodeVersionValue(%x) err = %v, want errCorruptValue", bad, err)
		}
	}
	good := versionKey(nil, "AB", 5, 6)
	for _, bad := range [][]byte{nil, []byte("v/"), good[:len(good)-1], []byte("p/AB"), append([]byte("v/A\x00B\x00"), good[len(good)-16:]...)} {
		if _, _, _, err := decodeVersionKey(bad); !errors.Is(err, errCorruptValue) {
			t.Errorf("decodeVersionKey(%q) err = %v, want errCorruptValue", bad, err)
		}
	}
	for _, bad := range [][]byte{nil, {2, 0}, {1}, {1, 0, 0}, {1, 3}} {
		if _, err := decodeOffset(bad); !errors.Is(err, errCorruptValue) {
			t.Errorf("decodeOffset(%x) err = %v, want errCorruptValue", bad, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(versionKey(nil, "A", 1700000000000, 3), appendVersionValue(nil, 1.5, versionMeta{}))
	f.Add(versionKey(nil, "B", -1, 0), appendVersionValue(nil, -2, versionMeta{flagTruncated, 17}))
	f.Add([]byte("v/X"), appendOffset(nil, 12345))
	f.Add([]byte{}, []byte{})
	f.Add([]byte("v/\x00\x00"), []byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, k, v []byte) {
		// Decoding never panics; whatever decodes survives a round trip.
		if tk, meta, err := decodeVersion(k, v); err == nil {
			k2, v2 := versionKey(nil, tk.Symbol, tk.TimestampMs, tk.Offset), appendVersionValue(nil, tk.Price, meta)
			if string(k2) != string(k) || string(v2) != string(v) {
				t.Errorf("%x/%x decodes to %+v/%+v, re-encoded to %x/%x", k, v, tk, meta, k2, v2)
			}
			again, againMeta, err := decodeVersion(k2, v2)
			if err != nil || math.Float64bits(again.Price) != math.Float64bits(tk.Price) || again.TimestampMs != tk.TimestampMs || againMeta != meta {
				t.Errorf("version %x/%x decodes to %+v, re-encoded to %+v, %v", k, v, tk, again, err)
			}
		}
		if off, err := decodeOffset(v); err == nil {
			if again, err := decodeOffset(appendOffset(nil, off)); err != nil || again != off {
				t.Errorf("offset %x decodes to %d, re-encoded to %d, %v", v, off, again, err)
			}
		}
	})
}

// The latest-version cache keeps no symbol string of its callers: join
// passes symbols that alias fetched buffers, which the cache would
// otherwise pin, and see change if they were reused.
func TestCacheKeepsNoCallerString(t *testing.T) {
	m := openManager(t, Options{Dirs: []string{t.TempDir()}})
	s := openTask(t, m, 0)
	alias := func(b []byte) string { return unsafe.String(&b[0], len(b)) }
	if err := s.Apply([]Tick{{Symbol: "AAA", Price: 1, TimestampMs: 1000, Offset: 0}}, 0); err != nil {
		t.Fatal(err)
	}
	// A lookup that fills the cache, with a symbol aliasing buf.
	buf := []byte("AAA")
	if got, m, err := s.GetAsOf(alias(buf), 5000); err != nil || m != AsOf || got.Price != 1 {
		t.Fatalf("GetAsOf = %+v, %v, %v", got, m, err)
	}
	copy(buf, "ZZZ")
	for k, v := range s.latest {
		if k != v.Symbol {
			t.Errorf("the cache holds %q under the key %q: it kept the caller's string as its key", v.Symbol, k)
		}
	}
	if got, m, err := s.GetAsOf("AAA", 5000); err != nil || m != AsOf || got.Symbol != "AAA" || got.Price != 1 {
		t.Errorf("after the caller's buffer changed, GetAsOf(AAA) = %+v, %v, %v (the cache kept the caller's string)", got, m, err)
	}
	// An Apply that updates the cached version, with a symbol aliasing buf.
	copy(buf, "AAA")
	if err := s.Apply([]Tick{{Symbol: alias(buf), Price: 2, TimestampMs: 2000, Offset: 1}}, 1); err != nil {
		t.Fatal(err)
	}
	copy(buf, "QQQ")
	if got, m, err := s.GetAsOf("AAA", 5000); err != nil || m != AsOf || got.Symbol != "AAA" || got.Price != 2 {
		t.Errorf("after the caller's buffer changed, GetAsOf(AAA) = %+v, %v, %v (the cache kept the applied tick's string)", got, m, err)
	}
}
