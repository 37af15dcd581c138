// Package node assembles one joiner worker: the per-task stores, the join
// worker, the group member and the HTTP listener. `joiner run` runs one
// node per process; `joiner demo` and the tests run several in one.
package node

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/joiner-dev/joiner/group"
	"github.com/joiner-dev/joiner/httpapi"
	"github.com/joiner-dev/joiner/internal/fielderr"
	"github.com/joiner-dev/joiner/join"
	"github.com/joiner-dev/joiner/produce"
	"github.com/joiner-dev/joiner/record"
	"github.com/joiner-dev/joiner/statestore"
	"github.com/joiner-dev/joiner/statuspage"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/segmentio/kafka-go"
)

// Config configures a node. Zero values take the defaults shown.
type Config struct {
	// Brokers are bootstrap addresses. Required.
	Brokers []string
	// Group is the consumer group id. Default: joiner.
	Group string
	// InstanceID is the stable member identity. Default: the hostname.
	InstanceID string
	Topics     record.Topics

	// StateDirs hold the task stores (<dir>/<group>/task-<p>). Required.
	StateDirs []string
	// Placement of new task stores across StateDirs: "free-bytes" or
	// "tasks". Default: free-bytes.
	Placement string
	// CacheBytes is the block cache shared by the node's stores.
	// Default: 256 MiB.
	CacheBytes int64

	// HTTPAddr is where /metrics, /healthz, /readyz and /v1/prices listen.
	// Default: :8080. Port 0 picks a free port.
	HTTPAddr string
	// AdvertiseAddr is host:port other members use to reach this node's
	// HTTP listener. Default: the hostname (or 127.0.0.1 when HTTPAddr has
	// a loopback host) with the listener's port.
	AdvertiseAddr string

	// CreateTopics creates missing topics with Partitions partitions and
	// ReplicationFactor replicas. Default: off.
	CreateTopics      bool
	Partitions        int
	ReplicationFactor int
	// PartitionsExplicit says Partitions was given by the user: then
	// CreateTopics refuses to create a topic whose co-partitioned pair
	// exists with another count (ErrPartitionsConflict) instead of
	// following the pair's count with a WARN.
	PartitionsExplicit bool

	// StartupTimeout bounds how long New retries unreachable brokers
	// (capped, jittered backoff) before it fails. Default:
	// DefaultStartupTimeout.
	StartupTimeout time.Duration
	// StartOffset is where notifications partitions with no committed
	// offset start: "earliest" (default) or "latest".
	StartOffset string
	// CorruptRetention is how long moved-aside task stores are kept.
	// Default: statestore.DefaultCorruptRetention.
	CorruptRetention time.Duration
	// MinFreeBytes is the free space a state dir needs before a task
	// store opens there; below it the task fails here and is released.
	// Default: statestore.DefaultMinFreeBytes; negative: no check.
	MinFreeBytes int64
	// StoreOpenTimeout bounds the open of a task store (Pebble's WAL
	// replay); one that does not return in time fails the task here.
	// Default: statestore.DefaultOpenTimeout.
	StoreOpenTimeout time.Duration
	// StoreFS is the filesystem of the task stores. Default: the OS's.
	// Tests inject faults with it.
	StoreFS vfs.FS

	Assignor          string
	SessionTimeout    time.Duration
	RebalanceTimeout  time.Duration
	HeartbeatInterval time.Duration
	// LeaveOnShutdown leaves the group when Run stops (scale-down);
	// default false: a static member's tasks wait for it until the
	// session timeout (see group.Config.LeaveOnShutdown).
	LeaveOnShutdown bool
	// StandbyReplicas, AcceptableRecoveryLag, MaxWarmupReplicas and
	// ProbingRebalanceInterval are the leader's high-availability rules
	// (see group.Config); zero values turn each off (the interval
	// defaults to 10m).
	StandbyReplicas          int
	AcceptableRecoveryLag    int64
	MaxWarmupReplicas        int
	ProbingRebalanceInterval time.Duration
	MaxTaskIdle              time.Duration
	// CommitInterval is how often offsets are committed (under
	// exactly-once: how often a transaction commits). Default: 1s, 100ms
	// with ExactlyOnce.
	CommitInterval time.Duration
	// ExactlyOnce turns on exactly-once processing (join.ExactlyOnce):
	// one transactional producer, with join.TransactionalID of Group and
	// InstanceID, and one transaction per commit holding the alerts, the
	// dead letters and the offsets; both inputs read read_committed.
	ExactlyOnce bool
	// TransactionTimeout bounds an open transaction (the coordinator
	// aborts one open longer). Default: 10s.
	TransactionTimeout time.Duration
	// StallTimeout: see join.Config.StallTimeout. Default: 1m.
	StallTimeout time.Duration
	// Fields and Grace: see join.Config.Fields and join.Config.Grace.
	Fields record.Fields
	Grace  time.Duration
	// HistoryRetention: see join.Config.HistoryRetention. Default: 1h.
	HistoryRetention time.Duration
	// BulkRestoreMin: see join.Config.BulkRestoreMin. Default:
	// join.DefaultBulkRestoreMin; negative: never.
	BulkRestoreMin int64

	// Transport carries every Kafka request of the node: the group
	// client, the fetchers, the producer and the admin calls. Give it the
	// TLS and SASL settings (kafkasec). Default: kafka-go's default
	// transport.
	Transport kafka.RoundTripper

	// PeerTokenFile holds a bearer token that every request to the HTTP
	// API needs except /metrics, /healthz and /readyz, and that the node
	// sends on its price lookups to other members. Default: no token.
	PeerTokenFile string
	// HTTPCertFile and HTTPKeyFile serve the HTTP API over TLS; the node
	// then reaches other members over https, verifying their
	// certificates against PeerCAFile (default: the system roots).
	HTTPCertFile, HTTPKeyFile string
	PeerCAFile                string
	// Pprof mounts net/http/pprof under /debug/pprof/ on the HTTP
	// listener. Default: off.
	Pprof bool

	// ProcessMetrics adds the Go and process collectors to the registry.
	// The demo turns it off since its nodes share one process.
	ProcessMetrics bool

	Logger *slog.Logger
	// FieldName names the Config fields that errors name
	// (internal/fielderr) in what the node serves, /readyz's reason while
	// it waits for Kafka: the CLI gives its flag names. Default: the
	// fields' own names.
	FieldName func(field string) string
}

