package integration

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/testsupport/oracle"
	"github.com/joiner-dev/joiner/testsupport/testkit"
)

// The oracle scenarios under exactly-once (--processing-guarantee
// exactly-once): the workers write every alert inside a transaction that
// also commits the offsets of the notifications it came from, and the
// alerts are read read_committed. In every scenario: 0 lost, 0 wrong
// prices and 0 duplicates. The counts are logged ("oracle ...").

// exactlyOnceFlags are the worker flags of the exactly-once scenarios:
// the commit interval is the exactly-once default (workerFlags sets
// 500ms).
var exactlyOnceFlags = []string{"--processing-guarantee", "exactly-once", "--commit-interval", "100ms"}

// settleCommitted reads the alerts once more after every transaction
// open when the last one was read must have ended (the default
// transaction timeout): an alert committed late would be a duplicate.
func settleCommitted(ctx context.Context, t *testing.T, c *cluster, wl *oracle.Workload, r *oracle.AlertReader, rep oracle.Report) oracle.Report {
	t.Helper()
	time.Sleep(11 * time.Second)
	rep, err := wl.WaitComplete(ctx, r, wl.Produced(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// What a read_uncommitted consumer sees: the aborted copies too.
	if raw, err := wl.WaitComplete(ctx, oracle.NewAlertReader(c.client, c.alertsT, partitions), wl.Produced(), time.Second); err == nil {
		t.Logf("read_uncommitted: %d alert records, %d duplicates (aborted transactions' copies)", raw.Alerts, raw.Duplicates)
	}
	return rep
}

func TestIntegrationExactlyOnceUndisturbed(t *testing.T) {
	runOracle(t, oracleScenario{workers: []string{"w1", "w2", "w3"}, exactlyOnce: true, maxDuplicates: 0})
}

func TestIntegrationExactlyOnceRoundRobin(t *testing.T) {
	runOracle(t, oracleScenario{workers: []string{"w1", "w2", "w3", "w4"}, args: []string{"--assignor", "roundrobin"}, exactlyOnce: true, maxDuplicates: 0})
}

func TestIntegrationExactlyOnceScaleOutAndIn(t *testing.T) {
	t.Setenv("JOINER_LEAVE_ON_SHUTDOWN", "true")
	runOracle(t, oracleScenario{workers: []string{"w1", "w2"}, exactlyOnce: true, maxDuplicates: 0, disturb: scaleOutAndIn})
}

// kill -9 with an open transaction, restarted 6 s later (within the
// session): the restarted worker's InitProducerID fences the killed one
// and aborts its transaction; its tasks start from the offsets of the
// last committed one.
func TestIntegrationExactlyOnceKill9Restart(t *testing.T) {
	runOracle(t, oracleScenario{workers: []string{"w1", "w2", "w3"}, exactlyOnce: true, maxDuplicates: 0,
		disturb: func(c *cluster, ws map[string]*worker, at func(float64)) {
			at(0.2)
			c.kill9(ws["w2"])
			time.Sleep(6 * time.Second)
			ws["w2"] = c.start("w2")
		}})
}

// SIGSTOP past the session timeout (6 s) with a transaction open, then
// SIGCONT: the group gave its tasks to others, so the stopped worker's
// offsets are refused (KIP-447: its generation is over) or its
// transaction was aborted by the coordinator (past the transaction
// timeout): nothing it wrote becomes visible, and it rejoins.
//
// The worker is stopped while its open transaction holds alerts and no
// commit runs: the load comes in rounds every 100 ms, so a stop at a
// random moment often finds the transaction empty (committed since the
// last round) or being committed, and then there is no zombie write to
// refuse. With a 1 s commit interval, stopAfterCommitWithRecords stops it
// within half a second after a commit, once records are in the next
// transaction.
func TestIntegrationExactlyOnceSIGSTOP(t *testing.T) {
	runOracle(t, oracleScenario{workers: []string{"w1", "w2", "w3"}, exactlyOnce: true, maxDuplicates: 0,
		args: []string{"--commit-interval", "1s"},
		disturb: func(c *cluster, ws map[string]*worker, at func(float64)) {
			at(0.2)
			w := ws["w3"]
			stopAfterCommitWithRecords(c.t, w)
			time.Sleep(12 * time.Second)
			if err := w.signal(syscall.SIGCONT); err != nil {
				c.t.Fatal(err)
			}
		},
		after: func(c *cluster, ws map[string]*worker, _ *oracle.Workload) {
			// The stopped worker's open transaction is aborted once it
			// runs again: by its commit (the offsets refused: its
			// generation is over), by the loss of its tasks (Lost aborts
			// what they wrote), or it was already aborted by the
			// coordinator (past the transaction timeout) and its abort is
			// refused as fenced. Which one comes first after SIGCONT is a
			// race; each counts joiner_transactions_total{outcome="abort"}.
			m := ws["w3"].metricsOf(c.t)
			if n := m.Sum("joiner_transactions_total", `outcome="abort"`); n == 0 {
				c.t.Errorf("the worker stopped past its session aborted no transaction (joiner_transactions_total{outcome=\"abort\"} is 0; its samples: %v); w3's log tail:\n%s", txnSamples(m), tail(ws["w3"].logPath, 30))
			} else {
				c.t.Logf("w3 aborted %v transactions (%d \"transaction aborted\" log lines, %v fenced)", n, c.countLogLines("transaction aborted"), m.Sum("joiner_producer_fenced_total"))
			}
			// w3 rejoins: its tasks went to others while it was stopped,
			// and it may be in a rebalance still when the alerts are all
			// read, so it is given until a deadline to answer with tasks.
			w3 := ws["w3"]
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
				if !w3.running() {
					c.t.Errorf("w3 exited after SIGCONT; log tail:\n%s", tail(w3.logPath, 20))
					break
				}
				v, err := w3.view()
				if err == nil && len(v.Tasks) > 0 {
					c.t.Logf("w3 after SIGCONT: generation %d, tasks %v", v.Generation, v.Tasks)
					break
				}
				if time.Now().After(deadline) {
					c.t.Errorf("w3 has no task 30s after the alerts were read (view: %+v, %v); log tail:\n%s", v, err, tail(w3.logPath, 20))
					break
				}
			}
		}})
}

// Two live processes with one instance id (and their own state dirs) under
// exactly-once: each one's InitProducerID fences the other's producer, and
// the group fences the older member, which exits 1 saying so; the newer
// one goes on.
func TestIntegrationExactlyOnceSameInstanceTwice(t *testing.T) {
	c := newCluster(t, partitions)
	c.net.runFlags = append(c.net.runFlags, exactlyOnceFlags...)
	first := c.start("w1")
	c.waitStable([]*worker{first}, 0, 60*time.Second)
	c.flags = []string{"--state-dir", c.stateDir("w1-second")}
	second := c.start("w1")
	c.flags = nil
	var gone *worker
	for deadline := time.Now().Add(90 * time.Second); gone == nil && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for _, w := range []*worker{first, second} {
			if !w.running() {
				gone = w
			}
		}
	}
	if gone == nil {
		t.Fatal("both processes with instance id w1 still run after 90s")
	}
	other := first
	if gone == first {
		other = second
	}
	defer c.kill9(other)
	code := -1
	if gone.cmd.ProcessState != nil {
		code = gone.cmd.ProcessState.ExitCode()
	}
	t.Logf("the %s process exited with status %d", map[bool]string{true: "first", false: "second"}[gone == first], code)
	if code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	if n := c.countLogLines("another member runs with the same instance id"); n == 0 {
		t.Errorf("no log says that another member runs with the same instance id:\n%s", tail(gone.logPath, 20))
	}
	if !other.running() {
		t.Errorf("the other process stopped too")
	}
}

