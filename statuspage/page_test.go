package statuspage

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/group"
	"github.com/joiner-dev/joiner/join"
	"github.com/joiner-dev/joiner/testsupport/htmltest"
	"golang.org/x/net/html"
)

const evil = `<script>alert("x")</script>&`

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// fixedStatus holds a task in every role and every state.
func fixedStatus() Status {
	task := func(p int, role, state, reason string) Task {
		return Task{TaskStatus: join.TaskStatus{Task: p, Role: role, State: state, Reason: reason, MarketLag: -1, NotificationLag: -1}, History: []Sample{}}
	}
	running := task(0, join.RoleActive, join.StateRunning, "joining notifications merged with market-0 in time order")
	running.Merged, running.Processes = true, true
	running.MarketLag, running.NotificationLag = 3, 17
	running.Joins = join.JoinCounts{Local: 120, Remote: 7, Miss: 2, Late: 1}
	running.DeadLetters = 4
	running.LastError, running.LastErrorAt = "fetching market-0: "+evil, t0
	for i := range 5 {
		running.History = append(running.History, Sample{At: t0.Add(time.Duration(i) * 10 * time.Second), NotificationLag: int64(10 * i), JoinsPerSecond: float64(i)})
	}
	restoring := task(1, join.RoleActive, join.StateRestoring, "restoring market-1: 500 of 2000 records")
	restoring.Restore = &join.RestoreProgress{Done: 500, Total: 2000, RatePerSecond: 250, StartedAt: t0, ETASeconds: 6}
	paused := task(2, join.RoleActive, join.StatePaused, "paused at a handover: its batches in flight finish and its offsets are committed")
	wait := join.MarketWait{NotificationTs: t0.Add(1250 * time.Millisecond), MarketTopic: "market", Partition: 3, MarketReadTs: t0.Add(1100 * time.Millisecond), Since: t0}
	waiting := task(3, join.RoleActive, join.StateWaitingMarket, wait.String())
	waiting.Wait = &wait
	standby := task(4, join.RoleStandby, join.StateRunning, "tailing market-4 into its standby copy")
	standby.MarketLag = 12
	warmup := task(5, join.RoleWarmup, join.StateRestoring, "restoring market-5: 10 of 0 records")
	warmup.Restore = &join.RestoreProgress{Done: 10, Total: 90, StartedAt: t0, ETASeconds: -1}
	failed := task(6, join.RoleFailed, join.StateFailed, "open: read-only file system "+evil)
	starting := task(7, join.RoleActive, join.StateStarting, "reading the offsets to restore from")
	return Status{
		GeneratedAt: t0,
		Worker: Worker{Instance: "w1", Version: "v1.2.3", Commit: "abc123", StartedAt: t0.Add(-time.Hour), UptimeSeconds: 3600,
			Addr: "127.0.0.1:8080", Group: "joiner", Generation: 7, MemberID: "w1-xyz", Leader: true, Guarantee: join.Guarantee,
			Ready: false, ReadyReason: "task 6 failed", Joins: join.JoinCounts{Local: 1000, Remote: 20, Miss: 3, Late: 2},
			StateDirs: []StateDir{{Path: "/var/lib/joiner", FreeBytes: 1 << 30}, {Path: "/mnt/bad", Error: "no such dir"}}},
		Tasks: []Task{running, restoring, paused, waiting, standby, warmup, failed, starting},
		Group: Group{Partitions: 2,
			Members: []Member{{Instance: "w1", Addr: "127.0.0.1:8080", Self: true, Generation: 7}, {Instance: "w2", Addr: "127.0.0.1:8081", Error: "reading its /v1/assignment: refused"}},
			Tasks:   []GroupTask{{Task: 0, Owner: "w1", Roles: []string{"active", "standby"}}, {Task: 1, Owner: "w2", Roles: []string{"warmup", ""}}}},
		Rebalances: []join.RebalanceEvent{{At: t0, Generation: 7, Leader: true, Reason: "members now owning tasks: w2",
			Moved: []join.TaskMove{{Task: 1, From: "w1", To: "w2"}, {Task: 3, From: "w1", To: ""}}, Assigned: []int{}, Revoked: []int{1, 3}}},
	}
}

