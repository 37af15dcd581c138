package demo_test

// Fault-injection tests on the embedded broker (issue 8): each asserts
// what must happen, and from the alerts topic that no alert was lost and
// none says miss for a symbol that has a price.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/joiner-dev/joiner/join"
	"github.com/joiner-dev/joiner/loadgen"
	"github.com/joiner-dev/joiner/node"
	"github.com/joiner-dev/joiner/record"
	"github.com/joiner-dev/joiner/testsupport/oracle"
	"github.com/joiner-dev/joiner/testsupport/testkit"
	"github.com/segmentio/kafka-go"
)

// logBuffer collects a node's logs for assertions (and tees them to the
// test logger when JOINER_TEST_LOGS is set).
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if testingLogs() {
		_, _ = os.Stderr.Write(p)
	}
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func testingLogs() bool { return os.Getenv("JOINER_TEST_LOGS") != "" }

// metric reads one sample of the worker's /metrics, -1 when absent.
func metric(t *testing.T, addr, series string) float64 {
	t.Helper()
	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	return -1
}

func readyz(t *testing.T, addr string) (int, string) {
	t.Helper()
	res, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(res.Body)
	return res.StatusCode, strings.TrimSpace(b.String())
}

func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkAlerts asserts from the alerts topic that every notification of the
// harness has an alert and none is a miss for a symbol with a price.
func checkAlerts(t *testing.T, h *harness) *testkit.Alerts {
	t.Helper()
	a := h.allAlerts()
	r := oracle.NewAlertReader(h.b.Client, h.b.Topics.Alerts, h.b.Partitions)
	if err := r.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, v := range r.Values() {
		var al record.Alert
		if err := json.Unmarshal(v, &al); err != nil {
			t.Fatalf("alert %q: %v", v, err)
		}
		if al.Result == record.ResultMiss {
			if _, priced := h.last[al.Symbol]; priced {
				t.Errorf("alert %s for %s says miss, but the symbol has a price", al.ID, al.Symbol)
			}
		}
	}
	return a
}

// startNode runs a node outside the fleet (other topics or options) until
// the test ends.
func startNode(t *testing.T, cfg node.Config) *node.Node {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	n, err := node.New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return n
}

// Row "a member of the same group configured with other topics": it gets
// no tasks, says why (ERROR log, /readyz 503, joiner_group_excluded 1), and
// the group's members process every notification.
func TestFaultForeignMemberGetsNoTasks(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 6)
	h.start("w1")
	h.stable()
	ctx := context.Background()
	if _, err := h.b.Client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{Topic: "prices", NumPartitions: 6, ReplicationFactor: 1}}}); err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	foreign := startNode(t, node.Config{
		Brokers: h.b.Addrs, Group: h.b.Group, InstanceID: "foreign",
		Topics:       record.Topics{Market: "prices", Notifications: h.b.Topics.Notifications, Alerts: h.b.Topics.Alerts, DeadLetter: h.b.Topics.DeadLetter},
		HTTPAddr:     "127.0.0.1:0",
		StoreOptions: node.StoreOptions{Dirs: []string{t.TempDir()}, CacheBytes: 8 << 20},
		MemberConfig: node.MemberConfig{SessionTimeout: 1500 * time.Millisecond, HeartbeatInterval: 250 * time.Millisecond, RebalanceTimeout: 5 * time.Second},
		Logger:       slog.New(slog.NewTextHandler(&logs, nil)),
	})
	waitUntil(t, 30*time.Second, "the foreign member's /readyz to say it is excluded", func() bool {
		code, body := readyz(t, foreign.Addr())
		return code == http.StatusServiceUnavailable && strings.Contains(body, "excluded") && strings.Contains(body, "prices")
	})
	if got := metric(t, foreign.Addr(), "joiner_group_excluded"); got != 1 {
		t.Errorf("joiner_group_excluded = %v on the foreign member, want 1", got)
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "excluded by the group leader") {
		t.Errorf("the foreign member logged no ERROR saying it is excluded:\n%s", logs.String())
	}
	if s := foreign.Processor().Stats(); len(s.Tasks)+len(s.StateTasks) != 0 {
		t.Errorf("foreign member holds tasks %v / %v", s.Tasks, s.StateTasks)
	}
	h.stable() // w1 holds all 6 tasks
	w1 := h.f.Workers()["w1"]
	if got := metric(t, w1.Addr(), "joiner_group_excluded"); got != 0 {
		t.Errorf("joiner_group_excluded = %v on w1, want 0", got)
	}
	h.produce(loadgen.Config{Symbols: 20, TicksPerSymbol: 2, NotificationsPerSymbol: 10})
	checkAlerts(t, h)
	if s := foreign.Processor().Stats(); s.Local+s.Remote+s.Miss != 0 {
		t.Errorf("foreign member joined %d notifications", s.Local+s.Remote+s.Miss)
	}
}

