package integration

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/copartition"
	"github.com/joiner-dev/joiner/join"
	"github.com/joiner-dev/joiner/loadgen"
	"github.com/joiner-dev/joiner/murmur2"
	"github.com/joiner-dev/joiner/record"
	"github.com/joiner-dev/joiner/statestore"
	"github.com/joiner-dev/joiner/testsupport/testkit"
	"github.com/segmentio/kafka-go"
)

// brokersEnv enables the suite.
const brokersEnv = "JOINER_KAFKA_BROKERS"

const howToRun = "real-broker integration suite: set " + brokersEnv + " to run it, e.g. " +
	"scripts/kafka start && " + brokersEnv + "=127.0.0.1:9092 go test -race -count=1 ./integration/"

var (
	// brokers is the bootstrap list from JOINER_KAFKA_BROKERS; empty skips.
	brokers []string
	// joinerBin is the joiner binary TestMain built with scripts/build.
	joinerBin string
)

func TestMain(m *testing.M) { os.Exit(mainRun(m)) }

func mainRun(m *testing.M) int {
	for _, b := range strings.Split(os.Getenv(brokersEnv), ",") {
		if b = strings.TrimSpace(b); b != "" {
			brokers = append(brokers, b)
		}
	}
	secure = loadSecureEnv()
	if len(brokers) == 0 && secure == nil {
		return m.Run() // every test skips
	}
	dir, err := os.MkdirTemp("", "joiner-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	joinerBin = filepath.Join(dir, "joiner")
	build := exec.Command(filepath.Join("..", "scripts", "build"), joinerBin)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	began := time.Now()
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "integration: scripts/build failed:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "integration: built %s in %s; brokers %v\n", joinerBin, time.Since(began).Round(time.Millisecond), brokers)
	return m.Run()
}

// requireKafka skips the test unless the suite is enabled.
func requireKafka(t *testing.T) {
	t.Helper()
	if len(brokers) == 0 {
		t.Skip(howToRun)
	}
}

// Worker flags shared by every test: the broker's usual minimum session
// timeout, fast heartbeats and commits.
var workerFlags = []string{
	"--session-timeout", "6s",
	"--heartbeat-interval", "500ms",
	"--commit-interval", "500ms",
	"--rebalance-timeout", "20s",
	"--cache-bytes", strconv.Itoa(16 << 20),
	"--log-format", "json",
}

// cluster is one test's world: its own topics, group, state dirs, worker
// processes and alert reader.
type cluster struct {
	t          *testing.T
	name       string
	group      string
	partitions int
	market     string
	notifs     string
	alertsT    string
	deadT      string
	dir        string
	client     *kafka.Client

	mu      sync.Mutex
	workers map[string]*worker // latest process per instance id
	logs    []string           // every log file, in start order
	starts  map[string]int

	alerts *alertReader
	writer *kafka.Writer
	// net is how the cluster's clients and workers reach the broker:
	// plaintext on brokers, or the secure suite's settings.
	net *clusterNet
	// flags are added to every `joiner run` of this cluster.
	flags []string
}

// clusterNet is the connection settings of a cluster.
type clusterNet struct {
	brokers   []string
	transport *kafka.Transport // nil: kafka-go's default
	runFlags  []string         // added to `joiner run`
	http      *http.Client     // for the workers' HTTP API
	scheme    string           // http or https
	token     string           // peer token sent to the workers; "" for none
}

var unsafeChars = regexp.MustCompile(`[^a-zA-Z0-9-]+`)

// newCluster creates the test's four topics with partitions partitions
// each, starts reading the alerts topic and registers the cleanup: stop
// every worker, print their log tails on failure, delete the topics.
func newCluster(t *testing.T, partitions int) *cluster {
	t.Helper()
	requireKafka(t)
	return newClusterOn(t, partitions, &clusterNet{brokers: brokers, http: httpClient, scheme: "http"})
}

// newClusterOn is newCluster on the given connection settings.
func newClusterOn(t *testing.T, partitions int, cn *clusterNet) *cluster {
	t.Helper()
	return newClusterConfigured(t, partitions, cn, nil)
}

// newClusterConfigured is newClusterOn creating the topics with configs,
// by the kind of topic: "market", "notifications", "alerts" or
// "dead-letters".
func newClusterConfigured(t *testing.T, partitions int, cn *clusterNet, configs map[string][]kafka.ConfigEntry) *cluster {
	t.Helper()
	brokers := cn.brokers
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	name := strings.ToLower(strings.Trim(unsafeChars.ReplaceAllString(t.Name(), "-"), "-")) + "-" + hex.EncodeToString(suffix)
	c := &cluster{
		t:          t,
		name:       name,
		group:      "joiner-" + name,
		partitions: partitions,
		market:     "market-" + name,
		notifs:     "notifications-" + name,
		alertsT:    "alerts-" + name,
		deadT:      "dead-letters-" + name,
		dir:        t.TempDir(),
		client:     &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 20 * time.Second},
		workers:    map[string]*worker{},
		starts:     map[string]int{},
		net:        cn,
	}
	if cn.transport != nil {
		c.client.Transport = cn.transport
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topics := c.topics()
	var cfgs []kafka.TopicConfig
	for _, tp := range topics {
		kind := strings.TrimSuffix(tp, "-"+name)
		cfgs = append(cfgs, kafka.TopicConfig{Topic: tp, NumPartitions: partitions, ReplicationFactor: replicationFactor(), ConfigEntries: configs[kind]})
	}
	res, err := c.client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: cfgs})
	if err != nil {
		t.Fatalf("creating topics %v on %v: %v", topics, brokers, err)
	}
	for tp, err := range res.Errors {
		if err != nil {
			t.Fatalf("creating topic %s: %v", tp, err)
		}
	}
	t.Cleanup(func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer dcancel()
		if _, err := c.client.DeleteTopics(dctx, &kafka.DeleteTopicsRequest{Topics: topics}); err != nil {
			t.Logf("deleting topics %v: %v", topics, err)
		}
	})
	c.waitTopics(ctx)
	c.writer = loadgen.NewWriter(brokers)
	if cn.transport != nil {
		c.writer.Transport = cn.transport
	}
	t.Cleanup(func() { _ = c.writer.Close() })

	rctx, stopReader := context.WithCancel(context.Background())
	c.alerts = newAlertReader(c.client, c.alertsT, partitions)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		c.alerts.run(rctx)
	}()
	t.Cleanup(func() {
		stopReader()
		<-readerDone
	})
	// Registered last, so it runs first: stop the workers before the
	// reader and the topics go away.
	t.Cleanup(c.cleanup)
	t.Logf("cluster %s: %d partitions, group %s, state under %s", name, partitions, c.group, c.dir)
	return c
}

