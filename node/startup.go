package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/joiner-dev/joiner/internal/backoff"
	"github.com/segmentio/kafka-go"

	"github.com/joiner-dev/joiner/internal/fielderr"
)

// DefaultStartupTimeout bounds how long New waits for Kafka at start.
const DefaultStartupTimeout = 5 * time.Minute

// startupBackoff spaces the attempts to reach Kafka at start.
var startupBackoff = backoff.Policy{Min: 250 * time.Millisecond, Max: 10 * time.Second}

// bootstrap waits until Kafka answers, creates the topics if asked and
// checks co-partitioning. Unreachable brokers and retriable Kafka errors are
// retried with capped, jittered backoff until Config.StartupTimeout; every
// other error (topics not co-partitioned, a missing topic without
// --create-topics, a --partitions conflict) is returned at once. While it
// waits, the HTTP listener answers /healthz 200 and /readyz 503.
func (n *Node) bootstrap(ctx context.Context) (int, error) {
	timeout := n.cfg.StartupTimeout
	if timeout <= 0 {
		timeout = DefaultStartupTimeout
	}
	start := time.Now()
	var waiting *waitServer
	defer func() {
		if waiting != nil {
			waiting.stop()
		}
	}()
	for attempt := 0; ; attempt++ {
		parts, err := n.checkTopics(ctx)
		if err == nil {
			if attempt > 0 {
				n.log.Info("Kafka is reachable; starting", "waited", time.Since(start).Round(time.Millisecond), "attempts", attempt+1)
			}
			return parts, nil
		}
		if ctx.Err() != nil {
			return 0, fmt.Errorf("stopped while waiting for Kafka at %v: %w", n.cfg.Brokers, ctx.Err())
		}
		if !retriable(err) {
			return 0, err
		}
		elapsed := time.Since(start)
		if elapsed >= timeout {
			return 0, fielderr.Errorf("Kafka at %v did not answer within {StartupTimeout} %s (%d attempts): %w; check {Brokers} and the network, or raise {StartupTimeout}",
				n.cfg.Brokers, timeout, attempt+1, err)
		}
		if waiting == nil {
			if waiting, err = n.serveWaiting(); err != nil {
				return 0, err
			}
		}
		waiting.reason.Store(fmt.Sprintf("waiting for Kafka at %v: %v", n.cfg.Brokers, err))
		d := min(startupBackoff.Delay(attempt), timeout-elapsed)
		n.log.Warn("Kafka is not reachable; retrying", "brokers", n.cfg.Brokers, "attempt", attempt+1,
			"retry_in", d.Round(time.Millisecond), "gives_up_in", (timeout - elapsed).Round(time.Second), "err", err)
		if err := backoff.Sleep(ctx, d); err != nil {
			return 0, fmt.Errorf("stopped while waiting for Kafka at %v: %w", n.cfg.Brokers, err)
		}
	}
}

func (n *Node) checkTopics(ctx context.Context) (int, error) {
	if n.cfg.CreateTopics {
		if err := ensureTopics(ctx, n.client, n.cfg.Topics, n.cfg.Partitions, max(n.cfg.ReplicationFactor, 1), n.cfg.PartitionsExplicit, n.historyRetention(), n.log); err != nil {
			return 0, err
		}
	}
	return CheckCopartitioned(ctx, n.client, n.cfg.Topics)
}

// retriable reports whether err means Kafka is not reachable (yet), rather
// than a configuration problem.
func retriable(err error) bool {
	var op *net.OpError
	var dns *net.DNSError
	var kerr kafka.Error
	switch {
	case errors.As(err, &op), errors.As(err, &dns):
		return true
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, net.ErrClosed):
		return true
	case errors.As(err, &kerr):
		return kerr.Temporary()
	}
	return false
}

// waitServer answers HTTP on the node's listener while New waits for
// Kafka; stop hands the listener back open.
type waitServer struct {
	srv    *http.Server
	l      *pausedListener
	reason atomic.Value // string
	wg     sync.WaitGroup
}