// txnSamples are a scrape's samples of the transaction metrics.
func txnSamples(m testkit.Metrics) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if strings.HasPrefix(k, "joiner_transaction") || strings.HasPrefix(k, "joiner_producer_fenced") {
			out[k] = v
		}
	}
	return out
}

// stopAfterCommitWithRecords sends w SIGSTOP while its open transaction
// holds records (joiner_transaction_open_records > 0) less than half a
// commit interval (1 s) after a commit ended, so that no commit is running
// and none is due. A commit is seen in one scrape and the records in a
// later one: the records gauge is reset before the commit is counted.
func stopAfterCommitWithRecords(t *testing.T, w *worker) {
	t.Helper()
	url := w.net.scheme + "://" + w.addr + "/metrics"
	commits := -1.0
	var committedAt time.Time
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: no moment within 20s with records in the transaction just after a commit", w.id)
		}
		m, err := testkit.Scrape(w.net.http, url)
		if err != nil {
			continue
		}
		n, records := m.Sum("joiner_transactions_total", `outcome="commit"`), m.Sum("joiner_transaction_open_records")
		switch {
		case n != commits:
			if commits >= 0 {
				committedAt = time.Now()
			}
			commits = n
		case !committedAt.IsZero() && time.Since(committedAt) < 500*time.Millisecond && records > 0:
			if err := w.signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s stopped with %v records in its open transaction, %v after a commit", w.id, records, time.Since(committedAt).Round(time.Millisecond))
			return
		}
	}
}