func (c *cluster) topics() []string { return []string{c.market, c.notifs, c.alertsT, c.deadT} }

// waitTopics waits until metadata lists every topic with all its
// partitions led.
func (c *cluster) waitTopics(ctx context.Context) {
	c.t.Helper()
	// Every broker is asked: with three, one that has not applied the
	// new topics' metadata yet answered a starting worker "the topic does
	// not exist", and the worker rightly stopped.
	for _, addr := range c.net.brokers {
		bc := &kafka.Client{Addr: kafka.TCP(addr), Transport: c.client.Transport, Timeout: c.client.Timeout}
		for {
			ok, err := c.topicsReady(ctx, bc)
			if ok {
				break
			}
			if ctx.Err() != nil {
				c.t.Fatalf("topics %v not ready on broker %s: %v", c.topics(), addr, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// topicsReady reports whether the broker bc asks knows every topic of c
// with all its partitions led.
func (c *cluster) topicsReady(ctx context.Context, bc *kafka.Client) (bool, error) {
	res, err := bc.Metadata(ctx, &kafka.MetadataRequest{Topics: c.topics()})
	if err != nil {
		return false, err
	}
	if len(res.Topics) != 4 {
		return false, nil
	}
	for _, tp := range res.Topics {
		if tp.Error != nil || len(tp.Partitions) != c.partitions {
			return false, tp.Error
		}
		for _, p := range tp.Partitions {
			if p.Error != nil || p.Leader.ID < 0 {
				return false, p.Error
			}
		}
	}
	return true, nil
}

func (c *cluster) cleanup() {
	c.mu.Lock()
	ws := slices.Collect(maps.Values(c.workers))
	logs := slices.Clone(c.logs)
	c.mu.Unlock()
	for _, w := range ws {
		if w.running() {
			_ = w.signal(syscall.SIGTERM)
		}
	}
	for _, w := range ws {
		if !w.wait(30 * time.Second) {
			c.t.Logf("worker %s did not stop within 30s of SIGTERM; killing it", w.id)
			_ = w.cmd.Process.Kill()
			w.wait(10 * time.Second)
		}
	}
	if c.t.Failed() {
		for _, l := range logs {
			c.t.Logf("--- tail of %s ---\n%s", l, tail(l, 40))
		}
	}
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// worker is one `joiner run` process.
type worker struct {
	id       string
	stateDir string
	addr     string
	logPath  string
	cmd      *exec.Cmd
	done     chan struct{}
	err      error // the exit status, once done is closed
	net      *clusterNet
}

func (w *worker) running() bool {
	select {
	case <-w.done:
		return false
	default:
		return true
	}
}

func (w *worker) signal(s os.Signal) error { return w.cmd.Process.Signal(s) }

// wait waits up to d for the process to exit and reports whether it did.
func (w *worker) wait(d time.Duration) bool {
	select {
	case <-w.done:
		return true
	case <-time.After(d):
		return false
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// stateDir is the state dir of instance id; the same across restarts.
func (c *cluster) stateDir(id string) string { return filepath.Join(c.dir, "state-"+id) }

// start runs `joiner run` as instance id, with its state dir and a log file
// of its own. It does not wait for the worker to join.
func (c *cluster) start(id string) *worker {
	c.t.Helper()
	c.mu.Lock()
	c.starts[id]++
	n := c.starts[id]
	c.mu.Unlock()
	w := &worker{
		id:       id,
		stateDir: c.stateDir(id),
		addr:     net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(c.t))),
		logPath:  filepath.Join(c.dir, fmt.Sprintf("%s.%d.log", id, n)),
		done:     make(chan struct{}),
		net:      c.net,
	}
	if err := os.MkdirAll(w.stateDir, 0o755); err != nil {
		c.t.Fatal(err)
	}
	logf, err := os.Create(w.logPath)
	if err != nil {
		c.t.Fatal(err)
	}
	args := append([]string{"run",
		"--brokers", strings.Join(c.net.brokers, ","),
		"--group", c.group,
		"--instance-id", id,
		"--market-topic", c.market,
		"--notifications-topic", c.notifs,
		"--alerts-topic", c.alertsT,
		"--dead-letter-topic", c.deadT,
		"--state-dir", w.stateDir,
		"--http-addr", w.addr,
	}, workerFlags...)
	args = append(args, c.net.runFlags...)
	args = append(args, c.flags...)
	w.cmd = exec.Command(joinerBin, args...)
	w.cmd.Stdout, w.cmd.Stderr = logf, logf
	if err := w.cmd.Start(); err != nil {
		logf.Close()
		c.t.Fatalf("starting worker %s: %v", id, err)
	}
	go func() {
		w.err = w.cmd.Wait()
		logf.Close()
		close(w.done)
	}()
	c.mu.Lock()
	c.workers[id] = w
	c.logs = append(c.logs, w.logPath)
	c.mu.Unlock()
	c.t.Logf("started worker %s (pid %d, http %s, log %s)", id, w.cmd.Process.Pid, w.addr, w.logPath)
	return w
}

// stop sends SIGTERM and waits for a clean exit (status 0).
func (c *cluster) stop(w *worker) {
	c.t.Helper()
	c.stopAll([]*worker{w})
}

// kill9 kills the process with SIGKILL and reaps it.
func (c *cluster) kill9(w *worker) {
	c.t.Helper()
	if err := w.cmd.Process.Kill(); err != nil {
		c.t.Fatalf("kill -9 worker %s: %v", w.id, err)
	}
	if !w.wait(10 * time.Second) {
		c.t.Fatalf("worker %s still running 10s after SIGKILL", w.id)
	}
}

var httpClient = &http.Client{Timeout: 3 * time.Second}

// view reads the worker's /v1/assignment.
func (w *worker) view() (join.AssignmentView, error) {
	var v join.AssignmentView
	req, err := http.NewRequest(http.MethodGet, w.net.scheme+"://"+w.addr+"/v1/assignment", nil)
	if err != nil {
		return v, err
	}
	if w.net.token != "" {
		req.Header.Set("Authorization", "Bearer "+w.net.token)
	}
	res, err := w.net.http.Do(req)
	if err != nil {
		return v, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return v, fmt.Errorf("GET /v1/assignment of %s: %s", w.id, res.Status)
	}
	err = json.NewDecoder(res.Body).Decode(&v)
	return v, err
}

// stable is a generation every running worker agrees on.
type stable struct {
	gen   int32
	at    time.Time
	views map[string]join.AssignmentView
}

// tasks returns the tasks of every member of the generation.
func (s stable) tasks() map[string][]int {
	out := map[string][]int{}
	for id, v := range s.views {
		out[id] = slices.Clone(v.Tasks)
	}
	return out
}

// owners returns the owner of each task.
func (s stable) owners(p int) []string {
	out := make([]string, p)
	for id, v := range s.views {
		for _, t := range v.Tasks {
			out[t] = id
		}
	}
	return out
}

func (s stable) members() []string {
	return slices.Sorted(maps.Keys(s.views))
}

// sum adds a counter over the members.
func (s stable) sum(f func(join.AssignmentView) int64) int64 {
	var n int64
	for _, v := range s.views {
		n += f(v)
	}
	return n
}

// waitStable polls /v1/assignment of ws until all report the same
// generation > after, are ready, and their tasks partition 0..P-1 exactly
// (the state tasks equal to the tasks and the owner map agreeing).
func (c *cluster) waitStable(ws []*worker, after int32, timeout time.Duration) stable {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	var why string
	for {
		s, reason := c.checkStable(ws, after)
		if reason == "" {
			return s
		}
		why = reason
		if time.Now().After(deadline) {
			c.t.Fatalf("workers %v not stable after generation %d within %s: %s", ids(ws), after, timeout, why)
		}
		for _, w := range ws {
			if !w.running() {
				c.t.Fatalf("worker %s exited (%v) while waiting for a stable generation; log tail:\n%s", w.id, w.err, tail(w.logPath, 30))
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *cluster) checkStable(ws []*worker, after int32) (stable, string) {
	s := stable{views: map[string]join.AssignmentView{}}
	for _, w := range ws {
		v, err := w.view()
		if err != nil {
			return s, err.Error()
		}
		s.views[w.id] = v
	}
	s.at = time.Now()
	owner := make([]string, c.partitions)
	for i, w := range ws {
		v := s.views[w.id]
		switch {
		case i == 0:
			s.gen = v.Generation
		case v.Generation != s.gen:
			return s, fmt.Sprintf("generations differ: %s at %d, %s at %d", ws[0].id, s.gen, w.id, v.Generation)
		}
		if v.Generation <= after {
			return s, fmt.Sprintf("%s still at generation %d", w.id, v.Generation)
		}
		if !v.Ready {
			return s, fmt.Sprintf("%s not ready", w.id)
		}
		if !slices.Equal(v.Tasks, v.StateTasks) {
			return s, fmt.Sprintf("%s: tasks %v but state tasks %v", w.id, v.Tasks, v.StateTasks)
		}
		if v.Partitions != c.partitions || len(v.Owners) != c.partitions {
			return s, fmt.Sprintf("%s: %d partitions, %d owners", w.id, v.Partitions, len(v.Owners))
		}
		for _, p := range v.Tasks {
			if p < 0 || p >= c.partitions {
				return s, fmt.Sprintf("%s: task %d out of range", w.id, p)
			}
			if owner[p] != "" {
				return s, fmt.Sprintf("task %d held by %s and %s", p, owner[p], w.id)
			}
			owner[p] = w.id
		}
	}
	for p, o := range owner {
		if o == "" {
			return s, fmt.Sprintf("task %d unowned", p)
		}
		for _, w := range ws {
			if got := s.views[w.id].Owners[p]; got != o {
				return s, fmt.Sprintf("%s's owner map says task %d is %s's, it is %s's", w.id, p, got, o)
			}
		}
	}
	return s, ""
}

func ids(ws []*worker) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.id
	}
	return out
}

// checkMoved checks a membership change from prev to cur against the
// planner. When the broker took one generation for it, the generation's
// moved count and its assignment must be copartition.Assign's, and the
// members must have started exactly that many restores (unmoved tasks are
// not restored again). When it took several, the plans in between are not
// observable: the sum of the leaders' moved counts over them is compared
// with the restores started, and logged. It returns the planner's Moved.
func (c *cluster) checkMoved(step string, prev, cur stable) int {
	c.t.Helper()
	previous := prev.tasks()
	members := cur.members()
	plan, err := copartition.Assign(c.partitions, members, previous)
	if err != nil {
		c.t.Fatalf("%s: planner: %v", step, err)
	}
	var restores, movedTotal int64
	for id, v := range cur.views {
		pv := prev.views[id] // zero for a new process
		if pv.Instance == "" || v.Restores < pv.Restores {
			pv = join.AssignmentView{} // a new or restarted process: counters from 0
		}
		restores += v.Restores - pv.Restores
		movedTotal += v.MovedTotal - pv.MovedTotal
	}
	var moved int
	for _, v := range cur.views {
		moved = v.Moved
		break
	}
	if cur.gen == prev.gen+1 {
		c.t.Logf("%s: generation %d, members %v, moved %d (planner %d), restores started %d, assignment %v",
			step, cur.gen, members, moved, plan.Moved, restores, cur.tasks())
		if moved != plan.Moved {
			c.t.Errorf("%s: generation %d reports moved %d, the planner says %d for previous %v and members %v",
				step, cur.gen, moved, plan.Moved, previous, members)
		}
		if got := cur.tasks(); !maps.EqualFunc(got, plan.Assignment, slices.Equal) {
			c.t.Errorf("%s: generation %d assignment %v, the planner's is %v", step, cur.gen, got, plan.Assignment)
		}
		if restores != int64(plan.Moved) {
			c.t.Errorf("%s: %d restores started for %d moved tasks (an unmoved task restored again, or a moved one not)", step, restores, plan.Moved)
		}
		return plan.Moved
	}
	// Several generations. The departed workers cannot have led any of
	// them after they left; one that led an intermediate generation before
	// leaving would not be counted here, hence only a bound.
	c.t.Logf("%s: the broker took generations %d..%d for one step (members %v): moved summed over the leaders' plans %d, restores started %d, single-step planner moved %d, final moved %d",
		step, prev.gen+1, cur.gen, members, movedTotal, restores, plan.Moved, moved)
	if restores > movedTotal {
		c.t.Errorf("%s: %d restores started but the plans moved only %d tasks", step, restores, movedTotal)
	}
	return plan.Moved
}

// produce runs the load generator once on the test's topics.
func (c *cluster) produce(ctx context.Context, cfg loadgen.Config) loadgen.Summary {
	c.t.Helper()
	s, err := c.produceErr(ctx, cfg)
	if err != nil {
		c.t.Fatalf("loadgen: %v", err)
	}
	return s
}

func (c *cluster) produceErr(ctx context.Context, cfg loadgen.Config) (loadgen.Summary, error) {
	cfg.Writer = c.writer
	cfg.MarketTopic = c.market
	cfg.NotificationsTopic = c.notifs
	return loadgen.Run(ctx, cfg)
}

// load is a background producer: loadgen runs one after another, each
// with its own RunID and seed, until stopped.
type load struct {
	stop chan struct{}
	done chan struct{}

	mu   sync.Mutex
	runs []loadgen.Summary
	err  error
}

// completed is the number of runs finished so far.
func (l *load) completed() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.runs)
}

// startLoad produces runs of symbols × ticks × notifications at rate
// records/s, back to back, until the returned load is stopped.
func (c *cluster) startLoad(prefix string, symbols, ticks, notifications int, rate float64) *load {
	l := &load{stop: make(chan struct{}), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer close(l.done)
		defer cancel()
		for i := 0; ; i++ {
			select {
			case <-l.stop:
				return
			default:
			}
			s, err := c.produceErr(ctx, loadgen.Config{
				Symbols: symbols, TicksPerSymbol: ticks, NotificationsPerSymbol: notifications,
				Rate: rate, Seed: uint64(1000 + i), RunID: fmt.Sprintf("%s%d-", prefix, i),
			})
			l.mu.Lock()
			if err != nil {
				l.err = err
				l.mu.Unlock()
				return
			}
			l.runs = append(l.runs, s)
			l.mu.Unlock()
		}
	}()
	c.t.Cleanup(func() { l.finish() })
	return l
}

// end stops the producer after its current run and returns the runs; a
// producer error fails the test.
func (c *cluster) end(l *load) []loadgen.Summary {
	c.t.Helper()
	runs := l.finish()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		c.t.Fatalf("load: %v", l.err)
	}
	var recs int
	for _, r := range runs {
		recs += r.Records()
	}
	c.t.Logf("load stopped: %d runs, %d records", len(runs), recs)
	return runs
}

// finish stops the producer after its current run and returns the runs.
func (l *load) finish() []loadgen.Summary {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.runs)
}

// waitRuns waits until the producer has completed n runs.
func (c *cluster) waitRuns(l *load, n int, timeout time.Duration) {
	c.t.Helper()
	c.poll(fmt.Sprintf("%d load runs", n), timeout, func() (bool, string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.runs) >= n || l.err != nil, fmt.Sprintf("%d runs so far", len(l.runs))
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		c.t.Fatalf("load: %v", l.err)
	}
}

// merge returns the union of the runs' notification ids and the last price
// of each symbol over the runs, in run order.
func merge(runs ...loadgen.Summary) (ids []string, last map[string]float64) {
	last = map[string]float64{}
	for _, r := range runs {
		ids = append(ids, r.NotificationIDs...)
		maps.Copy(last, r.LastPrice)
	}
	return ids, last
}

// poll calls cond every 100ms until it is true or timeout passes, then
// fails the test with the last reason.
func (c *cluster) poll(what string, timeout time.Duration, cond func() (bool, string)) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("waiting for %s: not done within %s: %s", what, timeout, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitAlerts waits until every notification id has at least one alert and
// returns the duplicate count (alerts beyond the first per id).
func (c *cluster) waitAlerts(notificationIDs []string, timeout time.Duration) int {
	c.t.Helper()
	began := time.Now()
	c.poll(fmt.Sprintf("alerts of %d notifications", len(notificationIDs)), timeout, func() (bool, string) {
		missing := c.alerts.missing(notificationIDs)
		if len(missing) == 0 {
			return true, ""
		}
		return false, fmt.Sprintf("%d of %d notifications have no alert yet (e.g. %v)", len(missing), len(notificationIDs), missing[:min(5, len(missing))])
	})
	dups, by := c.alerts.duplicates(notificationIDs)
	c.t.Logf("every one of %d notifications has an alert (%s after asking); %d duplicate alerts",
		len(notificationIDs), time.Since(began).Round(time.Millisecond), dups)
	if dups > 0 {
		c.t.Logf("duplicated notifications by the workers of their alerts: %v", by)
	}
	return dups
}

// checkAlertResults checks the join result of every alert read so far:
// with the co-partition plan, every alert is local, carries a price and
// names the worker that made it.
func (c *cluster) checkAlertResults() map[record.Result]int {
	c.t.Helper()
	res := c.alerts.results()
	c.t.Logf("alerts by result: %v; bad alerts: %d", res, c.alerts.bad())
	if res[record.ResultRemote] != 0 || res[record.ResultMiss] != 0 {
		c.t.Errorf("alerts by result %v: want only local joins with the co-partition plan", res)
	}
	if n := c.alerts.bad(); n != 0 {
		c.t.Errorf("%d alerts did not decode, had no price or no worker", n)
	}
	return res
}

// waitCaughtUp waits until the group's committed offsets of both input
// topics reach their end offsets: every tick is in a store (market offsets
// are committed only up to what the store holds) and every notification's
// alert is acknowledged.
func (c *cluster) waitCaughtUp(timeout time.Duration) {
	c.t.Helper()
	c.poll("committed offsets to reach the end offsets", timeout, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, tp := range []string{c.market, c.notifs} {
			ends, err := c.endOffsets(ctx, tp)
			if err != nil {
				return false, err.Error()
			}
			committed, err := c.committed(ctx, tp)
			if err != nil {
				return false, err.Error()
			}
			for p, end := range ends {
				if end > 0 && committed[p] != end {
					return false, fmt.Sprintf("%s-%d: committed %d, end %d", tp, p, committed[p], end)
				}
			}
		}
		return true, ""
	})
}

func (c *cluster) endOffsets(ctx context.Context, topic string) ([]int64, error) {
	reqs := make([]kafka.OffsetRequest, c.partitions)
	for p := range reqs {
		reqs[p] = kafka.LastOffsetOf(p)
	}
	res, err := c.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, err
	}
	out := make([]int64, c.partitions)
	seen := 0
	for _, po := range res.Topics[topic] {
		if po.Error != nil {
			return nil, fmt.Errorf("end offset of %s-%d: %w", topic, po.Partition, po.Error)
		}
		out[po.Partition] = po.LastOffset
		seen++
	}
	if seen != c.partitions {
		return nil, fmt.Errorf("end offsets of %s: %d of %d partitions answered", topic, seen, c.partitions)
	}
	return out, nil
}

// committed returns the group's committed offset per partition, -1 when
// none.
func (c *cluster) committed(ctx context.Context, topic string) ([]int64, error) {
	ps := make([]int, c.partitions)
	out := make([]int64, c.partitions)
	for p := range ps {
		ps[p], out[p] = p, -1
	}
	res, err := c.client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: c.group, Topics: map[string][]int{topic: ps}})
	if err != nil {
		return nil, err
	}
	if res.Error != nil {
		return nil, res.Error
	}
	for _, p := range res.Topics[topic] {
		if p.Error != nil {
			return nil, fmt.Errorf("committed offset of %s-%d: %w", topic, p.Partition, p.Error)
		}
		out[p.Partition] = p.CommittedOffset
	}
	return out, nil
}