func parse(t *testing.T, s Status, o pageOptions) *html.Node {
	t.Helper()
	var b bytes.Buffer
	if err := render(&b, s, o); err != nil {
		t.Fatal(err)
	}
	doc, err := html.Parse(&b)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

var (
	attr     = htmltest.Attr
	findAll  = htmltest.FindAll
	hasClass = htmltest.HasClass
	byClass  = htmltest.ByClass
	textOf   = htmltest.Text
)

func cell(t *testing.T, row *html.Node, class string) string {
	t.Helper()
	cs := byClass(row, class)
	if len(cs) == 0 {
		t.Fatalf("row of task %s has no %s cell", attr(row, "data-task"), class)
	}
	return textOf(cs[0])
}

// TestPageShowsEveryRoleAndState renders a fixed status with a task in
// every role and state and checks, on the parsed DOM, each task's row.
func TestPageShowsEveryRoleAndState(t *testing.T) {
	s := fixedStatus()
	doc := parse(t, s, pageOptions{})
	rows := map[string]*html.Node{}
	for _, tr := range findAll(doc, func(n *html.Node) bool { return n.Data == "tr" && hasClass(n, "task") }) {
		rows[attr(tr, "data-task")] = tr
	}
	if len(rows) != len(s.Tasks) {
		t.Fatalf("%d task rows, want %d", len(rows), len(s.Tasks))
	}
	want := []struct {
		role, state string // the words on the page
	}{
		{"active", "running"}, {"active", "restoring"}, {"active", "paused at a handover"}, {"active", "waiting for the market"},
		{"standby", "running"}, {"warm-up", "restoring"}, {"failed", "failed"}, {"active", "starting"},
	}
	for i, ts := range s.Tasks {
		row := rows[strconv.Itoa(ts.Task)]
		if row == nil {
			t.Fatalf("task %d has no row", ts.Task)
		}
		if got := attr(row, "data-role"); got != ts.Role {
			t.Errorf("task %d: data-role %q, want %q", ts.Task, got, ts.Role)
		}
		if got := cell(t, row, "task-id"); got != strconv.Itoa(ts.Task) {
			t.Errorf("task %d: task cell %q", ts.Task, got)
		}
		if got := cell(t, row, "role"); got != want[i].role {
			t.Errorf("task %d: role %q, want %q", ts.Task, got, want[i].role)
		}
		state := cell(t, row, "state")
		if !strings.HasPrefix(state, want[i].state+" ") || !strings.Contains(state, strings.Join(strings.Fields(ts.Reason), " ")) {
			t.Errorf("task %d: state %q, want %q with its reason %q", ts.Task, state, want[i].state, ts.Reason)
		}
		wantJoins := "local " + strconv.FormatInt(ts.Joins.Local, 10) + " · remote " + strconv.FormatInt(ts.Joins.Remote, 10) +
			" · miss " + strconv.FormatInt(ts.Joins.Miss, 10) + " · late " + strconv.FormatInt(ts.Joins.Late, 10)
		if got := cell(t, row, "joins"); got != wantJoins {
			t.Errorf("task %d: joins %q, want %q", ts.Task, got, wantJoins)
		}
		if got := cell(t, row, "dead"); got != strconv.FormatInt(ts.DeadLetters, 10) {
			t.Errorf("task %d: dead letters %q, want %d", ts.Task, got, ts.DeadLetters)
		}
	}

	// The running task: lags, last error (escaped text, not markup) and
	// a sparkline of its five samples.
	r0 := rows["0"]
	if got := cell(t, r0, "lag"); got != "market: 3 notifications: 17" {
		t.Errorf("task 0 lag %q", got)
	}
	if got := cell(t, r0, "last-error"); !strings.Contains(got, "fetching market-0: "+evil) || !strings.Contains(got, "2026-12-01 12:00:00.000Z") {
		t.Errorf("task 0 last error %q", got)
	}
	lines := findAll(r0, func(n *html.Node) bool { return n.Data == "polyline" })
	if len(lines) != 2 {
		t.Fatalf("task 0 has %d sparklines, want 2 (lag and rate)", len(lines))
	}
	if pts := strings.Fields(attr(lines[0], "points")); len(pts) != 5 || pts[0] != "0.0,23.0" || pts[4] != "120.0,1.0" {
		t.Errorf("task 0's lag sparkline points %q, want 5 from (0,23) to (120,1)", pts)
	}
	if got := textOf(byClass(r0, "chart")[0]); got != "lag 40 (max 40)" {
		t.Errorf("task 0's lag chart says %q", got)
	}
	// Unknown lags are a dash; no history says so.
	if got := cell(t, rows["2"], "lag"); got != "market: — notifications: —" {
		t.Errorf("task 2 lag %q", got)
	}
	if got := textOf(byClass(rows["2"], "chart")[0]); got != "lag collecting…" {
		t.Errorf("task 2's chart says %q", got)
	}
	// Restore progress.
	prog := findAll(rows["1"], func(n *html.Node) bool { return n.Data == "progress" })
	if len(prog) != 1 || attr(prog[0], "max") != "2000" || attr(prog[0], "value") != "500" {
		t.Errorf("task 1's progress bar: %v", prog)
	}
	if got := cell(t, rows["1"], "restore"); got != "500 of 2000 records · 250/s · ETA 6s" {
		t.Errorf("task 1's restore %q", got)
	}
	if got := cell(t, rows["5"], "restore"); got != "10 of 90 records · 0/s · ETA unknown" {
		t.Errorf("task 5's restore %q", got)
	}
	// The wait for the market, in words.
	if got := cell(t, rows["3"], "state"); !strings.Contains(got, "notification at 12:00:01.250 waits for market-3 to be read past it; market read to 12:00:01.100") {
		t.Errorf("task 3's state %q does not say what it waits for", got)
	}
	// Nothing of the values became markup.
	if n := len(findAll(doc, func(n *html.Node) bool { return n.Data == "script" })); n != 0 {
		t.Errorf("%d script elements on a page without the layout check", n)
	}

	// This worker.
	facts := textOf(findAll(doc, func(n *html.Node) bool { return attr(n, "id") == "worker" })[0])
	for _, w := range []string{"w1", "v1.2.3 · commit abc123", "1h0m0s", "generation 7", "w1-xyz", "leader yes",
		"processing guarantee at-least-once", "joins since start local 1000 · remote 20 · miss 3 · late 2", "/var/lib/joiner · 1.0 GiB free", "/mnt/bad · free bytes unknown: no such dir"} {
		if !strings.Contains(facts, w) {
			t.Errorf("this worker's facts %q lack %q", facts, w)
		}
	}
	if got := textOf(findAll(doc, func(n *html.Node) bool { return attr(n, "id") == "ready" })[0]); got != "not ready: task 6 failed" {
		t.Errorf("readiness %q", got)
	}

	// The grid: one row per task, one column per member.
	grid := findAll(doc, func(n *html.Node) bool { return n.Data == "table" && hasClass(n, "grid") })[0]
	members := byClass(grid, "member")
	if len(members) != 2 || attr(members[0], "data-instance") != "w1" || !strings.Contains(textOf(members[1]), "refused") {
		t.Errorf("grid members: %d, second %q", len(members), textOf(members[1]))
	}
	var cells []string
	for _, c := range byClass(grid, "cell") {
		cells = append(cells, textOf(c))
	}
	if want := []string{"active", "standby", "warm-up", "·"}; !slices.Equal(cells, want) {
		t.Errorf("grid cells %q, want %q", cells, want)
	}

	// The rebalances.
	rb := findAll(doc, func(n *html.Node) bool { return n.Data == "tr" && hasClass(n, "rebalance") })
	if len(rb) != 1 {
		t.Fatalf("%d rebalance rows", len(rb))
	}
	if got := textOf(rb[0]); got != "2026-12-01 12:00:00.000Z 7 (planned here) members now owning tasks: w2 1: w1 → w2, 3: w1 → nobody −1,3" {
		t.Errorf("rebalance row %q", got)
	}
}

// TestPageLayoutCheckOnlyOnRequest: the script that measures the page is
// there only under ?check=layout, with the CSP's nonce.
func TestPageLayoutCheckOnlyOnRequest(t *testing.T) {
	doc := parse(t, fixedStatus(), pageOptions{LayoutCheck: true, Nonce: "n0nce"})
	scripts := findAll(doc, func(n *html.Node) bool { return n.Data == "script" })
	if len(scripts) != 1 || attr(scripts[0], "nonce") != "n0nce" {
		t.Fatalf("scripts %v, want one with the nonce", scripts)
	}
}

// fakeSource is a Source with a fixed status.
type fakeSource struct{ s join.Status }

func (f fakeSource) Status() join.Status { return f.s }
func (f fakeSource) View() join.AssignmentView {
	return join.AssignmentView{Instance: "w1", Tasks: []int{0}, StateTasks: []int{0}, StandbyTasks: []int{1}, WarmupTasks: []int{}, FailedTasks: []int{},
		Stats: join.Stats{Local: 9, Remote: 1}}
}

// TestHandlerServesPageAndJSON: / is the page of the same status that
// /v1/status returns, with a CSP that allows no script, and the grid is
// built from the peers' /v1/assignment.
func TestHandlerServesPageAndJSON(t *testing.T) {
	peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/assignment" {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(join.AssignmentView{Instance: "w2", Generation: 3, Ready: true, Tasks: []int{1}, StateTasks: []int{1}, StandbyTasks: []int{0}, WarmupTasks: []int{0}})
	}))
	defer peer.Close()
	src := fakeSource{join.Status{Generation: 3, Partitions: 2, Guarantee: join.Guarantee,
		Owners: []group.Owner{{InstanceID: "w1", Addr: "self:1"}, {InstanceID: "w2", Addr: strings.TrimPrefix(peer.URL, "http://")}},
		Tasks:  []join.TaskStatus{{Task: 0, Role: join.RoleActive, State: join.StateRunning, Joins: join.JoinCounts{Local: 5}, MarketLag: -1, NotificationLag: 2}}}}
	srv := New(Options{Source: src, Instance: "w1", Addr: "self:1", Group: "g"})
	h := srv.Handler()

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/status", nil))
	var st Status
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		t.Fatalf("/v1/status: %v: %s", err, rec.Body)
	}
	if len(st.Tasks) != 1 || st.Tasks[0].Joins.Local != 5 || st.Worker.Guarantee != "at-least-once" || st.Worker.Group != "g" ||
		st.Worker.Joins != (join.JoinCounts{Local: 9, Remote: 1}) {
		t.Errorf("/v1/status: %+v", st)
	}
	wantGrid := []GroupTask{{Task: 0, Owner: "w1", Roles: []string{"active", "warmup"}}, {Task: 1, Owner: "w2", Roles: []string{"standby", "active"}}}
	if len(st.Group.Tasks) != 2 || !slices.Equal(st.Group.Tasks[0].Roles, wantGrid[0].Roles) || !slices.Equal(st.Group.Tasks[1].Roles, wantGrid[1].Roles) ||
		st.Group.Members[1].Generation != 3 || !st.Group.Members[1].Ready {
		t.Errorf("group %+v, want tasks %+v", st.Group, wantGrid)
	}

	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("GET / = %d %s", rec.Code, rec.Header().Get("Content-Type"))
	}
	if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("CSP %q", csp)
	}
	doc, err := html.Parse(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	rows := findAll(doc, func(n *html.Node) bool { return n.Data == "tr" && hasClass(n, "task") })
	if len(rows) != 1 || cell(t, rows[0], "joins") != "local 5 · remote 0 · miss 0 · late 0" {
		t.Errorf("the page's task rows: %d", len(rows))
	}
	metas := findAll(doc, func(n *html.Node) bool { return n.Data == "meta" && attr(n, "http-equiv") == "refresh" })
	if len(metas) != 1 || attr(metas[0], "content") != "5" {
		t.Errorf("the page does not refresh itself every 5 s: %v", metas)
	}
}

