package demo_test

// The status page (package statuspage) of running workers on the
// embedded broker: in headless Chromium (every task's number, role and
// counts in the visible text, a 1280×800 screenshot, no horizontal
// scroll), and over plain HTTP for a worker with a failed task and one
// whose notifications wait for the market.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/joiner-dev/joiner/demo"
	jfetch "github.com/joiner-dev/joiner/fetch"
	"github.com/joiner-dev/joiner/join"
	"github.com/joiner-dev/joiner/loadgen"
	"github.com/joiner-dev/joiner/node"
	"github.com/joiner-dev/joiner/statuspage"
	"github.com/joiner-dev/joiner/testsupport/htmltest"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol/listoffsets"
	"golang.org/x/net/html"
)

// chromium returns the path of the chromium binary, skipping the test
// when there is none (failing it when JOINER_REQUIRE_CHROMIUM=1).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("JOINER_REQUIRE_CHROMIUM") == "1" {
		t.Fatal("chromium is not installed and JOINER_REQUIRE_CHROMIUM=1 (apt-get install -y chromium)")
	}
	t.Skip("chromium is not installed (apt-get install -y chromium; JOINER_REQUIRE_CHROMIUM=1 makes this a failure)")
	return ""
}

// runChromium runs headless chromium with args and returns its stdout.
func runChromium(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
		"--no-first-run", "--user-data-dir=" + t.TempDir(), "--window-size=1280,800"}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, stderr.String())
	}
	return stdout.Bytes()
}