// checkFinalState opens, after every worker has stopped, the store of each
// task in the state dir of its final owner and checks that the union of
// their prices is exactly last (the last price of every symbol), each
// symbol in its own task only.
func (c *cluster) checkFinalState(owners []string, last map[string]float64) {
	c.t.Helper()
	got := map[string]float64{}
	byOwner := map[string][]int{}
	for p, id := range owners {
		byOwner[id] = append(byOwner[id], p)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for id, tasks := range byOwner {
		mgr, err := statestore.Open(statestore.Options{Dirs: []string{c.stateDir(id)}, Group: c.group, CacheBytes: 1 << 20, Logger: quiet})
		if err != nil {
			c.t.Fatalf("opening the state of %s: %v", id, err)
		}
		onDisk, err := mgr.Tasks()
		if err != nil {
			c.t.Fatalf("listing the tasks of %s: %v", id, err)
		}
		for _, p := range tasks {
			if !slices.Contains(onDisk, p) {
				c.t.Errorf("task %d: no store in the state dir of its final owner %s (it has %v)", p, id, onDisk)
				continue
			}
			st, err := mgr.OpenTask(p)
			if err != nil {
				c.t.Errorf("opening task %d of %s: %v", p, id, err)
				continue
			}
			err = st.Scan(func(tk statestore.Tick) error {
				if q := murmur2.Partition([]byte(tk.Symbol), c.partitions); q != p {
					c.t.Errorf("task %d of %s holds %s, whose task is %d", p, id, tk.Symbol, q)
				}
				got[tk.Symbol] = tk.Price
				return nil
			})
			if err != nil {
				c.t.Errorf("scanning task %d of %s: %v", p, id, err)
			}
			_ = st.Close()
		}
		if mgr.Rebuilds() != 0 {
			c.t.Errorf("the state of %s had %d stores that failed to open", id, mgr.Rebuilds())
		}
		_ = mgr.Close()
	}
	bad := 0
	for sym, want := range last {
		if g, ok := got[sym]; !ok || g != want {
			bad++
			if bad <= 10 {
				c.t.Errorf("final state: %s = %v (present %v), the last tick was %v (task %d, owner %s)",
					sym, g, ok, want, murmur2.Partition([]byte(sym), c.partitions), owners[murmur2.Partition([]byte(sym), c.partitions)])
			}
		}
	}
	for sym := range got {
		if _, ok := last[sym]; !ok {
			c.t.Errorf("final state has %s, which was never produced", sym)
		}
	}
	if bad == 0 {
		c.t.Logf("final state: the %d task stores of the final owners hold exactly the last price of all %d symbols", len(owners), len(last))
	}
}

// alertReader reads every partition of the alerts topic and counts alerts
// per notification id and per result.
type alertReader struct {
	client     *kafka.Client
	topic      string
	partitions int

	mu       sync.Mutex
	byID     map[string]int
	workers  map[string][]string // per id, the worker of each alert in read order
	last     map[string]record.Alert
	byResult map[record.Result]int
	nRecords int
	nBad     int
}

func newAlertReader(c *kafka.Client, topic string, partitions int) *alertReader {
	return &alertReader{client: c, topic: topic, partitions: partitions,
		byID: map[string]int{}, workers: map[string][]string{}, last: map[string]record.Alert{}, byResult: map[record.Result]int{}}
}

func (a *alertReader) run(ctx context.Context) {
	r := testkit.NewTopicReader(a.client, a.topic, a.partitions)
	for ctx.Err() == nil {
		n, _ := r.Poll(ctx, func(_ kafka.Record, v []byte) { a.add(v) })
		if n == 0 {
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

func (a *alertReader) add(v []byte) {
	var al record.Alert
	err := json.Unmarshal(v, &al)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.nRecords++
	if err != nil || al.ID == "" || al.Worker == "" || (al.Result != record.ResultMiss && al.Price == nil) {
		a.nBad++
		return
	}
	a.byID[al.ID]++
	a.workers[al.ID] = append(a.workers[al.ID], al.Worker)
	a.last[al.ID] = al
	a.byResult[al.Result]++
}

func (a *alertReader) records() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.nRecords
}

func (a *alertReader) bad() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.nBad
}

func (a *alertReader) missing(ids []string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, id := range ids {
		if a.byID[id] == 0 {
			out = append(out, id)
		}
	}
	return out
}

// duplicates counts the alerts of ids beyond the first of each, and
// counts the duplicated ids by the workers that wrote their alerts
// ("w1,w3": first by w1, again by w3).
func (a *alertReader) duplicates(ids []string) (int, map[string]int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	by := map[string]int{}
	for _, id := range ids {
		if d := a.byID[id] - 1; d > 0 {
			n += d
			by[strings.Join(a.workers[id], ",")]++
		}
	}
	return n, by
}

func (a *alertReader) results() map[record.Result]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.byResult)
}

