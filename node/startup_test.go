package node

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

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
			StateDirs:      []string{t.TempDir()},
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
		StateDirs:      []string{t.TempDir()},
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
