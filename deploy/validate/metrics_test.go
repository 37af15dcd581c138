package validate

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// exported are the joiner_* metric families every worker exports
// (join.NewMetrics), with their types. Rules and dashboards use only these.
var exported = map[string]string{
	"joiner_joins_total":           "counter",
	"joiner_tasks":                 "gauge",
	"joiner_rebalances_total":      "counter",
	"joiner_tasks_moved_total":     "counter",
	"joiner_restore_records_total": "counter",
	"joiner_restore_seconds":       "histogram",
	"joiner_task_lag_records":      "gauge",
	"joiner_dead_letters_total":    "counter",
	"joiner_alerts_total":          "counter",
	"joiner_records_total":         "counter",
	"joiner_store_rebuilds_total":  "counter",
	"joiner_remote_lookup_seconds": "histogram",
	// node: requests refused for a missing or wrong peer token.
	"joiner_http_unauthorized_total": "counter",
	// node: the market topic's retention check at start (docs/kafka.md).
	"joiner_market_retention_unsafe": "gauge",

	"joiner_group_partitions":          "gauge",
	"joiner_group_excluded":            "gauge",
	"joiner_group_plan_errors":         "gauge",
	"joiner_group_unpaired_partitions": "gauge",
	"joiner_store_corrupt_dirs":        "gauge",
	"joiner_store_opens_stuck":         "gauge",
	"joiner_offset_resets_total":       "counter",

	// Rebalances and standbys (issue 9).
	"joiner_rebalance_pause_seconds":        "histogram",
	"joiner_rebalance_tasks_revoked_total":  "counter",
	"joiner_rebalance_tasks_assigned_total": "counter",
	"joiner_standby_lag_records":            "gauge",

	// Misrouted notifications and stalled tasks (issue 19).
	"joiner_notifications_misrouted_total": "counter",
	"joiner_task_stalled":                  "gauge",
	"joiner_partition_changes_total":       "counter",
	"joiner_market_partitions_ahead":       "gauge",

	// node: which binary runs, and the retries to reach Kafka at start
	// (both exported from the first second, while the worker waits).
	"joiner_build_info":            "gauge",
	"joiner_startup_retries_total": "counter",

	// Records the output topics cannot take (issue 19).
	"joiner_dead_letters_truncated_total": "counter",
	"joiner_dead_letters_dropped_total":   "counter",
	"joiner_output_blocked":               "gauge",
	// The user's own records (issue 23).
	"joiner_alert_field_conflicts_total": "counter",
	"joiner_ticks_late_total":            "counter",
	// Exactly-once processing (issue 21), exported at 0 under
	// at-least-once.
	"joiner_transactions_total":       "counter",
	"joiner_transaction_seconds":      "histogram",
	"joiner_producer_fenced_total":    "counter",
	"joiner_transaction_open_records": "gauge",
}

var (
	rulesFile     = filepath.Join(repoRoot, "deploy", "prometheus", "joiner.rules.yml")
	dashboardFile = filepath.Join(repoRoot, "deploy", "grafana", "dashboards", "joiner.json")
	metricName    = regexp.MustCompile(`\bjoiner_[a-z0-9_]*[a-z0-9]`)
)

// family maps a series name to its metric family: a histogram's _bucket,
// _sum and _count series belong to the histogram.
func family(name string) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if ok && exported[base] == "histogram" {
			return base
		}
	}
	return name
}

// usedFamilies returns every joiner_* family named in the given text, with
// where it was seen.
func usedFamilies(t *testing.T, where, text string, into map[string][]string) {
	t.Helper()
	for _, n := range metricName.FindAllString(text, -1) {
		f := family(n)
		if !slices.Contains(into[f], where) {
			into[f] = append(into[f], where)
		}
	}
}