// alert returns the last alert read for a notification id.
func (a *alertReader) alert(id string) (record.Alert, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	al, ok := a.last[id]
	return al, ok
}

// stopAll sends SIGTERM to every worker at once, then waits for each.
func (c *cluster) stopAll(ws []*worker) {
	c.t.Helper()
	began := time.Now()
	for _, w := range ws {
		if err := w.signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			c.t.Errorf("SIGTERM to worker %s: %v", w.id, err)
		}
	}
	for _, w := range ws {
		if !w.wait(45 * time.Second) {
			_ = w.cmd.Process.Kill()
			w.wait(10 * time.Second)
			c.t.Fatalf("worker %s did not exit within 45s of SIGTERM (killed)", w.id)
		}
		if w.err != nil {
			c.t.Errorf("worker %s exited with %v after SIGTERM; log tail:\n%s", w.id, w.err, tail(w.logPath, 20))
		}
	}
	c.t.Logf("stopped workers %v with SIGTERM in %s", ids(ws), time.Since(began).Round(time.Millisecond))
}

// checkJoinCounts checks the members' own join counters: with the
// co-partition plan there is no remote lookup and no miss.
func (c *cluster) checkJoinCounts(what string, s stable) {
	c.t.Helper()
	local := s.sum(func(v join.AssignmentView) int64 { return v.Local })
	remote := s.sum(func(v join.AssignmentView) int64 { return v.Remote })
	miss := s.sum(func(v join.AssignmentView) int64 { return v.Miss })
	if remote != 0 || miss != 0 {
		c.t.Errorf("%s: members report %d local, %d remote, %d miss joins; want no remote and no miss", what, local, remote, miss)
	}
}

