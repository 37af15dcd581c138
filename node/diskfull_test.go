package node

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/joiner-dev/joiner/statestore"
	"github.com/twmb/franz-go/pkg/kfake"
)

// hangFS blocks Pebble's LOCK of every task store until release is
// closed: an open that never returns, as on a disk that Pebble retries
// without end.
type hangFS struct {
	vfs.FS
	entered chan struct{}
	release chan struct{}
}

func (f hangFS) Lock(name string) (io.Closer, error) {
	if strings.Contains(name, "task-") {
		select {
		case f.entered <- struct{}{}:
		default:
		}
		<-f.release
	}
	return f.FS.Lock(name)
}

// A stop while a task store open hangs is not stuck behind it: Run
// returns soon after its context ends, with ErrOpenStuck (joiner run then
// exits 1), instead of waiting for Pebble for ever.
func TestRunStopsWhileAStoreOpenHangs(t *testing.T) {
	client := startBroker(t, kfake.SeedTopics(2, "market", "notifications", "alerts", "joiner-dead-letters"))
	fs := hangFS{FS: vfs.Default, entered: make(chan struct{}, 1), release: make(chan struct{})}
	t.Cleanup(func() { close(fs.release) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n, err := New(ctx, Config{
		Brokers: []string{client.Addr.String()}, HTTPAddr: "127.0.0.1:0", InstanceID: "w1",
		StoreOptions: StoreOptions{Dirs: []string{t.TempDir()}, FS: fs, OpenTimeout: time.Hour},
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	select {
	case <-fs.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("no task store open started within 30s")
	}
	// Given up on (a short OpenTimeout would do the same): /healthz then
	// says so, since only a restart cleans the open up.
	// (Task 5: the worker opens its own tasks' stores, 0 and 1, at once.)
	n.stores.OpenTaskContext(cancelled(), 5)
	waitHealthz(t, n, http.StatusServiceUnavailable)
	began := time.Now()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, statestore.ErrOpenStuck) {
			t.Errorf("Run after a stop with a hanging open: %v, want ErrOpenStuck", err)
		}
		t.Logf("stopped in %s: %v", time.Since(began).Round(time.Millisecond), err)
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30s of the stop while a store open hangs")
	}
}

func cancelled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// waitHealthz waits up to 10s for the node's /healthz to answer code.
func waitHealthz(t *testing.T, n *Node, code int) {
	t.Helper()
	var got int
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		r, err := http.Get("http://" + n.Addr() + "/healthz")
		if err != nil {
			continue
		}
		r.Body.Close()
		if got = r.StatusCode; got == code {
			return
		}
	}
	t.Errorf("/healthz answers %d, want %d", got, code)
}
