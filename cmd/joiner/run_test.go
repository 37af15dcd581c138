package main

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/group"
	"github.com/joiner-dev/joiner/join"
	"github.com/joiner-dev/joiner/node"
	"github.com/joiner-dev/joiner/statestore"
)

// Every wrong flag or env value of `joiner run` is a usage error: exit 2,
// one line naming the flag, before anything connects to Kafka (the broker
// address below has nothing listening; a run that got that far would exit
// 1, not 2).
func TestRunUsageErrors(t *testing.T) {
	base := []string{"--brokers", "127.0.0.1:1", "--http-addr", "127.0.0.1:0", "--startup-timeout", "1s"}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"empty group", []string{"--group", ""}, nil, "--group"},
		{"blank group", []string{"--group", "  "}, nil, "--group"},
		{"empty group from env", nil, map[string]string{"JOINER_GROUP": ""}, "JOINER_GROUP"},
		{"empty instance id", []string{"--instance-id", ""}, nil, "--instance-id"},
		{"empty instance id from env", nil, map[string]string{"JOINER_INSTANCE_ID": ""}, "--instance-id"},
		{"instance id over Kafka's limit", []string{"--instance-id", strings.Repeat("w", 250)}, nil, "--instance-id is 250 characters"},
		{"advertise addr too long", []string{"--advertise-addr", strings.Repeat("h", 251) + ":8080"}, nil, "--advertise-addr is 256 bytes"},
		{"empty market topic", []string{"--market-topic", ""}, nil, "--market-topic"},
		{"empty notifications topic", []string{"--notifications-topic", ""}, nil, "--notifications-topic"},
		{"empty alerts topic", []string{"--alerts-topic", ""}, nil, "--alerts-topic"},
		{"empty dead-letter topic", []string{"--dead-letter-topic", ""}, nil, "--dead-letter-topic"},
		{"same input topics", []string{"--market-topic", "x", "--notifications-topic", "x"}, nil, "must differ"},
		{"empty brokers", []string{"--brokers", ""}, nil, "--brokers"},
		{"only commas in brokers", []string{"--brokers", " , "}, nil, "--brokers"},
		{"empty state dir", []string{"--state-dir", ""}, nil, "--state-dir"},
		{"unknown placement", []string{"--state-placement", "random"}, nil, "--state-placement"},
		{"unknown assignor", []string{"--assignor", "sticky"}, nil, "--assignor"},
		{"unknown assignor from env", nil, map[string]string{"JOINER_ASSIGNOR": "sticky"}, "JOINER_ASSIGNOR"},
		{"negative cache", []string{"--cache-bytes", "-1"}, nil, "--cache-bytes"},
		{"zero partitions", []string{"--partitions", "0"}, nil, "--partitions"},
		{"zero replication", []string{"--replication-factor", "0"}, nil, "--replication-factor"},
		{"zero session timeout", []string{"--session-timeout", "0s"}, nil, "--session-timeout"},
		{"negative rebalance timeout", []string{"--rebalance-timeout", "-1s"}, nil, "--rebalance-timeout"},
		{"zero heartbeat", []string{"--heartbeat-interval", "0s"}, nil, "--heartbeat-interval"},
		{"heartbeat too long", []string{"--heartbeat-interval", "5s", "--session-timeout", "10s"}, nil, "a third"},
		{"negative standbys", []string{"--standby-replicas", "-1"}, nil, "--standby-replicas"},
		{"negative recovery lag", []string{"--acceptable-recovery-lag", "-5"}, nil, "--acceptable-recovery-lag"},
		{"negative warm-ups from env", nil, map[string]string{"JOINER_MAX_WARMUP_REPLICAS": "-1"}, "JOINER_MAX_WARMUP_REPLICAS"},
		{"zero probing interval", []string{"--probing-rebalance-interval", "0s"}, nil, "--probing-rebalance-interval"},
		{"zero max task idle", []string{"--max-task-idle", "0s"}, nil, "--max-task-idle"},
		{"zero commit interval", []string{"--commit-interval", "0s"}, nil, "--commit-interval"},
		{"zero stall timeout", []string{"--stall-timeout", "0s"}, nil, "--stall-timeout"},
		{"negative grace", []string{"--grace", "-1s"}, nil, "--grace"},
		{"negative grace from env", nil, map[string]string{"JOINER_GRACE": "-500ms"}, "JOINER_GRACE"},
		{"empty symbol field", []string{"--symbol-field", ""}, nil, "--symbol-field"},
		{"empty price field from env", nil, map[string]string{"JOINER_PRICE_FIELD": ""}, "JOINER_PRICE_FIELD"},
		{"bad duration from env", nil, map[string]string{"JOINER_COMMIT_INTERVAL": "soon"}, "JOINER_COMMIT_INTERVAL"},
		{"zero startup timeout", []string{"--startup-timeout", "0s"}, nil, "--startup-timeout"},
		{"unknown start offset", []string{"--start-offset", "beginning"}, nil, "--start-offset"},
		{"unknown processing guarantee", []string{"--processing-guarantee", "once"}, nil, "--processing-guarantee"},
		{"unknown processing guarantee from env", nil, map[string]string{"JOINER_PROCESSING_GUARANTEE": "maybe"}, "--processing-guarantee"},
		{"zero transaction timeout", []string{"--processing-guarantee", "exactly-once", "--transaction-timeout", "0s"}, nil, "--transaction-timeout"},
		{"zero corrupt retention", []string{"--corrupt-retention", "0s"}, nil, "--corrupt-retention"},
		{"bad log level", []string{"--log-level", "loud"}, nil, "--log-level"},
		{"extra argument", []string{"now"}, nil, "unexpected argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var stdout, stderr bytes.Buffer
			code := dispatch(append(append([]string{"run"}, base...), tc.args...), nil, &stdout, &stderr)
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr:\n%s", code, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr %q does not name %q", stderr.String(), tc.want)
			}
			if n := strings.Count(strings.TrimSpace(stderr.String()), "\n"); n > 0 {
				t.Errorf("stderr has %d lines, want one:\n%s", n+1, stderr.String())
			}
		})
	}
}

func TestLoadgenUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--retry-timeout", "0s"},
		{"--brokers", ""},
		{"--market-topic", ""},
		{"--symbols", "0"},
		{"--symbol-field", ""},
		{"--price-field", ""},
		{"--out-of-order", "-1s"},
		{"--notification-bytes", "-1"},
	} {
		var stdout, stderr bytes.Buffer
		if code := dispatch(append([]string{"loadgen", "--brokers", "127.0.0.1:1"}, args...), nil, &stdout, &stderr); code != 2 {
			t.Errorf("loadgen %q: exit %d, want 2; stderr: %s", args, code, stderr.String())
		}
	}
}

// Row "broker unreachable when a worker starts": `joiner run` retries,
// serves /healthz 200 and /readyz 503 meanwhile, and exits 1 with a line
// naming --startup-timeout when it gives up.
func TestRunWaitsForKafkaThenExits1(t *testing.T) {
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	brokers := dead.Addr().String()
	dead.Close()
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	httpAddr := hl.Addr().String()
	hl.Close()
	var stderr syncWriter
	done := make(chan int, 1)
	start := time.Now()
	go func() {
		done <- dispatch([]string{"run", "--brokers", brokers, "--http-addr", httpAddr, "--instance-id", "w1",
			"--state-dir", t.TempDir(), "--startup-timeout", "3s"}, nil, io.Discard, &stderr)
	}()
	var ready, health int
	var readyBody []byte
	for time.Since(start) < 3*time.Second && (ready == 0 || health == 0) {
		if r, err := http.Get("http://" + httpAddr + "/readyz"); err == nil {
			ready = r.StatusCode
			readyBody, _ = io.ReadAll(r.Body)
			r.Body.Close()
		}
		if r, err := http.Get("http://" + httpAddr + "/healthz"); err == nil {
			health = r.StatusCode
			r.Body.Close()
		}
		time.Sleep(50 * time.Millisecond)
	}
	if ready != http.StatusServiceUnavailable || health != http.StatusOK {
		t.Errorf("while waiting: /readyz %d, /healthz %d; want 503 and 200", ready, health)
	}
	if !strings.Contains(string(readyBody), "check --brokers") {
		t.Errorf("/readyz while waiting = %q, want its cause with the hint naming --brokers", readyBody)
	}
	checkUserOutput(t, "/readyz", string(readyBody))
	select {
	case code := <-done:
		if code != 1 {
			t.Errorf("exit %d, want 1", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("joiner run did not give up within 30s of a 3s --startup-timeout")
	}
	if d := time.Since(start); d < 3*time.Second {
		t.Errorf("gave up after %s, before --startup-timeout 3s", d)
	}
	out := stderr.String()
	if !strings.Contains(out, "--startup-timeout") || !strings.Contains(out, "Kafka is not reachable; retrying") {
		t.Errorf("stderr does not log the retries and the give-up line:\n%s", out)
	}
}

type syncWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestBulkRestoreMin: --bulk-restore-min 0 (or less) means never, which
// the Config spells -1 (its 0 is the default); other values pass as they
// are.
func TestBulkRestoreMin(t *testing.T) {
	for _, tc := range []struct{ flag, want int64 }{
		{0, -1}, {-5, -1}, {1, 1}, {join.DefaultBulkRestoreMin, join.DefaultBulkRestoreMin},
	} {
		if got := bulkRestoreMin(tc.flag); got != tc.want {
			t.Errorf("bulkRestoreMin(%d) = %d, want %d", tc.flag, got, tc.want)
		}
	}
}

// Row "a state dir that cannot be used at start": `joiner run` exits 1 at
// once, before it reaches Kafka (nothing listens at the broker address),
// with one line naming the dir and the errno. A path under a file is
// unusable for everyone; as root, so is a read-only mount.
func TestRunUnusableStateDirExits1(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ dir, errno string }{{filepath.Join(file, "state"), "ENOTDIR"}}
	if ro := t.TempDir(); os.Geteuid() == 0 && exec.Command("mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", ro).Run() == nil {
		t.Cleanup(func() { _ = exec.Command("umount", ro).Run() })
		cases = append(cases, struct{ dir, errno string }{ro, "EROFS"})
	} else {
		t.Log("not root or mount failed: the read-only mount case is skipped")
	}
	for _, tc := range cases {
		var stderr bytes.Buffer
		start := time.Now()
		code := dispatch([]string{"run", "--brokers", "127.0.0.1:1", "--http-addr", "127.0.0.1:0", "--startup-timeout", "30s",
			"--group", "g", "--state-dir", t.TempDir() + "," + tc.dir}, nil, io.Discard, &stderr)
		out := strings.TrimSpace(stderr.String())
		if code != 1 || time.Since(start) > 5*time.Second {
			t.Errorf("%s: exit %d after %s, want 1 at once; stderr:\n%s", tc.dir, code, time.Since(start), out)
		}
		want := "state dir " + filepath.Join(tc.dir, "g") + " cannot be used"
		if strings.Contains(out, "\n") || !strings.Contains(out, want) || !strings.Contains(out, "errno "+tc.errno) || !strings.Contains(out, "--state-dir") {
			t.Errorf("%s: stderr is not one line naming %q, errno %s and --state-dir:\n%s", tc.dir, want, tc.errno, out)
		}
	}
}

// TestRunFlagDefaults: each of `joiner run`'s flag defaults is the
// default its Config applies to a zero field, so a run without flags
// and a Config left zero behave alike (issue 20: the CLI does not restate
// the packages' defaults).
func TestRunFlagDefaults(t *testing.T) {
	var out bytes.Buffer
	rf := addRunFlags(newFlags("run", "run", &out, &out))
	c := rf.cfg
	for _, tc := range []struct {
		flag      string
		got, want any
	}{
		{"group", c.Group, node.DefaultGroup},
		{"http-addr", c.HTTPAddr, node.DefaultHTTPAddr},
		{"state-placement", c.Placement, statestore.DefaultPlacement},
		{"cache-bytes", c.CacheBytes, int64(statestore.DefaultCacheBytes)},
		{"memtable-budget-bytes", c.MemTableBudget, int64(statestore.DefaultMemTableBudget)},
		{"state-min-free-bytes", c.MinFreeBytes, int64(statestore.DefaultMinFreeBytes)},
		{"state-open-timeout", c.OpenTimeout, statestore.DefaultOpenTimeout},
		{"corrupt-retention", c.CorruptRetention, statestore.DefaultCorruptRetention},
		{"max-task-idle", c.MaxTaskIdle, join.DefaultMaxTaskIdle},
		{"commit-interval", c.CommitInterval, join.DefaultCommitInterval},
		{"stall-timeout", c.StallTimeout, join.DefaultStallTimeout},
		{"history-retention", c.HistoryRetention, join.DefaultHistoryRetention},
		{"bulk-restore-min", c.BulkRestoreMin, int64(join.DefaultBulkRestoreMin)},
		{"start-offset", c.StartOffset, join.DefaultStartOffset},
		{"session-timeout", c.SessionTimeout, group.DefaultSessionTimeout},
		{"rebalance-timeout", c.RebalanceTimeout, group.DefaultRebalanceTimeout},
		{"heartbeat-interval", c.HeartbeatInterval, group.DefaultHeartbeatInterval},
		{"probing-rebalance-interval", c.ProbingRebalanceInterval, group.DefaultProbingRebalanceInterval},
		{"assignor", c.Assignor, group.DefaultAssignor()},
		{"startup-timeout", c.StartupTimeout, node.DefaultStartupTimeout},
	} {
		if tc.got != tc.want {
			t.Errorf("--%s defaults to %v, want the Config's default %v", tc.flag, tc.got, tc.want)
		}
	}
	// The two flags whose 0 means "off" give the Configs' explicit "off".
	if got := minFreeBytes(0); got != statestore.NoMinFreeBytes {
		t.Errorf("minFreeBytes(0) = %d, want statestore.NoMinFreeBytes", got)
	}
	if got := minFreeBytes(5); got != 5 {
		t.Errorf("minFreeBytes(5) = %d, want 5", got)
	}
	if got := bulkRestoreMin(0); got != join.BulkRestoreNever {
		t.Errorf("bulkRestoreMin(0) = %d, want join.BulkRestoreNever", got)
	}
}