// dashboardExprs returns the PromQL of every panel target and templating
// query of the dashboard.
func dashboardExprs(t *testing.T) (exprs []string, titles []string) {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		SchemaVersion int `json:"schemaVersion"`
		UID           string
		Panels        []struct {
			Type       string
			Title      string
			Datasource *struct{ Type, UID string }
			GridPos    *struct{ H, W, X, Y int } `json:"gridPos"`
			Targets    []struct {
				Expr       string
				Datasource *struct{ Type, UID string }
			}
		}
		Templating struct {
			List []struct {
				Name, Type string
				Query      any
			}
		}
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.SchemaVersion < 36 || d.UID == "" {
		t.Errorf("dashboard: schemaVersion %d, uid %q", d.SchemaVersion, d.UID)
	}
	hasDS := slices.ContainsFunc(d.Templating.List, func(v struct {
		Name, Type string
		Query      any
	}) bool {
		return v.Type == "datasource" && v.Name == "datasource" && v.Query == "prometheus"
	})
	if !hasDS {
		t.Errorf("dashboard: needs a datasource variable named datasource of type prometheus")
	}
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(map[string]any); ok {
			if s, ok := q["query"].(string); ok {
				exprs = append(exprs, s)
			}
		}
	}
	for _, p := range d.Panels {
		if p.GridPos == nil {
			t.Errorf("panel %q: no gridPos", p.Title)
		}
		if p.Type == "row" {
			continue
		}
		titles = append(titles, p.Title)
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource must be ${datasource}", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q: no targets", p.Title)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q: empty expr", p.Title)
			}
			exprs = append(exprs, tg.Expr)
		}
	}
	return exprs, titles
}

func TestDashboardPanels(t *testing.T) {
	exprs, titles := dashboardExprs(t)
	for _, want := range []string{"Join locality ratio", "Joins/s by result", "Tasks per member",
		"Rebalances and moves", "Restore time", "Lag (notifications not yet processed)"} {
		if !slices.Contains(titles, want) {
			t.Errorf("dashboard lacks panel %q (have %q)", want, titles)
		}
	}
	all := strings.Join(exprs, "\n")
	for _, want := range []string{"histogram_quantile", "joiner_restore_seconds_bucket", `result="local"`} {
		if !strings.Contains(all, want) {
			t.Errorf("dashboard queries never use %s", want)
		}
	}
}

// TestOnlyExportedMetrics: every joiner_* metric in the rules and the
// dashboard is one the worker exports.
func TestOnlyExportedMetrics(t *testing.T) {
	used := map[string][]string{}
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	usedFamilies(t, "rules", string(rules), used)
	exprs, _ := dashboardExprs(t)
	usedFamilies(t, "dashboard", strings.Join(exprs, "\n"), used)
	if len(used) == 0 {
		t.Fatal("no joiner_* metric found in the rules or the dashboard")
	}
	for name, where := range used {
		if _, ok := exported[name]; !ok {
			t.Errorf("%s (used in %v) is not a metric the worker exports", name, where)
		}
	}
	// A histogram must be queried through its series, not by its bare name.
	for _, n := range metricName.FindAllString(strings.Join(exprs, "\n")+string(rules), -1) {
		if exported[n] == "histogram" {
			t.Errorf("%s is a histogram: query %s_bucket, _sum or _count", n, n)
		}
	}
}

// scrape returns the metric families (with their types) of a /metrics page.
func scrape(ctx context.Context, url string) (map[string]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(res.Body, 512))
		return nil, fmt.Errorf("GET %s: %s: %s", url, res.Status, body)
	}
	families := map[string]string{}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			f := strings.Fields(rest)
			if len(f) == 2 {
				families[f[0]] = f[1]
			}
		}
	}
	return families, sc.Err()
}

// conditional are exported families that have no series, so no TYPE line,
// on a worker without the feature they describe.
var conditional = map[string]string{
	"joiner_standby_lag_records": "a worker without standby tasks (--standby-replicas 0)",
}

// missingFrom lists the exported families absent from a scrape or of the
// wrong type.
func missingFrom(families map[string]string) []string {
	var missing []string
	for name, typ := range exported {
		got, ok := families[name]
		switch {
		case !ok && conditional[name] != "":
		case !ok:
			missing = append(missing, name)
		case got != typ:
			missing = append(missing, fmt.Sprintf("%s (type %s, want %s)", name, got, typ))
		}
	}
	slices.Sort(missing)
	return missing
}