// getStatus reads a worker's /v1/status.
func getStatus(t *testing.T, addr string) statuspage.Status {
	t.Helper()
	res, err := http.Get("http://" + addr + "/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var s statuspage.Status
	if err := json.NewDecoder(res.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// getPage reads a worker's status page and parses it.
func getPage(t *testing.T, addr string) *html.Node {
	t.Helper()
	res, err := http.Get("http://" + addr + "/?refresh=0")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("GET / answered %s: %s", res.Status, b)
	}
	doc, err := html.Parse(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

var (
	attr    = htmltest.Attr
	findAll = htmltest.FindAll
	textOf  = htmltest.Text
)

// taskRows maps task → its row of the page's task table.
func taskRows(doc *html.Node) map[int]*html.Node {
	rows := map[int]*html.Node{}
	for _, tr := range findAll(doc, func(n *html.Node) bool { return n.Data == "tr" && attr(n, "class") == "task" }) {
		p, err := strconv.Atoi(attr(tr, "data-task"))
		if err == nil {
			rows[p] = tr
		}
	}
	return rows
}

func cellText(row *html.Node, class string) string {
	cells := htmltest.ByClass(row, class)
	if len(cells) == 0 {
		return ""
	}
	return textOf(cells[0])
}

// TestStatusPageInChromium loads the page of two running workers in
// headless Chromium after a load: every task of each worker is on its
// page with its number, role and counts, the counts of all pages add up
// to the notifications produced, the grid shows every task's owner, the
// page does not scroll sideways at 1280×800, and a screenshot is taken
// (kept at $JOINER_STATUS_SCREENSHOT when set).
func TestStatusPageInChromium(t *testing.T) {
	bin := chromium(t)
	h := newHarness(t, 4)
	h.start("w1", "w2")
	h.stable()
	sum := h.produce(loadgen.Config{Symbols: 20, TicksPerSymbol: 2, NotificationsPerSymbol: 5})
	h.allAlerts()
	workers := h.f.Workers()
	// The counts are published once Kafka acknowledged the alerts; wait
	// for them to add up.
	total := func() int64 {
		var n int64
		for _, w := range workers {
			for _, ts := range w.Processor().TaskStatuses() {
				n += ts.Joins.Total()
			}
		}
		return n
	}
	waitUntil(t, 10*time.Second, "the task counts to add up to the notifications", func() bool { return total() == int64(sum.Notifications) })

	var pageJoins int64
	for _, name := range []string{"w1", "w2"} {
		w := workers[name]
		want := w.Processor().TaskStatuses()
		if len(want) == 0 {
			t.Fatalf("%s holds no task", name)
		}
		dom := runChromium(t, bin, "--dump-dom", "http://"+w.Addr()+"/?refresh=0&check=layout")
		doc, err := html.Parse(bytes.NewReader(dom))
		if err != nil {
			t.Fatal(err)
		}
		// The worker's joins are joiner_joins_total's.
		st := w.Processor().Stats()
		if got, want := textOf(htmltest.ByID(doc, "joins")), fmt.Sprintf("local %d · remote %d · miss %d · late %d", st.Local, st.Remote, st.Miss, st.Late); got != want {
			t.Errorf("%s: the page's joins since start are %q, the metrics say %q", name, got, want)
		}
		rows := taskRows(doc)
		for _, ts := range want {
			row := rows[ts.Task]
			if row == nil {
				t.Errorf("%s: task %d is not on the page", name, ts.Task)
				continue
			}
			if got := cellText(row, "task-id"); got != strconv.Itoa(ts.Task) {
				t.Errorf("%s: task %d's row shows task %q", name, ts.Task, got)
			}
			if got := cellText(row, "role"); got != ts.Role {
				t.Errorf("%s: task %d's role is %q on the page, want %q", name, ts.Task, got, ts.Role)
			}
			if got := cellText(row, "state"); !strings.HasPrefix(got, "running") {
				t.Errorf("%s: task %d's state is %q, want running", name, ts.Task, got)
			}
			wantJoins := fmt.Sprintf("local %d · remote %d · miss %d · late %d", ts.Joins.Local, ts.Joins.Remote, ts.Joins.Miss, ts.Joins.Late)
			if got := cellText(row, "joins"); got != wantJoins {
				t.Errorf("%s: task %d's joins are %q on the page, want %q", name, ts.Task, got, wantJoins)
			}
			if got := cellText(row, "dead"); got != strconv.FormatInt(ts.DeadLetters, 10) {
				t.Errorf("%s: task %d's dead letters are %q, want %d", name, ts.Task, got, ts.DeadLetters)
			}
			pageJoins += ts.Joins.Total()
		}
		if len(rows) != len(want) {
			t.Errorf("%s: the page shows %d tasks, the worker holds %d", name, len(rows), len(want))
		}
		// The grid: a row per task of the group, each with its owner's
		// column marked active.
		grid := findAll(doc, func(n *html.Node) bool { return n.Data == "table" && attr(n, "class") == "grid" })
		if len(grid) != 1 {
			t.Fatalf("%s: %d group grids on the page", name, len(grid))
		}
		members := findAll(grid[0], func(n *html.Node) bool { return attr(n, "class") == "member" })
		owners := h.f.Owners()
		for p := range 4 {
			rows := findAll(grid[0], func(n *html.Node) bool { return n.Data == "tr" && attr(n, "data-task") == strconv.Itoa(p) })
			if len(rows) != 1 {
				t.Errorf("%s: task %d has %d rows in the grid", name, p, len(rows))
				continue
			}
			cells := findAll(rows[0], func(n *html.Node) bool { return n.Data == "td" })
			for i, m := range members {
				wantActive := attr(m, "data-instance") == owners[p]
				if got := strings.Contains(attr(cells[i], "class"), "role-active"); got != wantActive {
					t.Errorf("%s: grid cell of task %d × %s active=%v, owner is %s", name, p, attr(m, "data-instance"), got, owners[p])
				}
			}
		}
		// No horizontal scroll at 1280×800: the script added under
		// ?check=layout wrote the widths into the DOM.
		checks := findAll(doc, func(n *html.Node) bool { return attr(n, "id") == "layout-check" })
		if len(checks) != 1 {
			t.Fatalf("%s: the layout check did not run (no #layout-check in the DOM)", name)
		}
		sw, _ := strconv.Atoi(attr(checks[0], "data-scroll-width"))
		cw, _ := strconv.Atoi(attr(checks[0], "data-client-width"))
		if cw == 0 || sw > cw {
			t.Errorf("%s: the page scrolls sideways at 1280×800: scrollWidth %d, clientWidth %d", name, sw, cw)
		}
	}
	if pageJoins != int64(sum.Notifications) {
		t.Errorf("the pages count %d joins, %d notifications were produced", pageJoins, sum.Notifications)
	}

	shot := os.Getenv("JOINER_STATUS_SCREENSHOT")
	if shot == "" {
		shot = filepath.Join(t.TempDir(), "status-page.png")
	} else if abs, err := filepath.Abs(shot); err == nil {
		shot = abs
		_ = os.MkdirAll(filepath.Dir(shot), 0o755)
	}
	runChromium(t, bin, "--screenshot="+shot, "http://"+workers["w1"].Addr()+"/?refresh=0")
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	cfg, err := png.DecodeConfig(f)
	if err != nil {
		t.Fatalf("the screenshot is no PNG: %v", err)
	}
	if cfg.Width != 1280 || cfg.Height != 800 {
		t.Errorf("the screenshot is %d×%d, want 1280×800", cfg.Width, cfg.Height)
	}
	t.Logf("screenshot: %s", shot)
}

// TestStatusPageFailedTask: a worker whose store of task 2 cannot be
// written shows task 2 failed, with the error, on its page and in
// /v1/status.
func TestStatusPageFailedTask(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 4)
	h.f.Template.FS = roFS{FS: vfs.Default, fragments: []string{string(filepath.Separator) + "w1" + string(filepath.Separator) + h.b.Group + string(filepath.Separator) + "task-2"}}
	h.start("w1")
	w1 := h.f.Workers()["w1"]
	waitUntil(t, 45*time.Second, "w1 to fail task 2", func() bool {
		return slices.Contains(w1.Processor().View().FailedTasks, 2)
	})
	var why string
	for _, ts := range getStatus(t, w1.Addr()).Tasks {
		if ts.Task == 2 {
			if ts.Role != join.RoleFailed || ts.State != join.StateFailed {
				t.Errorf("task 2 in /v1/status: role %q state %q, want failed", ts.Role, ts.State)
			}
			why = ts.Reason
		}
	}
	if !strings.Contains(why, "read-only file system") {
		t.Fatalf("task 2's reason in /v1/status is %q, want the store's error", why)
	}
	row := taskRows(getPage(t, w1.Addr()))[2]
	if row == nil {
		t.Fatal("task 2 is not on the page")
	}
	if got := cellText(row, "role"); got != "failed" {
		t.Errorf("task 2's role on the page is %q, want failed", got)
	}
	if got := cellText(row, "state"); !strings.Contains(got, "failed") || !strings.Contains(got, why) {
		t.Errorf("task 2's state on the page is %q, want failed with %q", got, why)
	}
}

// marketBlocker fails the fetches and offset requests of the market topic
// while on: the market partition cannot be read, as with no leader.
type marketBlocker struct {
	kafka.RoundTripper
	market string
	on     atomic.Bool
}

var errNoLeader = errors.New("test: the market partition has no leader")

func (b *marketBlocker) RoundTrip(ctx context.Context, addr net.Addr, req kafka.Request) (kafka.Response, error) {
	if b.on.Load() {
		switch req.(type) {
		case *jfetch.MuxRequest:
			// One Fetch carries every partition the worker reads from the
			// broker (fetch.Mux): the market's fail, the others are read.
			res, err := b.RoundTripper.RoundTrip(ctx, addr, req)
			if f, ok := res.(*jfetch.MuxResponse); ok && err == nil {
				for i := range f.Topics {
					if f.Topics[i].Topic != b.market {
						continue
					}
					for j := range f.Topics[i].Partitions {
						p := &f.Topics[i].Partitions[j]
						p.ErrorCode, p.Records = int16(kafka.LeaderNotAvailable), nil
					}
				}
			}
			return res, err
		default:
			if lo := listOffsetsOf(req); lo != nil {
				for _, tp := range lo.Topics {
					if tp.Topic == b.market {
						return nil, errNoLeader
					}
				}
			}
		}
	}
	return b.RoundTripper.RoundTrip(ctx, addr, req)
}

// listOffsetsOf is the ListOffsets request req is or wraps: the worker's
// transport sends ListOffsets in a type of its own that embeds it (one
// request per partition leader).
func listOffsetsOf(req kafka.Request) *listoffsets.Request {
	if lo, ok := req.(*listoffsets.Request); ok {
		return lo
	}
	v := reflect.ValueOf(req)
	if v.Kind() != reflect.Struct {
		return nil
	}
	for i := range v.NumField() {
		if lo, ok := v.Field(i).Interface().(*listoffsets.Request); ok {
			return lo
		}
	}
	return nil
}

// TestStatusPageWaitingForMarket: once the market cannot be read, the
// notifications that come in wait for it, and the worker's page says
// which notification waits for which market partition.
func TestStatusPageWaitingForMarket(t *testing.T) {
	t.Parallel()
	b, err := demo.StartBroker(1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	cfg := demo.WorkerConfig(b, t.TempDir(), "w1", node.Config{JoinConfig: node.JoinConfig{MaxTaskIdle: 200 * time.Millisecond}, Logger: testLogger(t)})
	blocker := &marketBlocker{RoundTripper: cfg.Transport, market: b.Topics.Market}
	cfg.Transport = blocker
	w := startNode(t, cfg)
	if _, err := demo.WaitStable(context.Background(), 45*time.Second, 1, func() map[string]*node.Node { return map[string]*node.Node{"w1": w} }); err != nil {
		t.Fatal(err)
	}
	blocker.on.Store(true)
	if _, err := loadgen.Run(context.Background(), loadgen.Config{Brokers: b.Addrs, MarketTopic: b.Topics.Market,
		NotificationsTopic: b.Topics.Notifications, Symbols: 3, TicksPerSymbol: 0, NotificationsPerSymbol: 2, RunID: "wait"}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 30*time.Second, "task 0 to wait for the market", func() bool {
		ts := w.Processor().TaskStatuses()
		return len(ts) == 1 && ts[0].State == join.StateWaitingMarket
	})
	row := taskRows(getPage(t, w.Addr()))[0]
	if row == nil {
		t.Fatal("task 0 is not on the page")
	}
	got := cellText(row, "state")
	want := "waits for " + b.Topics.Market + "-0 to be read past it"
	if !strings.HasPrefix(got, "waiting for the market") || !strings.Contains(got, want) || !strings.Contains(got, "notification at ") {
		t.Errorf("task 0's state on the page is %q, want waiting for the market with %q", got, want)
	}
	blocker.on.Store(false)
	waitUntil(t, 30*time.Second, "task 0 to run again once the market is readable", func() bool {
		ts := w.Processor().TaskStatuses()
		return len(ts) == 1 && ts[0].State == join.StateRunning
	})
}

// TestDemoServe: with Serve, the demo hands over the report and every
// worker's page, the pages keep answering after the report, and after
// the run's own timeout has passed, until ctx ends the run.
func TestDemoServe(t *testing.T) {
	t.Parallel()
	cfg := demo.DefaultConfig()
	cfg.Workers, cfg.Partitions, cfg.Timeout, cfg.Logger = 2, 2, 20*time.Second, testLogger(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type servedPages struct {
		rep   demo.Report
		pages []demo.WorkerPage
	}
	servedCh := make(chan servedPages, 1)
	cfg.Serve = func(rep demo.Report, ps []demo.WorkerPage) {
		servedCh <- servedPages{rep, ps}
		go func() {
			time.Sleep(cfg.Timeout + time.Second) // past the run's timeout
			cancel()
		}()
	}
	type result struct {
		rep demo.Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := demo.Run(ctx, cfg)
		done <- result{rep, err}
	}()
	var served servedPages
	select {
	case served = <-servedCh:
	case r := <-done:
		t.Fatalf("Run returned before serving: %v", r.err)
	case <-time.After(60 * time.Second):
		t.Fatal("no report after 60s")
	}
	pages := served.pages
	if len(pages) != 2 {
		t.Fatalf("%d pages, want 2", len(pages))
	}
	time.Sleep(cfg.Timeout) // the run's timeout has passed
	for _, p := range pages {
		res, err := http.Get(p.URL + "?refresh=0")
		if err != nil {
			t.Fatalf("%s's page %s after the timeout: %v", p.Instance, p.URL, err)
		}
		doc, err := html.Parse(res.Body)
		res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		ids := findAll(doc, func(n *html.Node) bool { return attr(n, "id") == "instance" })
		if res.StatusCode != 200 || len(ids) != 1 || textOf(ids[0]) != p.Instance {
			t.Errorf("%s's page: %s, instance %v", p.Instance, res.Status, ids)
		}
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.rep.Alerts != 30 || served.rep.Alerts != 30 {
		t.Errorf("alerts: %d returned, %d served, want 30", r.rep.Alerts, served.rep.Alerts)
	}
}
