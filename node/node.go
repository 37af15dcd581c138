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

	"github.com/joiner-dev/joiner/fetch"
	"github.com/joiner-dev/joiner/group"
	"github.com/joiner-dev/joiner/httpapi"
	"github.com/joiner-dev/joiner/internal/fielderr"
	"github.com/joiner-dev/joiner/internal/gctune"
	"github.com/joiner-dev/joiner/join"
	"github.com/joiner-dev/joiner/produce"
	"github.com/joiner-dev/joiner/record"
	"github.com/joiner-dev/joiner/statestore"
	"github.com/joiner-dev/joiner/statuspage"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/segmentio/kafka-go"
)

// The defaults of Config's own zero fields, applied by withDefaults; the
// embedded configs' defaults are their packages' (join.Default*,
// group.Default*, statestore.Default*).
const (
	DefaultGroup    = "joiner"
	DefaultHTTPAddr = ":8080"
)

// JoinConfig, MemberConfig and StoreOptions are the configs of the
// worker, its group member and its stores, embedded in Config under
// these names.
type (
	JoinConfig   = join.Config
	MemberConfig = group.Config
	StoreOptions = statestore.Options
)

// Config configures a node. Zero values take the defaults shown.
//
// The settings of the worker (join), its group member (group) and its
// stores (statestore) are their own Configs, embedded: their fields are
// Config's (cfg.MaxTaskIdle, cfg.SessionTimeout, cfg.Dirs, ...), with
// their packages' defaults and validation. The fields they share, and the
// wiring between them, are Config's own: Brokers, Group, InstanceID,
// Topics and Logger are given to each; New sets join's Client, Writer,
// Stores, MaxMessageBytes, HTTPClient and Registerer and group's Client,
// GroupID, QueryAddr, Handler, Owned and Held itself (what is given there
// is ignored).
type Config struct {
	// Brokers are bootstrap addresses. Required.
	Brokers []string
	// Group is the consumer group id. Default: DefaultGroup.
	Group string
	// InstanceID is the stable member identity. Default: the hostname.
	InstanceID string
	Topics     record.Topics

	// HTTPAddr is where /metrics, /healthz, /readyz and /v1/prices listen.
	// Default: DefaultHTTPAddr. Port 0 picks a free port.
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

	// JoinConfig is the worker's: Fields, Grace, MaxTaskIdle,
	// CommitInterval, StallTimeout, HistoryRetention, BulkRestoreMin,
	// StartOffset, ... (see join.Config).
	JoinConfig
	// MemberConfig is the group member's: Assignor, SessionTimeout,
	// RebalanceTimeout, HeartbeatInterval, LeaveOnShutdown (default
	// false: a static member's tasks wait for it until the session
	// timeout) and the leader's high-availability rules Standbys,
	// AcceptableRecoveryLag, MaxWarmupReplicas and
	// ProbingRebalanceInterval (see group.Config).
	MemberConfig
	// StoreOptions is the task stores' (<dir>/<group>/task-<p>): Dirs
	// (required), Placement, CacheBytes, CorruptRetention, MinFreeBytes,
	// OpenTimeout and FS, the filesystem tests inject faults with (see
	// statestore.Options).
	StoreOptions
	// ExactlyOnce turns on exactly-once processing (join.ExactlyOnce):
	// one transactional producer, with join.TransactionalID of Group and
	// InstanceID, and one transaction per commit holding the alerts, the
	// dead letters and the offsets; both inputs read read_committed. The
	// commit interval (JoinConfig.CommitInterval) then defaults to
	// join.DefaultExactlyOnceCommitInterval.
	ExactlyOnce bool
	// TuneGC moves the collector's target with the heap the task stores
	// hold (internal/gctune.Tune, statestore.Manager.HeldHeapBytes): set
	// it when the process's target is gctune's (GOGC not set). Default:
	// false, the target left alone.
	TuneGC bool
	// TransactionTimeout bounds an open transaction under ExactlyOnce
	// (the coordinator aborts one open longer). Default:
	// join.DefaultTransactionTimeout.
	TransactionTimeout time.Duration

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

// Validate reports the first problem of c's own fields: no Brokers, no
// Dirs. The embedded configs are validated by their packages when New
// builds the stores, the worker and the member.
func (c Config) Validate() error {
	if len(c.Brokers) == 0 {
		return fielderr.Errorf("no brokers given (set {Brokers})")
	}
	if len(c.Dirs) == 0 {
		return fielderr.Errorf("no state dir given (set {Dirs})")
	}
	return nil
}

// withDefaults returns c with its own zero fields set to their defaults
// and the shared ones (Group, InstanceID, Topics, Logger) given to the
// embedded configs: the one place node's defaults are applied.
func (c Config) withDefaults() (Config, error) {
	if c.Group == "" {
		c.Group = DefaultGroup
	}
	if c.InstanceID == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			return c, fielderr.Errorf("no instance id given and the hostname is unknown (%v): set {InstanceID}", err)
		}
		c.InstanceID = h
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = DefaultHTTPAddr
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Topics = c.Topics.WithDefaults()
	c.JoinConfig.InstanceID, c.JoinConfig.Topics, c.JoinConfig.Logger = c.InstanceID, c.Topics, c.Logger
	c.MemberConfig.GroupID, c.MemberConfig.InstanceID, c.MemberConfig.Topics, c.MemberConfig.Logger = c.Group, c.InstanceID, c.Topics, c.Logger
	c.StoreOptions.Group, c.StoreOptions.InstanceID = c.Group, c.InstanceID
	return c, nil
}