// TestHistoryRatesAndWindow: the ring keeps the last window of samples,
// oldest first, with each sample's join rate since the one before.
func TestHistoryRatesAndWindow(t *testing.T) {
	h := newHistory(6)
	start := time.Now().Add(-time.Minute)
	var joins int64
	for i := range 9 {
		joins += int64(10 * i) // 10·i joins in each 10 s
		h.record(start.Add(time.Duration(i)*10*time.Second), []join.TaskStatus{{Task: 4, NotificationLag: int64(i), Joins: join.JoinCounts{Local: joins}}})
	}
	got := h.series(4)
	if len(got) != 6 {
		t.Fatalf("%d samples, want the last 6", len(got))
	}
	for k, s := range got {
		i := k + 3
		if s.NotificationLag != int64(i) || s.JoinsPerSecond != float64(i) {
			t.Errorf("sample %d: lag %d rate %v, want %d and %d/s", k, s.NotificationLag, s.JoinsPerSecond, i, i)
		}
	}
	// A task that restarted here counts from zero again.
	h.record(start.Add(90*time.Second), []join.TaskStatus{{Task: 4, Joins: join.JoinCounts{Local: 20}}})
	if s := h.series(4); s[len(s)-1].JoinsPerSecond != 2 {
		t.Errorf("after a restart the rate is %v, want 2/s", s[len(s)-1].JoinsPerSecond)
	}
	if first := h.series(4); len(first) == 0 {
		t.Fatal("no samples")
	}
	h2 := newHistory(6)
	h2.record(start, []join.TaskStatus{{Task: 1, Joins: join.JoinCounts{Local: 500}}})
	if s := h2.series(1); len(s) != 1 || s[0].JoinsPerSecond != -1 {
		t.Errorf("a task's first sample has rate %v, want -1 (unknown)", s)
	}
	if len(h.series(5)) != 0 {
		t.Error("a task never sampled has samples")
	}
}