// checkPrices checks that the alert of each notification id carries the
// symbol's price in want: for notifications produced after every tick.
func (c *cluster) checkPrices(ids []string, want map[string]float64) {
	c.t.Helper()
	bad := 0
	for _, id := range ids {
		al, ok := c.alerts.alert(id)
		if !ok {
			continue // reported by waitAlerts
		}
		if p, ok := want[al.Symbol]; !ok || al.Price == nil || *al.Price != p {
			bad++
			if bad <= 5 {
				c.t.Errorf("alert %s for %s: price %v, want %v", id, al.Symbol, fmtPrice(al.Price), p)
			}
		}
	}
	if bad > 5 {
		c.t.Errorf("... %d alerts with a wrong price in all", bad)
	}
}

func fmtPrice(p *float64) string {
	if p == nil {
		return "none"
	}
	return strconv.FormatFloat(*p, 'f', -1, 64)
}

// drain ends a continuous-load scenario: stop the producer, wait for an
// alert of every notification it produced (logging the duplicates), check
// the join results, wait until the group has caught up, check that no
// rebalance happened since generation gen, stop the workers and check
// their final stores against the last prices.
func (c *cluster) drain(what string, l *load, running []*worker, gen int32) {
	c.t.Helper()
	runs := c.end(l)
	noteIDs, last := merge(runs...)
	dups := c.waitAlerts(noteIDs, 90*time.Second)
	c.checkAlertResults()
	c.waitCaughtUp(60 * time.Second)
	final := c.waitStable(running, 0, 30*time.Second)
	if final.gen != gen {
		c.t.Errorf("%s: generation changed from %d to %d after the last membership change", what, gen, final.gen)
	}
	c.checkJoinCounts(what+": end", final)
	c.t.Logf("%s: %d load runs, %d notifications, %d alerts, %d duplicates",
		what, len(runs), len(noteIDs), c.alerts.records(), dups)
	c.stopAll(running)
	c.checkFinalState(final.owners(c.partitions), last)
}

// countLogLines counts the lines of every worker log so far that contain
// each of subs.
func (c *cluster) countLogLines(subs ...string) int {
	c.mu.Lock()
	logs := slices.Clone(c.logs)
	c.mu.Unlock()
	n := 0
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			continue
		}
	lines:
		for _, line := range strings.Split(string(b), "\n") {
			for _, s := range subs {
				if !strings.Contains(line, s) {
					continue lines
				}
			}
			n++
		}
	}
	return n
}
