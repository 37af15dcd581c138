package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/loadgen"
)

// TestIntegrationWidth1024: one `joiner run` worker owns 1,024 tasks (one
// per partition) on real Kafka. It gets ready, alerts every notification
// with its symbol's price, and holds at most 16 TCP connections to the
// broker and at most 4 open files per task, read from /proc (the fetches
// of every task go in one request per broker, fetch.Mux; the stores share
// one file cache). Long (the topics have 1,024 partitions each): run
// with JOINER_WIDTH=1 (or JOINER_WIDTH=<tasks> for another width).
func TestIntegrationWidth1024(t *testing.T) {
	if os.Getenv("JOINER_WIDTH") == "" {
		t.Skip("set JOINER_WIDTH=1 (and JOINER_KAFKA_BROKERS) to run the 1,024-task worker")
	}
	tasks := 1024
	if n, err := strconv.Atoi(os.Getenv("JOINER_WIDTH")); err == nil && n > 1 {
		tasks = n // JOINER_WIDTH=256: a narrower run
	}
	c := newCluster(t, tasks)
	began := time.Now()
	w := c.start("w1")
	stopSampling := sampleConns(t, w.cmd.Process.Pid)
	defer stopSampling()
	c.waitStable([]*worker{w}, 0, 3*time.Minute)
	pollReadyz(c, w, 3*time.Minute)
	ready := time.Since(began)
	t.Logf("%d tasks ready in %s", tasks, ready.Round(time.Millisecond))

	widthAlerts(t, c, "width-")

	// Idle again: measure, after kafka-go's transport closed the
	// connections that a burst opened (they idle out after 30 s).
	time.Sleep(35 * time.Second)
	checkWidthBounds(t, w, tasks, true)
	c.stopAll([]*worker{w})
}

// pollReadyz waits up to timeout for w's /readyz to answer 200.
func pollReadyz(c *cluster, w *worker, timeout time.Duration) {
	c.poll(w.id+" /readyz", timeout, func() (bool, string) {
		res, err := http.Get("http://" + w.addr + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK, res.Status
	})
}

// widthAlerts produces 5,000 symbols' ticks and 10,000 notifications and
// checks that each notification gets an alert with its symbol's price.
func widthAlerts(t *testing.T, c *cluster, runID string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sum := c.produce(ctx, loadgen.Config{Symbols: 5000, TicksPerSymbol: 1, NotificationsPerSymbol: 2, RunID: runID})
	if sum.Notifications != 10000 {
		t.Fatalf("loadgen produced %d notifications, want 10000", sum.Notifications)
	}
	c.waitAlerts(sum.NotificationIDs, 3*time.Minute)
	c.checkAlertResults()
	c.checkPrices(sum.NotificationIDs, sum.LastPrice)
}

// checkWidthBounds checks the connections to the broker (at most 16),
// the open files (at most 4 per task), the goroutines (at most 10 per
// task) and, with boundRSS and a thousand tasks or more, the RSS (at most
// 0.5 MB per task) of worker w, which owns tasks tasks, and logs them.
func checkWidthBounds(t *testing.T, w *worker, tasks int, boundRSS bool) {
	t.Helper()
	pid := w.cmd.Process.Pid
	files, conns, err := procFiles(pid, brokerPorts())
	if err != nil {
		t.Fatal(err)
	}
	rss := procRSS(t, pid)
	if g, ok := metricValue(w.addr, "go_goroutines"); ok {
		t.Logf("%s, %d tasks: %.0f goroutines (%.1f per task)", w.id, tasks, g, g/float64(tasks))
		// Measured 8.0 per task (1,024 tasks): the process and state
		// tasks, their readers' prefetchers and the outbox.
		if g > 10*float64(tasks) {
			t.Errorf("%s: %.0f goroutines for %d tasks; want at most 10 per task", w.id, g, tasks)
		}
	}
	t.Logf("%s, %d tasks: %d TCP connections to the broker, %d open files (%.2f per task), RSS %.1f MiB (%.0f KiB per task)",
		w.id, tasks, conns, files, float64(files)/float64(tasks), float64(rss)/(1<<20), float64(rss)/1024/float64(tasks))
	if conns > 16 {
		t.Errorf("%s: %d TCP connections to the broker; want at most 16", w.id, conns)
	}
	if files > 4*tasks {
		t.Errorf("%s: %d open files for %d tasks; want at most 4 per task", w.id, files, tasks)
	}
	// An idle task costs at most 0.5 MB of RSS: the whole worker's RSS
	// over its tasks, with a thousand of them (a narrower worker's
	// baseline weighs more per task). Measured 332 KiB per task; 815 KiB
	// with the collector's target fixed at 200% (gctune.Tune).
	if boundRSS && tasks >= 1000 && rss > int64(tasks)*500_000 {
		t.Errorf("%s: RSS %.1f MiB for %d idle tasks, %.0f KiB per task; want at most 0.5 MB (488 KiB) per task", w.id, float64(rss)/(1<<20), tasks, float64(rss)/1024/float64(tasks))
	}
}

// TestIntegrationWidthTwoWorkers: two `joiner run` workers share 2,048
// tasks on real Kafka. Both get ready, every notification is alerted
// with its symbol's price, and each worker stays within
// checkWidthBounds for the tasks it owns. Long: JOINER_WIDTH=1 runs it
// with TestIntegrationWidth1024.
func TestIntegrationWidthTwoWorkers(t *testing.T) {
	if os.Getenv("JOINER_WIDTH") == "" {
		t.Skip("set JOINER_WIDTH=1 (and JOINER_KAFKA_BROKERS) to run two workers with 2,048 tasks")
	}
	tasks := 2048
	if n, err := strconv.Atoi(os.Getenv("JOINER_WIDTH")); err == nil && n > 1 {
		tasks = 2 * n
	}
	c := newCluster(t, tasks)
	ws := []*worker{c.start("w1"), c.start("w2")}
	st := c.waitStable(ws, 0, 4*time.Minute)
	for _, w := range ws {
		pollReadyz(c, w, 4*time.Minute)
	}
	widthAlerts(t, c, "width2-")
	time.Sleep(35 * time.Second)
	owned := st.tasks()
	for _, w := range ws {
		owned := len(owned[w.id])
		if owned == 0 {
			t.Fatalf("%s owns no task", w.id)
		}
		// RSS logged, not bounded: a worker that held all 2,048 tasks
		// before the other joined kept 751-849 KiB per remaining task in
		// some runs, 331-358 KiB in others (issue 22 stays open on it).
		checkWidthBounds(t, w, owned, false)
	}
	c.stopAll(ws)
}

// sampleConns logs the connections and files of process pid every 5 s
// until the returned function is called.
func sampleConns(t *testing.T, pid int) func() {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if files, conns, err := procFiles(pid, brokerPorts()); err == nil {
					t.Logf("sample: %d connections to the broker, %d open files", conns, files)
				}
			}
		}
	}()
	return func() { close(stop); <-done }
}