// Node is one running worker. Build it with New, run it with Run.
type Node struct {
	cfg      Config
	log      *slog.Logger
	client   *kafka.Client
	writer   *produce.Producer
	stores   *statestore.Manager
	worker   *join.Processor
	member   *group.Member
	listener net.Listener
	addr     string
	reg      *prometheus.Registry
	retries  prometheus.Counter // joiner_startup_retries_total
	peer     *peerAuth
	status   *statuspage.Server
}

// New checks the topics, opens the stores and the HTTP listener, and
// builds the worker and its group member. It refuses topics that are not
// co-partitioned. Call Run, or Close when not running it.
func New(ctx context.Context, cfg Config) (_ *Node, err error) {
	if len(cfg.Brokers) == 0 {
		return nil, fielderr.Errorf("no brokers given (set {Brokers})")
	}
	if len(cfg.StateDirs) == 0 {
		return nil, fielderr.Errorf("no state dir given (set {StateDirs})")
	}
	if cfg.Group == "" {
		cfg.Group = "joiner"
	}
	if cfg.InstanceID == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			return nil, fielderr.Errorf("no instance id given and the hostname is unknown (%v): set {InstanceID}", err)
		}
		cfg.InstanceID = h
	}
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = ":8080"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Topics = cfg.Topics.WithDefaults()
	n := &Node{cfg: cfg, log: cfg.Logger.With("instance", cfg.InstanceID)}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	n.client = &kafka.Client{Addr: kafka.TCP(cfg.Brokers...), Timeout: 30 * time.Second, Transport: cfg.Transport}
	// The registry comes first: /metrics answers while bootstrap waits.
	n.reg = prometheus.NewRegistry()
	if cfg.ProcessMetrics {
		n.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	n.registerStartupMetrics()
	parts, err := n.bootstrap(ctx)
	if err != nil {
		return nil, err
	}
	n.log.Info("topics are co-partitioned", "market", cfg.Topics.Market, "notifications", cfg.Topics.Notifications, "partitions", parts)
	n.logReplay(ctx, parts)

	n.stores, err = statestore.Open(statestore.Options{
		Dirs:       cfg.StateDirs,
		Group:      cfg.Group,
		CacheBytes: cfg.CacheBytes,
		Placement:  cfg.Placement,
		Logger:     n.log,

		InstanceID:       cfg.InstanceID,
		CorruptRetention: cfg.CorruptRetention,
		MinFreeBytes:     cfg.MinFreeBytes,
		OpenTimeout:      cfg.StoreOpenTimeout,
		FS:               cfg.StoreFS,
	})
	if err != nil {
		return nil, err
	}
	if n.listener == nil { // bootstrap opens it when it has to wait
		n.listener, err = net.Listen("tcp", cfg.HTTPAddr)
		if err != nil {
			return nil, fielderr.Errorf("listening on %s: %w (set {HTTPAddr})", cfg.HTTPAddr, err)
		}
	}
	n.addr = cfg.AdvertiseAddr
	if n.addr == "" {
		n.addr = advertise(n.listener.Addr().(*net.TCPAddr))
	}
	// Alerts and dead letters go through produce.Producer: one Produce
	// request per partition of each write, no per-message metadata look-up
	// and no batch timer (kafka.Writer spent 21% of the CPU on them).
	// Each output topic's max.message.bytes bounds the producer's batches
	// and is what alerts and dead letters are checked against.
	maxBytes := OutputMaxBytes(ctx, n.client, cfg.Topics, n.log)
	n.log.Info("output topics' max.message.bytes", "limits", maxBytes)
	n.writer, err = produce.New(produce.Config{Addr: kafka.TCP(cfg.Brokers...), Transport: cfg.Transport, TopicMaxBytes: maxBytes})
	if err != nil {
		return nil, err
	}
	if n.peer, err = newPeerAuth(cfg, n.reg); err != nil {
		return nil, err
	}
	checkMarketRetention(ctx, n.client, cfg.Topics.Market, n.historyRetention(), newRetentionGauge(n.reg), n.log)
	eos, err := n.exactlyOnce(ctx, maxBytes) // eos.go
	if err != nil {
		return nil, err
	}
	n.worker, err = join.NewProcessor(join.Config{
		Client:           eos.client,
		Writer:           n.writer,
		Stores:           n.stores,
		InstanceID:       cfg.InstanceID,
		Topics:           cfg.Topics,
		Fields:           cfg.Fields,
		Grace:            cfg.Grace,
		MaxTaskIdle:      cfg.MaxTaskIdle,
		CommitInterval:   eos.commitInterval,
		StallTimeout:     cfg.StallTimeout,
		HistoryRetention: cfg.HistoryRetention,
		BulkRestoreMin:   cfg.BulkRestoreMin,
		MaxMessageBytes:  maxBytes,
		HTTPClient:       n.peer.client(),
		StartOffset:      cfg.StartOffset,
		Registerer:       n.reg,
		Logger:           cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	if err := eos.enable(n.worker); err != nil {
		return nil, err
	}
	n.status = n.newStatusPage()
	n.member, err = group.New(group.Config{
		Client:                   n.client,
		GroupID:                  cfg.Group,
		InstanceID:               cfg.InstanceID,
		QueryAddr:                n.addr,
		Topics:                   cfg.Topics,
		Assignor:                 cfg.Assignor,
		SessionTimeout:           cfg.SessionTimeout,
		RebalanceTimeout:         cfg.RebalanceTimeout,
		HeartbeatInterval:        cfg.HeartbeatInterval,
		LeaveOnShutdown:          cfg.LeaveOnShutdown,
		Standbys:                 cfg.StandbyReplicas,
		AcceptableRecoveryLag:    cfg.AcceptableRecoveryLag,
		MaxWarmupReplicas:        cfg.MaxWarmupReplicas,
		ProbingRebalanceInterval: cfg.ProbingRebalanceInterval,
		Handler:                  n.worker,
		Owned:                    n.worker.Owned,
		Held:                     n.worker.Held,
		Logger:                   cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	return n, nil
}

func advertise(a *net.TCPAddr) string {
	port := strconv.Itoa(a.Port)
	if a.IP.IsLoopback() {
		return net.JoinHostPort(a.IP.String(), port)
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		return net.JoinHostPort(h, port)
	}
	return net.JoinHostPort("127.0.0.1", port)
}

// historyRetention is Config.HistoryRetention with join's default.
func (n *Node) historyRetention() time.Duration {
	if n.cfg.HistoryRetention > 0 {
		return n.cfg.HistoryRetention
	}
	return time.Hour
}

// Addr is the advertised host:port of the HTTP listener.
func (n *Node) Addr() string { return n.addr }

// Processor is the node's join worker.
func (n *Node) Processor() *join.Processor { return n.worker }

// InstanceID is the node's member identity.
func (n *Node) InstanceID() string { return n.cfg.InstanceID }

// Run serves HTTP and runs the worker until ctx is done, then leaves the
// group, stops the tasks and closes everything. It owns every goroutine it
// starts and waits for them. A task store open that never returned (a
// full or failing disk) makes it return statestore.ErrOpenStuck: the
// process should exit 1.
func (n *Node) Run(ctx context.Context) (err error) {
	defer func() {
		if cerr := n.close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	api := withStatusPage(withPprof(httpapi.Handler(n.worker, n.reg), n.cfg.Pprof), n.status)
	srv := &http.Server{Handler: n.peer.handler(api), ReadHeaderTimeout: 10 * time.Second, TLSConfig: n.peer.serverTLS}
	httpTLS := srv.TLSConfig != nil // Serve changes srv.TLSConfig: read it only here
	serve := srv.Serve
	if httpTLS {
		serve = func(l net.Listener) error { return srv.ServeTLS(l, "", "") }
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := serve(n.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("HTTP server stopped", "err", err)
		}
	}()
	sampleCtx, stopSampling := context.WithCancel(ctx)
	wg.Go(func() { n.status.Run(sampleCtx) })
	n.log.Info("worker started", "http", n.listener.Addr().String(), "advertise", n.addr, "group", n.cfg.Group,
		"http_tls", httpTLS, "peer_token", n.peer.token != nil, "status_page", n.StatusURL())
	err = n.worker.Run(ctx, n.member)
	stopSampling()
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	wg.Wait()
	n.log.Info("worker stopped")
	return err
}

// Close releases what New opened. Run calls it.
func (n *Node) Close() {
	if err := n.close(); err != nil {
		n.log.Error("closing the node", "err", err)
	}
}

// close releases what New opened. It returns the stores' error when a
// task store open never returned (statestore.ErrOpenStuck); other close
// errors are logged.
func (n *Node) close() error {
	if n.listener != nil {
		_ = n.listener.Close()
	}
	if n.writer != nil {
		_ = n.writer.Close()
	}
	if n.stores != nil {
		err := n.stores.Close()
		if errors.Is(err, statestore.ErrOpenStuck) {
			return err
		}
		if err != nil && !errors.Is(err, statestore.ErrClosed) {
			n.log.Warn("closing stores", "err", err)
		}
	}
	return nil
}
