package join

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/statestore"
)

// A store that cannot open because its state dir is under the minimum free
// space fails its task at once: not retried with backoff, not rebuilt (a
// restore would fill the disk), released to the group, reported failed on
// /readyz naming the full disk, and no notification is consumed for it.
func TestFullDiskFailsTheTaskAtOnce(t *testing.T) {
	full, err := statestore.Open(statestore.Options{Dirs: []string{t.TempDir()}, Group: "g", CacheBytes: 1 << 20, MinFreeBytes: 1 << 62})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { full.Close() })
	var logs strings.Builder
	var logMu sync.Mutex
	r := newFakeRig(t, func(c *Config) {
		c.Stores = full
		c.Logger = slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
			logMu.Lock()
			defer logMu.Unlock()
			return logs.Write(p)
		}), nil))
	})
	var mu sync.Mutex
	var released []int
	r.member.onRelease = func(p int) { mu.Lock(); released = append(released, p); mu.Unlock() }
	start := time.Now()
	r.w.Assigned(context.Background(), assignment(1, []int{0, 1}, []int{0, 1}))
	waitFor(t, "both tasks released", func() bool { mu.Lock(); defer mu.Unlock(); return len(released) == 2 })
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("released after %s; a full disk is not retried with backoff", d)
	}
	logMu.Lock()
	out := logs.String()
	logMu.Unlock()
	if strings.Contains(out, "retrying to open the task store") || strings.Contains(out, "moving it aside") {
		t.Errorf("a full disk was retried or rebuilt:\n%s", out)
	}
	mu.Lock()
	slices.Sort(released)
	got := released
	mu.Unlock()
	if !slices.Equal(got, []int{0, 1}) {
		t.Errorf("released %v, want [0 1]", got)
	}
	ok, why := r.w.Ready()
	if ok || !strings.Contains(why, "task 0 failed") || !strings.Contains(why, "state dir is full") {
		t.Errorf("/readyz %v %q, want 503 naming task 0 and the full disk", ok, why)
	}
	if full.Rebuilds() != 0 {
		t.Errorf("%d rebuilds on a full disk, want none", full.Rebuilds())
	}
	states, procs := r.tasks()
	if len(states)+len(procs) != 0 {
		t.Errorf("tasks started on a full disk: states %v procs %v", states, procs)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