func (n *Node) serveWaiting() (*waitServer, error) {
	if n.listener == nil {
		l, err := net.Listen("tcp", n.cfg.HTTPAddr)
		if err != nil {
			return nil, fielderr.Errorf("listening on %s: %w (set {HTTPAddr})", n.cfg.HTTPAddr, err)
		}
		n.listener = l
	}
	tl, ok := n.listener.(*net.TCPListener)
	if !ok {
		return nil, fmt.Errorf("listener on %s is not TCP", n.cfg.HTTPAddr)
	}
	w := &waitServer{l: &pausedListener{TCPListener: tl}}
	w.reason.Store("waiting for Kafka")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(rw http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(rw, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(rw http.ResponseWriter, _ *http.Request) {
		http.Error(rw, w.reason.Load().(string), http.StatusServiceUnavailable)
	})
	w.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		_ = w.srv.Serve(w.l)
	}()
	n.log.Info("serving /healthz and /readyz while waiting for Kafka", "http", tl.Addr().String())
	return w, nil
}

// stop shuts the waiting server down and leaves the listener open for the
// worker's own server.
func (w *waitServer) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = w.srv.Shutdown(ctx)
	w.wg.Wait()
	_ = w.l.SetDeadline(time.Time{})
}

// pausedListener is a TCP listener whose Close only wakes a blocked Accept
// (by an expired deadline) instead of closing the socket, so one listener
// serves first the waiting server and then the worker's.
type pausedListener struct{ *net.TCPListener }

func (l *pausedListener) Close() error { return l.SetDeadline(time.Unix(1, 0)) }

// logReplay says, in one line, where the group starts on the notifications
// partitions that have no committed offset (a new or mistyped group), and
// how many records that replays (--start-offset earliest) or skips
// (latest). It only reads; a failure is a WARN.
func (n *Node) logReplay(ctx context.Context, partitions int) {
	topic := n.cfg.Topics.Notifications
	ps := make([]int, partitions)
	for p := range ps {
		ps[p] = p
	}
	committed, err := n.client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: n.cfg.Group, Topics: map[string][]int{topic: ps}})
	if err == nil && committed.Error != nil && !errors.Is(committed.Error, kafka.GroupIdNotFound) {
		err = committed.Error
	}
	if err != nil {
		n.log.Warn("cannot read the group's committed offsets to say what a start replays", "group", n.cfg.Group, "topic", topic, "err", err)
		return
	}
	has := map[int]bool{}
	for _, p := range committed.Topics[topic] {
		if p.Error == nil && p.CommittedOffset >= 0 {
			has[p.Partition] = true
		}
	}
	var req []kafka.OffsetRequest
	for _, p := range ps {
		if !has[p] {
			req = append(req, kafka.FirstOffsetOf(p), kafka.LastOffsetOf(p))
		}
	}
	if len(req) == 0 {
		n.log.Info("the group has committed offsets on every notifications partition; it resumes from them", "group", n.cfg.Group, "topic", topic)
		return
	}
	offs, err := n.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: req}})
	if err != nil {
		n.log.Warn("cannot read the notifications offsets to say what a start replays", "topic", topic, "err", err)
		return
	}
	var records int64
	for _, p := range offs.Topics[topic] {
		if p.Error == nil && p.LastOffset >= p.FirstOffset && p.FirstOffset >= 0 {
			records += p.LastOffset - p.FirstOffset
		}
	}
	uncommitted := partitions - len(has)
	if n.cfg.StartOffset == "latest" {
		n.log.Warn("no committed offset: starting at the end of the notifications (--start-offset latest); the records already there get no alert",
			"group", n.cfg.Group, "topic", topic, "partitions_without_offset", uncommitted, "of", partitions, "records_skipped", records)
		return
	}
	n.log.Warn("no committed offset: replaying the notifications from the earliest offset (--start-offset earliest); each gets an alert",
		"group", n.cfg.Group, "topic", topic, "partitions_without_offset", uncommitted, "of", partitions, "records_to_replay", records)
}
