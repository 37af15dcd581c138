package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/testsupport/oracle"
)

// diskFullLoad writes many ticks (3,000/s), so that a worker's stores need
// new disk space every few seconds, for 30 s.
var diskFullLoad = oracle.Config{Rounds: 300, TicksPerRound: 300, NotificationsPerRound: 30, RoundInterval: 100 * time.Millisecond,
	Symbols: 60, LateSymbols: 10, NoTickSymbols: 10}

// mountTmpfs mounts a tmpfs of size on dir, or skips the test (not root,
// or mount fails). The mount is lazily unmounted at the end.
func mountTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
}

// fill writes a file into dir until the disk refuses more, and returns
// its size.
func fill(t *testing.T, dir string) int64 {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			return 0
		}
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	var n int64
	for {
		m, err := f.Write(buf)
		n += int64(m)
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return n
		}
	}
}

// Row "the state dir's disk fills while running" (issue 19 item 4), on a
// real 8 MiB tmpfs: w1's state dir is filled under load. w1 exits 1 (not
// Go's 2 of a panic) with one ERROR line naming ENOSPC; its tasks move to
// w2. Restarted on the still-full disk, w1 stays up and fails each task it
// is given at once (no hang, no flood of log lines), so the tasks stay on
// w2; SIGTERM stops it. Every alert is exact.
func TestIntegrationFaultDiskFills(t *testing.T) {
	requireKafka(t)
	c := newCluster(t, partitions)
	mountTmpfs(t, c.stateDir("w1"), "8m")
	c.net.runFlags = append(c.net.runFlags, "--state-min-free-bytes", "1048576")
	w1, w2 := c.start("w1"), c.start("w2")
	c.waitStable([]*worker{w1, w2}, 0, 60*time.Second)

	p := oracle.NewProducer(brokers, nil, oracle.Topics{Market: c.market, Notifications: c.notifs, Alerts: c.alertsT}, diskFullLoad)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	produced := make(chan error, 1)
	go func() { produced <- p.Run(ctx) }()
	for float64(p.Rounds()) < 0.2*float64(diskFullLoad.Rounds) {
		time.Sleep(20 * time.Millisecond)
	}
	filled := fill(t, c.stateDir("w1"))
	filledAt := time.Now()
	t.Logf("filled w1's tmpfs with %d bytes", filled)
	if !w1.wait(90 * time.Second) {
		t.Fatalf("w1 still running 90s after its disk filled; log tail:\n%s", tail(w1.logPath, 20))
	}
	t.Logf("w1 exited %s after its disk filled: %v", time.Since(filledAt).Round(time.Millisecond), w1.err)
	log1 := readLog(t, w1)
	if code := exitCode(w1); code != 1 {
		t.Errorf("w1 exit status %d after its disk filled, want 1; log tail:\n%s", code, tail(w1.logPath, 20))
	}
	if n := strings.Count(log1, "the task store's disk refused a write"); n < 1 || !strings.Contains(log1, "errno ENOSPC") {
		t.Errorf("w1 logged %d write-fault lines, want at least one naming ENOSPC; log tail:\n%s", n, tail(w1.logPath, 20))
	}
	if strings.Contains(log1, "goroutine ") || strings.Contains(log1, "panic:") {
		t.Errorf("w1 crashed with a panic instead of exiting 1; log tail:\n%s", tail(w1.logPath, 40))
	}

	// Restart on the full disk: up, every task it gets fails at once.
	w1 = c.start("w1")
	c.poll("w2 to hold every task while w1 runs on its full disk", 90*time.Second, func() (bool, string) {
		v, err := w2.view()
		if err != nil {
			return false, err.Error()
		}
		return len(v.Tasks) == partitions && len(v.StateTasks) == partitions && w1.running(),
			fmt.Sprintf("w2 tasks %v state %v, w1 running %v", v.Tasks, v.StateTasks, w1.running())
	})
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	wl := p.Workload()
	rep, err := wl.WaitComplete(ctx, oracle.NewAlertReader(c.client, c.alertsT, partitions), wl.Produced(), 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("oracle %s: %v", t.Name(), rep)
	if rep.Lost != 0 || rep.Wrong != 0 || rep.DuplicatesDiffering != 0 {
		t.Errorf("oracle: %v; examples: %q", rep, rep.Examples)
	}
	if code, why := readyzOf(w1); code != http.StatusServiceUnavailable || !strings.Contains(why, "state dir is full") {
		t.Errorf("/readyz of w1 on a full disk: %d %q, want 503 naming the full disk", code, why)
	}
	began := time.Now()
	c.stop(w1) // SIGTERM: a clean exit 0
	t.Logf("w1 stopped in %s", time.Since(began).Round(time.Millisecond))
	log2 := readLog(t, w1)
	t.Logf("w1 on its full disk: %d log lines, %d tasks failed there", strings.Count(log2, "\n"), strings.Count(log2, "task failed on this member"))
	if n := strings.Count(log2, "\n"); n > 400 {
		t.Errorf("w1 wrote %d log lines on its full disk, want a few (rate-limited); tail:\n%s", n, tail(w1.logPath, 20))
	}
	if n := strings.Count(log2, "pebble: background error"); n > 20 {
		t.Errorf("w1 logged %d background errors, want them rate-limited", n)
	}
}

// readyzOf reads the worker's /readyz.
func readyzOf(w *worker) (int, string) {
	r, err := httpClient.Get(w.net.scheme + "://" + w.addr + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(b)
}
