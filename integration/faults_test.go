package integration

// Fault-injection rows of issue 8 that need real `joiner run` processes:
// exit statuses, a state dir shared by two processes, a store marked
// corrupt by a crash. Each asserts from the alerts topic that no alert was
// lost and none says miss (checkAlertResults).

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/loadgen"
)

func exitCode(w *worker) int {
	var ee *exec.ExitError
	if errors.As(w.err, &ee) {
		return ee.ExitCode()
	}
	if w.err != nil {
		return -1
	}
	return 0
}

func readLog(t *testing.T, w *worker) string {
	t.Helper()
	b, err := os.ReadFile(w.logPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Row "two workers on one host given the same --state-dir": the second
// exits 1 at start, naming the first; the first goes on, no alert lost.
func TestIntegrationFaultSharedStateDir(t *testing.T) {
	c := newCluster(t, partitions)
	w1 := c.start("w1")
	st := c.waitStable([]*worker{w1}, 0, 60*time.Second)
	// w2's state dir is w1's.
	if err := os.Symlink(c.stateDir("w1"), c.stateDir("w2")); err != nil {
		t.Fatal(err)
	}
	w2 := c.start("w2")
	if !w2.wait(60 * time.Second) {
		t.Fatal("the second worker on w1's state dir is still running after 60s")
	}
	if code := exitCode(w2); code != 1 {
		t.Errorf("second worker exit status %d, want 1", code)
	}
	if l := readLog(t, w2); !strings.Contains(l, "instance=w1") {
		t.Errorf("second worker's error does not name w1:\n%s", tail(w2.logPath, 5))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sum := c.produce(ctx, loadgen.Config{Symbols: 20, TicksPerSymbol: 2, NotificationsPerSymbol: 5, RunID: "shared-"})
	c.waitAlerts(sum.NotificationIDs, time.Minute)
	c.checkAlertResults()
	c.checkPrices(sum.NotificationIDs, sum.LastPrice)
	if !w1.running() {
		t.Errorf("w1 stopped: %v", w1.err)
	}
	_ = st
	c.stop(w1)
}

// Row "a corrupted .sst": the crash leaves a JOINER-CORRUPT marker in the
// task dir (statestore's TestCorruptSSTCrashesOnceThenRebuilds crashes a
// real Pebble on a damaged .sst); here a worker restarted on a marked
// store moves it aside, rebuilds it from Kafka without crashing, counts it,
// and every alert is right.
func TestIntegrationFaultMarkedStoreRebuiltOnce(t *testing.T) {
	c := newCluster(t, partitions)
	w1 := c.start("w1")
	c.waitStable([]*worker{w1}, 0, 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	first := c.produce(ctx, loadgen.Config{Symbols: 20, TicksPerSymbol: 2, NotificationsPerSymbol: 2, RunID: "before-"})
	c.waitAlerts(first.NotificationIDs, time.Minute)
	c.stop(w1)

	dirs, _ := filepath.Glob(filepath.Join(c.stateDir("w1"), c.group, "task-*"))
	if len(dirs) != partitions {
		t.Fatalf("task dirs %v, want %d", dirs, partitions)
	}
	marked := dirs[0]
	if err := os.WriteFile(filepath.Join(marked, "JOINER-CORRUPT"), []byte("test: data corruption\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w1 = c.start("w1")
	c.waitStable([]*worker{w1}, 0, 60*time.Second)
	second := c.produce(ctx, loadgen.Config{Symbols: 20, TicksPerSymbol: 1, NotificationsPerSymbol: 2, RunID: "after-", Seed: 2})
	ids, last := merge(first, second)
	c.waitAlerts(ids, time.Minute)
	c.checkAlertResults()
	c.checkPrices(second.NotificationIDs, last)
	if !w1.running() {
		t.Fatalf("the worker exited on a marked store: %v", w1.err)
	}
	aside, _ := filepath.Glob(marked + ".corrupt-*")
	if len(aside) != 1 {
		t.Errorf("moved-aside copies of %s: %v, want 1", marked, aside)
	}
	m, err := scrapeMetric(w1.addr, `joiner_store_rebuilds_total{reason="corruption"}`)
	if err != nil || m != 1 {
		t.Errorf(`joiner_store_rebuilds_total{reason="corruption"} = %v (%v), want 1`, m, err)
	}
	c.stop(w1)
	// A third start does not rebuild again.
	w1 = c.start("w1")
	c.waitStable([]*worker{w1}, 0, 60*time.Second)
	if m, err := scrapeMetric(w1.addr, `joiner_store_rebuilds_total{reason="corruption"}`); err != nil || m != 0 {
		t.Errorf("after another restart: corruption rebuilds %v (%v), want 0", m, err)
	}
	c.stop(w1)
}

// Row "--group \"\"" and the other configuration faults, as processes:
// exit status 2, nothing started.
func TestIntegrationFaultUsageExit2(t *testing.T) {
	requireKafka(t)
	for _, args := range [][]string{
		{"--group", ""},
		{"--instance-id", ""},
		{"--assignor", "sticky"},
		{"--session-timeout", "0s"},
	} {
		cmd := exec.Command(joinerBin, append([]string{"run", "--brokers", strings.Join(brokers, ",")}, args...)...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("joiner run %q: %v, want exit status 2; output: %s", args, err, out)
		}
	}
}

func scrapeMetric(addr, series string) (float64, error) {
	resp, err := httpClient.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	for _, line := range strings.Split(b.String(), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, errors.New(series + " not exported")
}