// Row "a new or mistyped group": --start-offset latest skips what is
// there, earliest replays it; either way one line says how many records.
func TestFaultNewGroupStartOffset(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 3)
	old := h.produce(loadgen.Config{Symbols: 10, TicksPerSymbol: 1, NotificationsPerSymbol: 3})
	h.ids = nil // the records before the start are not expected to get alerts
	var logs logBuffer
	h.f.Template.StartOffset = join.StartLatest
	h.f.Template.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	h.start("w1")
	h.stable()
	if !strings.Contains(logs.String(), "level=WARN msg=\"no committed offset: starting at the end") ||
		!strings.Contains(logs.String(), "records_skipped="+strconv.Itoa(old.Notifications)) {
		t.Errorf("no WARN saying %d records are skipped:\n%s", old.Notifications, logs.String())
	}
	h.produce(loadgen.Config{Symbols: 10, TicksPerSymbol: 1, NotificationsPerSymbol: 2})
	a := checkAlerts(t, h)
	for _, id := range old.NotificationIDs {
		if a.Count(id) != 0 {
			t.Errorf("notification %s from before the start got an alert with --start-offset latest", id)
		}
	}
	// A second group on the same topics, earliest: it says it replays
	// everything there.
	var logs2 logBuffer
	startNode(t, node.Config{
		Brokers: h.b.Addrs, Group: "other-group", InstanceID: "x1", Topics: h.b.Topics,
		HTTPAddr:     "127.0.0.1:0",
		StoreOptions: node.StoreOptions{Dirs: []string{t.TempDir()}, CacheBytes: 8 << 20},
		Logger:       slog.New(slog.NewTextHandler(&logs2, nil)),
	})
	if want := "records_to_replay=" + strconv.Itoa(old.Notifications+20); !strings.Contains(logs2.String(), want) ||
		!strings.Contains(logs2.String(), "level=WARN msg=\"no committed offset: replaying") {
		t.Errorf("no WARN with %s:\n%s", want, logs2.String())
	}
}

// Row "partitions added to one topic while running": the group keeps its
// tasks and their stores, reports the unpaired partitions and stays ready.
func TestFaultPartitionsAddedWhileRunning(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 4)
	h.start("w1", "w2")
	h.stable()
	h.produce(loadgen.Config{Symbols: 10, TicksPerSymbol: 1, NotificationsPerSymbol: 2})
	checkAlerts(t, h)
	resp, err := h.b.Client.CreatePartitions(context.Background(), &kafka.CreatePartitionsRequest{
		Topics: []kafka.TopicPartitionsConfig{{Name: h.b.Topics.Notifications, Count: 6}},
	})
	if err == nil {
		err = resp.Errors[h.b.Topics.Notifications]
	}
	if err != nil {
		t.Fatal(err)
	}
	unpaired := func() float64 {
		var sum float64
		for _, n := range h.f.Workers() {
			sum += metric(t, n.Addr(), "joiner_group_unpaired_partitions")
		}
		return sum
	}
	// The leader compares the counts every 10s.
	waitUntil(t, 30*time.Second, "joiner_group_unpaired_partitions = 2", func() bool { return unpaired() == 2 })
	h.stable() // every one of the 4 paired tasks is held and restored
	for name, n := range h.f.Workers() {
		if ok, why := n.Processor().Ready(); !ok {
			t.Errorf("%s not ready: %s", name, why)
		}
		for _, p := range n.Processor().Stats().StateTasks {
			dir := filepath.Join(h.f.Dir, name, h.b.Group, "task-"+strconv.Itoa(p))
			if _, err := os.Stat(dir); err != nil {
				t.Errorf("%s: the store of task %d is gone: %v", name, p, err)
			}
		}
	}
}

// Row "a task store that cannot be opened" (its dir read-only): the
// member does not process those tasks (no notification consumed or
// committed there, no miss), retries, tries a fresh dir, then reports them
// failed (joiner_tasks{role="failed"}, /readyz 503 naming them) and
// releases them; the group moves them to the other member, and every
// notification gets a correct alert.
func TestFaultUnopenableStoreIsNotProcessed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 4)
	h.produce(loadgen.Config{Symbols: 20, TicksPerSymbol: 2, NotificationsPerSymbol: 5})
	// w1 alone first: every task lands on its unusable stores, with a
	// backlog of notifications waiting.
	h.f.Template.FS = roFS{FS: vfs.Default, fragments: []string{string(filepath.Separator) + "w1" + string(filepath.Separator) + h.b.Group + string(filepath.Separator) + "task-"}}
	h.start("w1")
	w1 := h.f.Workers()["w1"]
	waitUntil(t, 45*time.Second, "w1 to report its 4 tasks failed", func() bool {
		code, body := readyz(t, w1.Addr())
		return code == http.StatusServiceUnavailable && strings.Contains(body, "failed") &&
			metric(t, w1.Addr(), `joiner_tasks{role="failed"}`) == 4
	})
	h.f.Template.FS = nil
	h.start("w2")
	w2 := h.f.Workers()["w2"]
	waitUntil(t, 45*time.Second, "w2 to hold all 4 tasks", func() bool { return len(w2.Processor().Stats().Tasks) == 4 })
	_, body := readyz(t, w1.Addr())
	if !strings.Contains(body, "task ") {
		t.Errorf("/readyz of w1 does not name the task: %q", body)
	}
	h.produce(loadgen.Config{Symbols: 20, TicksPerSymbol: 1, NotificationsPerSymbol: 5})
	checkAlerts(t, h)
	if s := w1.Processor().Stats(); s.Local+s.Remote+s.Miss != 0 {
		t.Errorf("w1 joined %d notifications with unusable stores", s.Local+s.Remote+s.Miss)
	}
	if got := metric(t, w1.Addr(), `joiner_records_total{topic="notifications"}`); got > 0 {
		t.Errorf("w1 consumed %v notifications with unusable stores", got)
	}
}
