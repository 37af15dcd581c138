package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/joiner-dev/joiner/internal/backoff"
	"github.com/joiner-dev/joiner/internal/buildinfo"
	"github.com/joiner-dev/joiner/internal/fielderr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/segmentio/kafka-go"
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
// waits, the HTTP listener answers /healthz 200, /readyz 503 (saying why)
// and /metrics, where joiner_startup_retries_total counts the retries.
func (n *Node) bootstrap(ctx context.Context) (int, error) {
	timeout := n.cfg.StartupTimeout
	if timeout <= 0 {
		timeout = DefaultStartupTimeout
	}
	start := time.Now()
	// The listener answers from the start, not from the first failure: an
	// attempt to a broker that accepts but never answers lasts until the
	// attempt's deadline.
	waiting, err := n.serveWaiting()
	if err != nil {
		return 0, err
	}
	defer waiting.stop()
	// Not backoff.Do: the last wait is cut to what is left of the startup timeout (and logged so), which Do's policy delay cannot be.
	for attempt := 0; ; attempt++ {
		// No attempt outlasts the startup timeout (the client's own
		// timeout is 30s).
		actx, cancel := context.WithDeadline(ctx, start.Add(timeout))
		parts, err := n.checkTopics(actx)
		cancel()
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
			check := "check {Brokers} and the network"
			if fielderr.Names(err, "Brokers") { // the cause already says so
				check = "check the network"
			}
			return 0, fielderr.Errorf("Kafka at %v did not answer within {StartupTimeout} %s (%d attempts): %w; "+check+", or raise {StartupTimeout}",
				n.cfg.Brokers, timeout, attempt+1, err)
		}
		if attempt == 0 {
			n.log.Info("serving /healthz, /readyz and /metrics while waiting for Kafka", "http", n.listener.Addr().String())
		}
		cause := err.Error()
		if n.cfg.FieldName != nil {
			cause = fielderr.Rename(err, n.cfg.FieldName)
		}
		waiting.reason.Store(fmt.Sprintf("waiting for Kafka at %v: %s", n.cfg.Brokers, cause))
		n.retries.Inc()
		d := min(startupBackoff.Delay(attempt), timeout-elapsed)
		n.log.Warn("Kafka is not reachable; retrying", "brokers", n.cfg.Brokers, "attempt", attempt+1,
			"retry_in", d.Round(time.Millisecond), "gives_up_in", (timeout - elapsed).Round(time.Second), "err", err)
		if err := backoff.Sleep(ctx, d); err != nil {
			return 0, fmt.Errorf("stopped while waiting for Kafka at %v: %w", n.cfg.Brokers, err)
		}
	}
}

// registerStartupMetrics registers the metrics that exist before Kafka
// answers: joiner_build_info (which binary this is, always 1) and
// joiner_startup_retries_total.
func (n *Node) registerStartupMetrics() {
	bi := buildinfo.Get()
	n.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "joiner_build_info",
		Help:        "Always 1; the labels say which joiner binary runs (joiner version).",
		ConstLabels: prometheus.Labels{"version": bi.Version, "revision": bi.Revision, "goversion": bi.GoVersion},
	}, func() float64 { return 1 }))
	n.retries = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "joiner_startup_retries_total",
		Help: "Attempts to reach Kafka at start that failed and were retried (--startup-timeout).",
	})
	n.reg.MustRegister(n.retries)
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
	w.reason.Store(fmt.Sprintf("connecting to Kafka at %v", n.cfg.Brokers))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(rw http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(rw, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(rw http.ResponseWriter, _ *http.Request) {
		http.Error(rw, w.reason.Load().(string), http.StatusServiceUnavailable)
	})
	// Prometheus sees the target up and counts the retries.
	mux.Handle("GET /metrics", promhttp.HandlerFor(n.reg, promhttp.HandlerOpts{}))
	w.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		_ = w.srv.Serve(w.l)
	}()
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
// (latest): a WARN when that is more than 0 records, else INFO. It only
// reads; a failure is a WARN.
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
	// A WARN only when the start replays or skips records: a new group on
	// topics that hold nothing yet (every `joiner demo`, a first
	// deployment) starts as expected, and says so at INFO.
	level := slog.LevelWarn
	if records == 0 {
		level = slog.LevelInfo
	}
	if n.cfg.StartOffset == "latest" {
		n.log.Log(ctx, level, "no committed offset: starting at the end of the notifications (--start-offset latest); the records already there get no alert",
			"group", n.cfg.Group, "topic", topic, "partitions_without_offset", uncommitted, "of", partitions, "records_skipped", records)
		return
	}
	n.log.Log(ctx, level, "no committed offset: replaying the notifications from the earliest offset (--start-offset earliest); each gets an alert",
		"group", n.cfg.Group, "topic", topic, "partitions_without_offset", uncommitted, "of", partitions, "records_to_replay", records)
}
