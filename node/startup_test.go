package node

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/internal/buildinfo"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/prometheus/common/expfmt"
	"github.com/twmb/franz-go/pkg/kfake"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A worker started before its broker retries (logged), answers /healthz
// 200 and /readyz 503 while it waits, and starts once the broker is up.
func TestStartupWaitsForKafka(t *testing.T) {
	kport, hport := freePort(t), freePort(t)
	var logs syncBuffer
	type result struct {
		n   *Node
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := New(context.Background(), Config{
			Brokers:        []string{net.JoinHostPort("127.0.0.1", itoa(kport))},
			StoreOptions:   StoreOptions{Dirs: []string{t.TempDir()}},
			HTTPAddr:       net.JoinHostPort("127.0.0.1", itoa(hport)),
			InstanceID:     "w1",
			StartupTimeout: time.Minute,
			Logger:         slog.New(slog.NewTextHandler(&logs, nil)),
		})
		done <- result{n, err}
	}()
	base := "http://" + net.JoinHostPort("127.0.0.1", itoa(hport))
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := get(t, base+"/readyz")
		if code == http.StatusServiceUnavailable && strings.Contains(body, "waiting for Kafka") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz = %d %q, want 503 waiting for Kafka", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, _ := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d while waiting, want 200", code)
	}
	select {
	case r := <-done:
		t.Fatalf("New returned before the broker was up: %v", r.err)
	default:
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(kport), kfake.SeedTopics(3, "market", "notifications"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("New did not return within 30s of the broker starting")
	}
	if r.err != nil {
		t.Fatalf("New after the broker came up: %v\n%s", r.err, logs.String())
	}
	defer r.n.Close()
	if got := r.n.listener.Addr().(*net.TCPAddr).Port; got != hport {
		t.Errorf("listener moved to port %d, want %d", got, hport)
	}
	if !strings.Contains(logs.String(), "Kafka is not reachable; retrying") {
		t.Errorf("no retry logged:\n%s", logs.String())
	}
	// The listener was handed over open: the worker's server can use it.
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { rw.WriteHeader(299) })}
	go func() { _ = srv.Serve(r.n.listener) }()
	defer srv.Close()
	if code, _ := get(t, base+"/readyz"); code != 299 {
		t.Errorf("after the handover the listener answered %d, want the new server's 299", code)
	}
}