// metricValue is the value of an unlabelled metric on the worker's
// /metrics.
func metricValue(addr, name string) (float64, bool) {
	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, false
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}

// brokerPorts are the ports of the test's brokers.
func brokerPorts() map[int]bool {
	ports := map[int]bool{}
	for _, b := range brokers {
		if i := strings.LastIndexByte(b, ':'); i >= 0 {
			if p, err := strconv.Atoi(b[i+1:]); err == nil {
				ports[p] = true
			}
		}
	}
	return ports
}

// procFiles counts the open files of process pid and, of its sockets, the
// TCP connections whose remote port is one of ports (/proc/<pid>/fd and
// /proc/<pid>/net/tcp{,6}).
func procFiles(pid int, ports map[int]bool) (files, conns int, err error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, 0, err
	}
	sockets := map[string]bool{}
	for _, fd := range fds {
		l, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), fd.Name()))
		if err != nil {
			continue
		}
		files++
		if ino, ok := strings.CutPrefix(l, "socket:["); ok {
			sockets[strings.TrimSuffix(ino, "]")] = true
		}
	}
	for _, name := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, name))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || !sockets[f[9]] {
				continue
			}
			// rem_address is hex ip:port; state 01 is ESTABLISHED.
			_, port, ok := strings.Cut(f[2], ":")
			p, perr := strconv.ParseInt(port, 16, 32)
			if ok && perr == nil && ports[int(p)] && f[3] == "01" {
				conns++
			}
		}
	}
	return files, conns, nil
}

// procRSS is the resident set size of process pid, bytes.
func procRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc status")
	return 0
}

// TestIntegrationWidthDemo: `joiner demo --workers 2 --partitions 1024
// --symbols 5000 --notifications-per-symbol 2 --json` (the embedded
// broker and both workers in one process) completes under an open-file
// limit of 16,384 and joins every notification locally. It never
// finished before the fetches were grouped by broker. Run with
// JOINER_WIDTH=1 (and JOINER_KAFKA_BROKERS, which builds the binary).
func TestIntegrationWidthDemo(t *testing.T) {
	requireKafka(t)
	if os.Getenv("JOINER_WIDTH") == "" {
		t.Skip("set JOINER_WIDTH=1 to run the 1,024-partition demo")
	}
	began := time.Now()
	cmd := exec.Command("bash", "-c", `ulimit -n 16384 && exec "$0" demo --workers 2 --partitions 1024 --symbols 5000 --notifications-per-symbol 2 --json --timeout 4m`, joinerBin)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("joiner demo: %v; stderr tail:\n%s", err, lastLines(stderr.String(), 30))
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var rep struct {
		Notifications int `json:"notifications"`
		Alerts        int `json:"alerts"`
		Joins         struct {
			Local, Remote, Miss int
		} `json:"joins"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rep); err != nil {
		t.Fatalf("the demo's last line is not its JSON report: %v\n%s", err, lines[len(lines)-1])
	}
	t.Logf("joiner demo, 2 workers, 1,024 partitions: %d notifications, %d alerts, joins %+v in %s",
		rep.Notifications, rep.Alerts, rep.Joins, time.Since(began).Round(time.Millisecond))
	if rep.Notifications != 10000 || rep.Alerts != 10000 || rep.Joins.Local != 10000 || rep.Joins.Miss != 0 || rep.Joins.Remote != 0 {
		t.Fatalf("report %+v; want 10,000 notifications, each alerted once, joined locally", rep)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
