package main

import (
	"cmp"
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/joiner-dev/joiner/copartition"
	"github.com/joiner-dev/joiner/group"
	"github.com/joiner-dev/joiner/join"
	"github.com/joiner-dev/joiner/kafkasec"
	"github.com/joiner-dev/joiner/node"
	"github.com/joiner-dev/joiner/record"
	"github.com/joiner-dev/joiner/statestore"
)

// runWorker is `joiner run`: one worker of the consumer group.
func runWorker(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("run", "run [flags]", stdout, stderr)
	fs.env = true
	var (
		cfg                node.Config
		brokers, stateDirs string
		logFormat, logLvl  string
		httpCAFile         string
		guarantee          string
	)
	fs.StringVar(&brokers, "brokers", "localhost:9092", "Kafka bootstrap brokers, comma-separated")
	fs.StringVar(&cfg.Group, "group", "joiner", "consumer group id")
	fs.StringVar(&cfg.InstanceID, "instance-id", "", "stable member id, e.g. the pod name (default the hostname)")
	fs.StringVar(&cfg.Topics.Market, "market-topic", record.DefaultMarketTopic, "topic of price ticks")
	fs.StringVar(&cfg.Topics.Notifications, "notifications-topic", record.DefaultNotificationsTopic, "topic of notifications")
	fs.StringVar(&cfg.Topics.Alerts, "alerts-topic", record.DefaultAlertsTopic, "topic the enriched alerts are written to")
	fs.StringVar(&cfg.Topics.DeadLetter, "dead-letter-topic", record.DefaultDeadLetterTopic, "topic malformed records are routed to")
	fs.StringVar(&cfg.Fields.Symbol, "symbol-field", record.DefaultSymbolField, "name of the symbol member of ticks and notifications (the record key must equal its value)")
	fs.StringVar(&cfg.Fields.Price, "price-field", record.DefaultPriceField, "name of the price member of ticks")
	fs.StringVar(&stateDirs, "state-dir", "./state", "directories for the per-task stores, comma-separated")
	fs.StringVar(&cfg.Placement, "state-placement", "free-bytes", "where new task stores go among the state dirs: free-bytes or tasks")
	fs.Int64Var(&cfg.CacheBytes, "cache-bytes", 256<<20, "Pebble block cache shared by the task stores, bytes")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", ":8080", "listen address of /metrics, /healthz, /readyz and /v1/prices")
	fs.StringVar(&cfg.AdvertiseAddr, "advertise-addr", "", "host:port other workers use to reach this one (default hostname and the --http-addr port)")
	fs.BoolVar(&cfg.CreateTopics, "create-topics", false, "create missing topics with --partitions partitions")
	fs.IntVar(&cfg.Partitions, "partitions", 6, "partitions of topics created by --create-topics")
	fs.IntVar(&cfg.ReplicationFactor, "replication-factor", 1, "replication factor of topics created by --create-topics")
	fs.StringVar(&cfg.Assignor, "assignor", group.DefaultAssignor(), "leader's plan: "+group.AssignorList())
	fs.DurationVar(&cfg.SessionTimeout, "session-timeout", group.DefaultSessionTimeout, "group session timeout")
	fs.DurationVar(&cfg.RebalanceTimeout, "rebalance-timeout", group.DefaultRebalanceTimeout, "group rebalance timeout; also bounds a clean leave")
	fs.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", group.DefaultHeartbeatInterval, "group heartbeat interval")
	fs.BoolVar(&cfg.LeaveOnShutdown, "leave-on-shutdown", false, "leave the group on SIGTERM so its tasks move at once (scale-down); by default a stopped worker keeps its place until the session timeout")
	fs.IntVar(&cfg.StandbyReplicas, "standby-replicas", 0, "standby copies of each task's store kept on other workers, tailing the market, for fast failover")
	fs.Int64Var(&cfg.AcceptableRecoveryLag, "acceptable-recovery-lag", copartition.DefaultAcceptableRecoveryLag, "records a task's copy may be behind the market's end and still take the task over at once")
	fs.IntVar(&cfg.MaxWarmupReplicas, "max-warmup-replicas", copartition.DefaultMaxWarmupReplicas, "warm-up copies at once: a task balance would move to a worker without a caught-up copy stays put while one warms up there (0: move at once)")
	fs.DurationVar(&cfg.ProbingRebalanceInterval, "probing-rebalance-interval", group.DefaultProbingRebalanceInterval, "how often the leader replans while warm-ups run, to move tasks whose copy caught up")
	fs.DurationVar(&cfg.MaxTaskIdle, "max-task-idle", time.Second, "how often a notification waiting for the market to be read past its timestamp re-checks the market's end")
	fs.DurationVar(&cfg.Grace, "grace", 0, "how late a tick may be written and still join: a notification at T waits until the market is read past T + grace, or is at its end at least grace after T; about that much latency (0: none)")
	fs.DurationVar(&cfg.CommitInterval, "commit-interval", time.Second, "how often processed offsets are committed (under exactly-once: how often a transaction commits; default 100ms there)")
	addGuaranteeFlags(fs, &guarantee, &cfg.TransactionTimeout)
	fs.DurationVar(&cfg.StallTimeout, "stall-timeout", time.Minute, "a task with unprocessed notifications that acknowledges none for this long is stalled: logged at ERROR, joiner_task_stalled 1, /readyz 503 until it moves")
	fs.DurationVar(&cfg.HistoryRetention, "history-retention", time.Hour, "price history kept per task before its newest committed notification; older notifications join the oldest kept price (result late)")
	fs.Int64Var(&cfg.BulkRestoreMin, "bulk-restore-min", join.DefaultBulkRestoreMin, "a restore of at least this many market records is bulk-loaded: its ticks sorted in memory (about 40 bytes each, 1M at a time at most) and ingested into the store as tables; 0 or less: never")
	sec := kafkasec.AddFlags(fs.FlagSet)
	fs.StringVar(&cfg.PeerTokenFile, "peer-token-file", "", "file holding the bearer token required on /v1/* and sent to other workers (default no token)")
	fs.StringVar(&cfg.HTTPCertFile, "http-tls-cert-file", "", "PEM certificate to serve the HTTP listener over TLS; other workers are then reached over https")
	fs.StringVar(&cfg.HTTPKeyFile, "http-tls-key-file", "", "PEM private key of --http-tls-cert-file")
	fs.StringVar(&httpCAFile, "http-tls-ca-file", "", "PEM CA bundle that signs the workers' HTTP certificates (default --tls-ca-file, else the system roots)")
	fs.BoolVar(&cfg.Pprof, "pprof", false, "serve net/http/pprof under /debug/pprof/ on the --http-addr listener")
	fs.Int64Var(&cfg.MinFreeBytes, "state-min-free-bytes", statestore.DefaultMinFreeBytes, "free bytes a state dir needs before a task store opens or restores there; below it the task fails on this worker and moves to another (0: no check)")
	fs.DurationVar(&cfg.StoreOpenTimeout, "state-open-timeout", statestore.DefaultOpenTimeout, "how long a task store may take to open (replaying its WAL) before its task fails on this worker")
	fs.DurationVar(&cfg.CorruptRetention, "corrupt-retention", statestore.DefaultCorruptRetention, "how long moved-aside task stores (task-<p>.corrupt-*) are kept before they are deleted")
	fs.StringVar(&cfg.StartOffset, "start-offset", "earliest", "where a group with no committed offset starts on the notifications: earliest or latest")
	fs.DurationVar(&cfg.StartupTimeout, "startup-timeout", node.DefaultStartupTimeout, "how long to retry unreachable brokers at start before exiting 1")
	fs.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&logLvl, "log-level", "info", "log level: debug, info, warn or error")
	if _, status, ok := fs.parse(args); !ok {
		return status
	}
	log, err := fs.newLogger(stderr, logFormat, logLvl)
	if err != nil {
		return fs.fail(2, err)
	}
	if err := sec.Validate(); err != nil {
		return fs.fail(2, err)
	}
	cfg.Brokers = splitList(brokers)
	cfg.StateDirs = splitList(stateDirs)
	if err := applyGuarantee(fs, guarantee, &cfg); err != nil {
		return fs.fail(2, err)
	}
	if err := validateRun(fs.FlagSet, &cfg); err != nil {
		return fs.fail(2, err)
	}
	cfg.BulkRestoreMin = bulkRestoreMin(cfg.BulkRestoreMin)
	if cfg.MinFreeBytes == 0 {
		cfg.MinFreeBytes = -1 // the flag's 0 is no check, the Config's is the default
	}
	cfg.PartitionsExplicit = fs.given("partitions")
	cfg.ProcessMetrics = true
	cfg.Logger = log
	cfg.FieldName = fs.flagsOf // /readyz says --brokers, as the logs do
	cfg.PeerCAFile = cmp.Or(httpCAFile, sec.CAFile)

	if err := statestore.CheckDirs(cfg.StateDirs, cfg.Group); err != nil {
		return fs.fail(1, err) // at once, before Kafka: the worker could run no task
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tr, err := sec.ConnectOrWait(ctx, cfg.Brokers, log)
	if err != nil {
		return fs.fail(1, err)
	}
	cfg.Transport = tr
	n, err := node.New(ctx, cfg)
	if err != nil && ctx.Err() != nil {
		return fs.fail(0, err) // stopped by a signal while starting
	}
	if err != nil {
		return fs.fail(1, err)
	}
	defer boundShutdown(ctx, shutdownGrace(cfg.RebalanceTimeout), stderr, os.Exit)()
	if err := n.Run(ctx); err != nil {
		return fs.fail(1, err)
	}
	return 0
}

// bulkRestoreMin is node.Config.BulkRestoreMin for the value of
// --bulk-restore-min, whose 0 or less means never: -1, since the Config's
// 0 means the default.
func bulkRestoreMin(flag int64) int64 {
	if flag <= 0 {
		return -1
	}
	return flag
}