// Node is one running worker. Build it with New, run it with Run.
type Node struct {
	cfg    Config
	log    *slog.Logger
	client *kafka.Client
	// fetcher sends the tasks' fetches, one request per broker for all
	// of them (fetch.Mux).
	fetcher  *fetch.Mux
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
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg, err = cfg.withDefaults(); err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, log: cfg.Logger.With("instance", cfg.InstanceID)}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	// Every request of the node goes through one transport that bounds
	// how many are in flight, and so the node's connections
	// (transport.go).
	rt := newLimitTransport(cfg.Transport)
	n.client = &kafka.Client{Addr: kafka.TCP(cfg.Brokers...), Timeout: 30 * time.Second, Transport: rt}
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
	if limit, err := checkFileLimit(parts, nofile.get, nofile.set); err != nil {
		return nil, err
	} else if limit > 0 {
		n.log.Info("open-file limit", "limit", limit, "needed", filesNeeded(parts))
	}

	stores := cfg.StoreOptions
	stores.Logger = n.log
	if n.stores, err = statestore.Open(stores); err != nil {
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
	n.writer, err = produce.New(produce.Config{Addr: kafka.TCP(cfg.Brokers...), Transport: rt, TopicMaxBytes: maxBytes})
	if err != nil {
		return nil, err
	}
	if n.peer, err = newPeerAuth(cfg, n.reg); err != nil {
		return nil, err
	}
	checkMarketRetention(ctx, n.client, cfg.Topics.Market, n.historyRetention(), newRetentionGauge(n.reg), n.log)
	if cfg.ExactlyOnce {
		n.fetcher = fetch.NewCommittedMux(n.client) // both inputs read_committed (eos.go)
	} else {
		n.fetcher = fetch.NewMux(n.client)
	}
	eos, err := n.exactlyOnce(ctx, maxBytes) // eos.go
	if err != nil {
		return nil, err
	}
	jc := cfg.JoinConfig
	jc.Client, jc.Writer, jc.Stores, jc.MaxMessageBytes = eos.client, n.writer, n.stores, maxBytes
	jc.CommitInterval = eos.commitInterval
	jc.HTTPClient, jc.Registerer = n.peer.client(), n.reg
	if n.worker, err = join.NewProcessor(jc); err != nil {
		return nil, err
	}
	if err := eos.enable(n.worker); err != nil {
		return nil, err
	}
	n.status = n.newStatusPage()
	mc := cfg.MemberConfig
	mc.Client, mc.QueryAddr = n.client, n.addr
	mc.Handler, mc.Owned, mc.Held = n.worker, n.worker.Owned, n.worker.Held
	mc.PartitionCounts = n.worker.PlannedPartitions
	if n.member, err = group.New(mc); err != nil {
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
	if n.cfg.TuneGC {
		wg.Go(func() { gctune.Tune(sampleCtx, n.stores.HeldHeapBytes) })
	}
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
	if n.fetcher != nil {
		n.fetcher.Close()
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