// Without a broker, New gives up after StartupTimeout with an error that
// says what to do.
func TestStartupTimeout(t *testing.T) {
	start := time.Now()
	_, err := New(context.Background(), Config{
		Brokers:        []string{net.JoinHostPort("127.0.0.1", itoa(freePort(t)))},
		StoreOptions:   StoreOptions{Dirs: []string{t.TempDir()}},
		HTTPAddr:       "127.0.0.1:0",
		InstanceID:     "w1",
		StartupTimeout: 1500 * time.Millisecond,
		Logger:         slog.New(slog.DiscardHandler),
	})
	if err == nil || !strings.Contains(err.Error(), "StartupTimeout") {
		t.Fatalf("err = %v, want a startup timeout naming StartupTimeout", err)
	}
	if d := time.Since(start); d < 1500*time.Millisecond || d > 10*time.Second {
		t.Errorf("gave up after %s, want about 1.5s", d)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// While it waits for an unreachable broker, a worker says why on /readyz
// and in its retry lines (the first one included), and /metrics answers
// 200 with joiner_build_info and joiner_startup_retries_total.
func TestStartupWaitingSaysWhyAndServesMetrics(t *testing.T) {
	hport := freePort(t)
	var logs syncBuffer
	done := make(chan error, 1)
	go func() {
		_, err := New(context.Background(), Config{
			Brokers:        []string{net.JoinHostPort("127.0.0.1", itoa(freePort(t)))},
			StoreOptions:   StoreOptions{Dirs: []string{t.TempDir()}},
			HTTPAddr:       net.JoinHostPort("127.0.0.1", itoa(hport)),
			InstanceID:     "w1",
			StartupTimeout: 4 * time.Second,
			Logger:         slog.New(slog.NewTextHandler(&logs, nil)),
		})
		done <- err
	}()
	base := "http://" + net.JoinHostPort("127.0.0.1", itoa(hport))
	deadline := time.Now().Add(3 * time.Second)
	var code int
	var body string
	for {
		if code, body = get(t, base+"/readyz"); strings.Contains(body, "waiting for Kafka at") || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code != http.StatusServiceUnavailable || strings.Contains(body, "<nil>") || !strings.Contains(body, "connection refused") {
		t.Errorf("/readyz = %d %q, want 503 saying the connection was refused", code, body)
	}
	code, metrics := get(t, base+"/metrics")
	if code != http.StatusOK || !strings.Contains(metrics, `joiner_build_info{goversion="`) || !strings.Contains(metrics, "joiner_startup_retries_total ") {
		t.Errorf("/metrics while waiting = %d %q, want 200 with joiner_build_info and joiner_startup_retries_total", code, metrics)
	}
	if err := <-done; err == nil {
		t.Fatal("New succeeded without a broker")
	}
	retries := 0
	for _, line := range strings.Split(logs.String(), "\n") {
		if !strings.Contains(line, "Kafka is not reachable; retrying") {
			continue
		}
		retries++
		if strings.Contains(line, "err=<nil>") || !strings.Contains(line, "connection refused") {
			t.Errorf("retry line without its cause: %s", line)
		}
	}
	if retries < 2 {
		t.Errorf("%d retry lines, want at least 2:\n%s", retries, logs.String())
	}
}

// The metrics registered before Kafka answers follow the Prometheus naming
// rules, and joiner_build_info carries the binary's version labels.
func TestStartupMetricsNaming(t *testing.T) {
	n := &Node{reg: prometheus.NewRegistry()}
	n.registerStartupMetrics()
	n.retries.Inc()
	mfs, err := n.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	bi := buildinfo.Get()
	want := fmt.Sprintf("joiner_build_info{goversion=%q,revision=%q,version=%q} 1\n", bi.GoVersion, bi.Revision, bi.Version)
	var out strings.Builder
	for _, mf := range mfs {
		_, _ = expfmt.MetricFamilyToText(&out, mf)
	}
	if !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "joiner_startup_retries_total 1\n") {
		t.Errorf("metrics:\n%s\nwant %q and joiner_startup_retries_total 1", out.String(), want)
	}
}

// A broker that accepts connections and never answers: /metrics answers
// within the first second, and New gives up at StartupTimeout, not at the
// client's 30s timeout.
func TestStartupSilentBroker(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	}()
	hport := freePort(t)
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := New(context.Background(), Config{
			Brokers:        []string{silent.Addr().String()},
			StoreOptions:   StoreOptions{Dirs: []string{t.TempDir()}},
			HTTPAddr:       net.JoinHostPort("127.0.0.1", itoa(hport)),
			InstanceID:     "w1",
			StartupTimeout: 3 * time.Second,
			Logger:         slog.New(slog.DiscardHandler),
		})
		done <- err
	}()
	base := "http://" + net.JoinHostPort("127.0.0.1", itoa(hport))
	var code int
	for time.Since(start) < time.Second && code != http.StatusOK {
		code, _ = get(t, base+"/metrics")
		time.Sleep(20 * time.Millisecond)
	}
	if code != http.StatusOK {
		t.Errorf("/metrics = %d within the first second of waiting for a silent broker, want 200", code)
	}
	if code, body := get(t, base+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "Kafka at") {
		t.Errorf("/readyz = %d %q, want 503 saying it connects to Kafka", code, body)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "StartupTimeout") {
			t.Errorf("New = %v, want the startup timeout", err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("gave up after %s, want about the 3s StartupTimeout", d)
		}
	case <-time.After(25 * time.Second):
		t.Fatal("New still waits 25s into a 3s StartupTimeout")
	}
}