// TestWorkerExportsMetrics checks the worker's real /metrics. With
// JOINER_METRICS_URL it scrapes that URL; with JOINER_KAFKA_BROKERS it builds
// joiner (scripts/build), runs one worker on fresh topics against that
// broker, produces a few records and scrapes it. Otherwise it is skipped.
func TestWorkerExportsMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if url := os.Getenv("JOINER_METRICS_URL"); url != "" {
		families, err := scrape(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		if m := missingFrom(families); len(m) > 0 {
			t.Fatalf("%s lacks %v", url, m)
		}
		return
	}
	brokers := os.Getenv("JOINER_KAFKA_BROKERS")
	if brokers == "" {
		t.Skip("set JOINER_KAFKA_BROKERS (scripts/kafka start) or JOINER_METRICS_URL to check a running worker's /metrics")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "joiner")
	build := exec.CommandContext(ctx, filepath.Join(repoRoot, "scripts", "build"), bin)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("scripts/build: %v\n%s", err, out)
	}

	addr := freeAddr(t)
	suffix := fmt.Sprintf("metrics-check-%d", time.Now().UnixNano())
	topics := map[string]string{
		"market": "market-" + suffix, "notifications": "notifications-" + suffix,
		"alerts": "alerts-" + suffix, "dead": "dead-" + suffix,
	}
	logPath := filepath.Join(dir, "worker.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	worker := exec.Command(bin, "run",
		"--brokers", brokers, "--group", suffix, "--instance-id", "metrics-check",
		"--market-topic", topics["market"], "--notifications-topic", topics["notifications"],
		"--alerts-topic", topics["alerts"], "--dead-letter-topic", topics["dead"],
		"--state-dir", filepath.Join(dir, "state"), "--http-addr", addr, "--advertise-addr", addr,
		"--create-topics", "--partitions", "2")
	worker.Stdout, worker.Stderr = logFile, logFile
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- worker.Wait() }()
	defer func() {
		_ = worker.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(45 * time.Second):
			_ = worker.Process.Kill()
			<-exited
		}
		if t.Failed() {
			log, _ := os.ReadFile(logPath)
			t.Logf("worker log:\n%s", tail(string(log), 60))
		}
	}()

	// Records for both topics (and one malformed notification), so that the
	// per-topic and per-task series exist.
	produced := false
	url := "http://" + addr + "/metrics"
	var missing []string
	for ctx.Err() == nil {
		select {
		case err := <-exited:
			t.Fatalf("worker exited before exporting every metric: %v", err)
		case <-time.After(500 * time.Millisecond):
		}
		if !produced {
			produced = produce(ctx, t, brokers, topics["market"], topics["notifications"]) == nil
		}
		families, err := scrape(ctx, url)
		if err != nil {
			continue
		}
		if missing = missingFrom(families); len(missing) == 0 && produced {
			return
		}
	}
	t.Fatalf("worker /metrics still lacks %v (produced records: %v)", missing, produced)
}

func produce(ctx context.Context, t *testing.T, brokers, market, notifications string) error {
	w := &kafka.Writer{
		Addr: kafka.TCP(strings.Split(brokers, ",")...), Balancer: &kafka.Murmur2Balancer{},
		RequiredAcks: kafka.RequireAll, BatchTimeout: 10 * time.Millisecond,
	}
	defer w.Close()
	now := time.Now()
	msgs := []kafka.Message{
		{Topic: market, Key: []byte("AAA"), Value: []byte(`{"symbol":"AAA","price":10.5}`), Time: now},
		{Topic: market, Key: []byte("BBB"), Value: []byte(`{"symbol":"BBB","price":20}`), Time: now},
		{Topic: notifications, Key: []byte("AAA"), Value: []byte(`{"id":"n-1","symbol":"AAA","text":"check"}`), Time: now.Add(time.Millisecond)},
		{Topic: notifications, Key: []byte("BBB"), Value: []byte(`{"id":"n-2","symbol":"BBB"}`), Time: now.Add(time.Millisecond)},
		{Topic: notifications, Key: []byte("CCC"), Value: []byte(`not json`), Time: now.Add(time.Millisecond)},
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := w.WriteMessages(wctx, msgs...)
	if err != nil {
		t.Logf("produce (will retry; topics may not exist yet): %v", err)
	}
	return err
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
