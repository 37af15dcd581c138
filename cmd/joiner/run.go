package main

import (
	"cmp"
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/joiner-dev/joiner/copartition"
	"github.com/joiner-dev/joiner/group"
	"github.com/joiner-dev/joiner/internal/gctune"
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
	rf := addRunFlags(fs)
	cfg := &rf.cfg
	if _, status, ok := fs.parse(args); !ok {
		return status
	}
	log, err := fs.newLogger(stderr, rf.logFormat, rf.logLevel)
	if err != nil {
		return fs.fail(2, err)
	}
	if err := rf.sec.Validate(); err != nil {
		return fs.fail(2, err)
	}
	cfg.Brokers = splitList(rf.brokers)
	cfg.Dirs = splitList(rf.stateDirs)
	if err := applyGuarantee(fs, rf.guarantee, cfg); err != nil {
		return fs.fail(2, err)
	}
	if err := validateRun(fs.FlagSet, cfg); err != nil {
		return fs.fail(2, err)
	}
	cfg.BulkRestoreMin = bulkRestoreMin(cfg.BulkRestoreMin)
	cfg.MinFreeBytes = minFreeBytes(cfg.MinFreeBytes)
	cfg.PartitionsExplicit = fs.given("partitions")
	cfg.ProcessMetrics = true
	cfg.Logger = log
	cfg.FieldName = fs.flagsOf // /readyz says --brokers, as the logs do
	cfg.PeerCAFile = cmp.Or(rf.httpCAFile, rf.sec.CAFile)

	if err := statestore.CheckDirs(cfg.Dirs, cfg.Group); err != nil {
		return fs.fail(1, err) // at once, before Kafka: the worker could run no task
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tr, err := rf.sec.ConnectOrWait(ctx, cfg.Brokers, log)
	if err != nil {
		return fs.fail(1, err)
	}
	cfg.Transport = tr
	cfg.TuneGC = gctune.Applied() // main's target, not the user's GOGC
	n, err := node.New(ctx, *cfg)
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

// runFlags are the values of `joiner run`'s flags: the node's Config and
// what is turned into it after parsing.
type runFlags struct {
	cfg                 node.Config
	brokers, stateDirs  string
	logFormat, logLevel string
	httpCAFile          string
	sec                 *kafkasec.Config
	guarantee           string // --processing-guarantee (guarantee.go)
}

// addRunFlags defines the flags of `joiner run` on fs. Their defaults are
// the Configs' exported defaults, not restated values.
func addRunFlags(fs *cmdFlags) *runFlags {
	rf := &runFlags{}
	fs.StringVar(&rf.brokers, "brokers", "localhost:9092", "Kafka bootstrap brokers, comma-separated")
	fs.StringVar(&rf.cfg.Group, "group", node.DefaultGroup, "consumer group id")
	fs.StringVar(&rf.cfg.InstanceID, "instance-id", "", "stable member id, e.g. the pod name (default the hostname)")
	fs.StringVar(&rf.cfg.Topics.Market, "market-topic", record.DefaultMarketTopic, "topic of price ticks")
	fs.StringVar(&rf.cfg.Topics.Notifications, "notifications-topic", record.DefaultNotificationsTopic, "topic of notifications")
	fs.StringVar(&rf.cfg.Topics.Alerts, "alerts-topic", record.DefaultAlertsTopic, "topic the enriched alerts are written to")
	fs.StringVar(&rf.cfg.Topics.DeadLetter, "dead-letter-topic", record.DefaultDeadLetterTopic, "topic malformed records are routed to")
	fs.StringVar(&rf.cfg.Fields.Symbol, "symbol-field", record.DefaultSymbolField, "name of the symbol member of ticks and notifications (the record key must equal its value)")
	fs.StringVar(&rf.cfg.Fields.Price, "price-field", record.DefaultPriceField, "name of the price member of ticks")
	fs.StringVar(&rf.stateDirs, "state-dir", "./state", "directories for the per-task stores, comma-separated")
	fs.StringVar(&rf.cfg.Placement, "state-placement", statestore.DefaultPlacement, "where new task stores go among the state dirs: free-bytes or tasks")
	fs.Int64Var(&rf.cfg.CacheBytes, "cache-bytes", statestore.DefaultCacheBytes, "Pebble block cache shared by the task stores, bytes")
	fs.Int64Var(&rf.cfg.MemTableBudget, "memtable-budget-bytes", statestore.DefaultMemTableBudget, "memtables of the task stores together, bytes: each task's grows to this over the tasks held, between 64 KiB and 4 MiB")
	fs.StringVar(&rf.cfg.HTTPAddr, "http-addr", node.DefaultHTTPAddr, "listen address of /metrics, /healthz, /readyz and /v1/prices")
	fs.StringVar(&rf.cfg.AdvertiseAddr, "advertise-addr", "", "host:port other workers use to reach this one (default hostname and the --http-addr port)")
	fs.BoolVar(&rf.cfg.CreateTopics, "create-topics", false, "create missing topics with --partitions partitions")
	fs.IntVar(&rf.cfg.Partitions, "partitions", 6, "partitions of topics created by --create-topics")
	fs.IntVar(&rf.cfg.ReplicationFactor, "replication-factor", 1, "replication factor of topics created by --create-topics")
	fs.StringVar(&rf.cfg.Assignor, "assignor", group.DefaultAssignor(), "leader's plan: "+group.AssignorList())
	fs.DurationVar(&rf.cfg.SessionTimeout, "session-timeout", group.DefaultSessionTimeout, "group session timeout")
	fs.DurationVar(&rf.cfg.RebalanceTimeout, "rebalance-timeout", group.DefaultRebalanceTimeout, "group rebalance timeout; also bounds a clean leave")
	fs.DurationVar(&rf.cfg.HeartbeatInterval, "heartbeat-interval", group.DefaultHeartbeatInterval, "group heartbeat interval")
	fs.BoolVar(&rf.cfg.LeaveOnShutdown, "leave-on-shutdown", false, "leave the group on SIGTERM so its tasks move at once (scale-down); by default a stopped worker keeps its place until the session timeout")
	fs.IntVar(&rf.cfg.Standbys, "standby-replicas", 0, "standby copies of each task's store kept on other workers, tailing the market, for fast failover")
	fs.Int64Var(&rf.cfg.AcceptableRecoveryLag, "acceptable-recovery-lag", copartition.DefaultAcceptableRecoveryLag, "records a task's copy may be behind the market's end and still take the task over at once")
	fs.IntVar(&rf.cfg.MaxWarmupReplicas, "max-warmup-replicas", copartition.DefaultMaxWarmupReplicas, "warm-up copies at once: a task balance would move to a worker without a caught-up copy stays put while one warms up there (0: move at once)")
	fs.DurationVar(&rf.cfg.ProbingRebalanceInterval, "probing-rebalance-interval", group.DefaultProbingRebalanceInterval, "how often the leader replans while warm-ups run, to move tasks whose copy caught up")
	fs.DurationVar(&rf.cfg.MaxTaskIdle, "max-task-idle", join.DefaultMaxTaskIdle, "how often a notification waiting for the market to be read past its timestamp re-checks the market's end")
	fs.DurationVar(&rf.cfg.Grace, "grace", 0, "how late a tick may be written and still join: a notification at T waits until the market is read past T + grace, or is at its end at least grace after T; about that much latency (0: none)")
	fs.DurationVar(&rf.cfg.CommitInterval, "commit-interval", join.DefaultCommitInterval, "how often processed offsets are committed (under exactly-once: how often a transaction commits; default 100ms there)")
	addGuaranteeFlags(fs, &rf.guarantee, &rf.cfg.TransactionTimeout)
	fs.DurationVar(&rf.cfg.PartitionCheckInterval, "partition-check-interval", join.DefaultPartitionCheckInterval, "least time between two reads of the input topics' partition counts (uncached) that confirm the plan before notifications are joined: a live notification waits for the next one, about half of it on average under load")
	fs.DurationVar(&rf.cfg.StallTimeout, "stall-timeout", join.DefaultStallTimeout, "a task with unprocessed notifications that acknowledges none for this long is stalled: logged at ERROR, joiner_task_stalled 1, /readyz 503 until it moves")
	fs.DurationVar(&rf.cfg.HistoryRetention, "history-retention", join.DefaultHistoryRetention, "price history kept per task before its newest committed notification; older notifications join the oldest kept price (result late)")
	fs.Int64Var(&rf.cfg.BulkRestoreMin, "bulk-restore-min", join.DefaultBulkRestoreMin, "a restore of at least this many market records is bulk-loaded: its ticks sorted in memory (about 40 bytes each, 1M at a time at most) and ingested into the store as tables; 0 or less: never")
	rf.sec = kafkasec.AddFlags(fs.FlagSet)
	fs.StringVar(&rf.cfg.PeerTokenFile, "peer-token-file", "", "file holding the bearer token required on /v1/* and sent to other workers (default no token)")
	fs.StringVar(&rf.cfg.HTTPCertFile, "http-tls-cert-file", "", "PEM certificate to serve the HTTP listener over TLS; other workers are then reached over https")
	fs.StringVar(&rf.cfg.HTTPKeyFile, "http-tls-key-file", "", "PEM private key of --http-tls-cert-file")
	fs.StringVar(&rf.httpCAFile, "http-tls-ca-file", "", "PEM CA bundle that signs the workers' HTTP certificates (default --tls-ca-file, else the system roots)")
	fs.BoolVar(&rf.cfg.Pprof, "pprof", false, "serve net/http/pprof under /debug/pprof/ on the --http-addr listener")
	fs.Int64Var(&rf.cfg.MinFreeBytes, "state-min-free-bytes", statestore.DefaultMinFreeBytes, "free bytes a state dir needs before a task store opens or restores there; below it the task fails on this worker and moves to another (0: no check)")
	fs.DurationVar(&rf.cfg.OpenTimeout, "state-open-timeout", statestore.DefaultOpenTimeout, "how long a task store may take to open (replaying its WAL) before its task fails on this worker")
	fs.DurationVar(&rf.cfg.CorruptRetention, "corrupt-retention", statestore.DefaultCorruptRetention, "how long moved-aside task stores (task-<p>.corrupt-*) are kept before they are deleted")
	fs.StringVar(&rf.cfg.StartOffset, "start-offset", join.DefaultStartOffset, "where a group with no committed offset starts on the notifications: earliest or latest")
	fs.DurationVar(&rf.cfg.StartupTimeout, "startup-timeout", node.DefaultStartupTimeout, "how long to retry unreachable brokers at start before exiting 1")
	fs.StringVar(&rf.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&rf.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	return rf
}

// The flags' defaults are the Configs' (node.Default*, join.Default*, ...),
// so a flag's value is never 0 for "the default"; and in every Config a
// zero field means its default. The two flags whose 0 means "off" are
// translated to the Config's explicit "off" value here:

// bulkRestoreMin is join.Config.BulkRestoreMin for the value of
// --bulk-restore-min, whose 0 or less means never: join.BulkRestoreNever.
func bulkRestoreMin(flag int64) int64 {
	if flag <= 0 {
		return join.BulkRestoreNever
	}
	return flag
}

// minFreeBytes is statestore.Options.MinFreeBytes for the value of
// --state-min-free-bytes, whose 0 means no check: statestore.NoMinFreeBytes
// (a negative value, also no check, is passed on).
func minFreeBytes(flag int64) int64 {
	if flag == 0 {
		return statestore.NoMinFreeBytes
	}
	return flag
}
