package join

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/joiner-dev/joiner/group"
	"github.com/joiner-dev/joiner/internal/lograte"
	"github.com/joiner-dev/joiner/record"
	"github.com/prometheus/client_golang/prometheus"
)

// taskEnv is what the Processor hands its tasks: the state tasks
// (restore*.go), the process tasks (process.go) and their merges
// (merge.go) use it, never the Processor. NewProcessor builds it once
// (the Processor embeds it, so its own methods reach the same parts).
//
// It holds the input edge (client and topics), the output edge (writer:
// writeOut and writeOutWith in output.go), the group's committed offsets
// (committedOffset in commit.go), the price lookups (lookup.go), the
// metrics, loggers and limits, and, for what one task needs of the
// others, peers.
//
// The output and the commit are the two seams of delivery: every alert
// and dead letter a task writes goes through writeOutWith (to writer),
// and every offset the group commits goes through
// Processor.commitLocked (to member).
type taskEnv struct {
	topics     record.Topics
	instanceID string
	// client reads the input topics.
	client Fetcher
	limits taskLimits
	// startOffset is Config.StartOffset: where a notifications partition
	// with no committed offset starts.
	startOffset string

	metrics *Metrics
	// offsetResets is joiner_offset_resets_total (input_offsetreset.go).
	offsetResets *prometheus.CounterVec
	log          *slog.Logger
	lateLog      *lograte.Limiter     // late ticks, per task
	dec          *record.Decoder      // of the input records
	alerts       *record.AlertEncoder // of this worker's alerts

	// member is the group (set by Processor.Run before any task starts):
	// committed offsets, and whether alerts may be written (waitActive).
	member Membership
	// eos is the exactly-once state (txn.go): writes and their acks
	// inside the open transaction.
	eos eosState

	// writer writes alerts and dead letters; maxBytes are the output
	// topics' max.message.bytes (Config.MaxMessageBytes).
	writer   Writer
	maxBytes map[string]int
	// outLog logs dead letters and output failures, one line per kind
	// per interval.
	outLog *lograte.Limiter
	// outBlocked counts the writes failing with an error no retry fixes,
	// and outFault is the latest such error (/readyz,
	// joiner_output_blocked); guarded by outMu.
	outMu      sync.Mutex
	outBlocked int
	outFault   string

	// peers answers what a task asks of the other tasks; remote asks
	// another member for a price.
	peers  peers
	remote *remoteClient
	// status records each task's last error (the status page).
	status *statusState
	// taskGauges refreshes joiner_tasks (a restore completed).
	taskGauges func()
	// restoredRecords counts the market records read by completed
	// restores of active tasks (Stats).
	restoredRecords atomic.Int64

	// load sizes the bulk loads of restores (tests make it small).
	load loadLimits
	// restoreBudget bounds the ticks the bulk restores of every task of
	// the worker hold at once (restore_budget.go).
	restoreBudget *tickBudget
}

// loadLimits size a restore's bulk load: chunks of at most maxTicks
// records, each read in up to streams ranges at once.
type loadLimits struct {
	maxTicks, streams int
}

// taskLimits are the limits of Config that the tasks follow (see Config
// for each).
type taskLimits struct {
	Grace            time.Duration
	MaxTaskIdle      time.Duration
	FetchMaxWait     time.Duration
	RemoteTimeout    time.Duration
	HistoryRetention time.Duration
	BulkRestoreMin   int64
	StallTimeout     time.Duration
}

// peers is what a task asks of the other tasks, on this member or on
// another: their state tasks here and their owners (for a price as of a
// time, lookup.go), and the partition counts a symbol's task depends on
// (repartition.go). The Processor answers from its assignment. (Only
// integers cross it: a lookup's alert passed through an interface would
// escape to the heap, one allocation per notification.)
type peers interface {
	// stateTask is the active state task of q on this member, nil when
	// none.
	stateTask(q int) *stateTask
	// owner is the member that owns q in the current assignment.
	owner(q int) (group.Owner, bool)
	mapping() (parts int, past []int)
	repartitioning(parts int) bool
	// planReady is nil when a notification of task p at offset off with
	// timestamp tsMs (the last of a batch) may be joined under a plan of
	// parts partitions (planconfirm.go).
	planReady(ctx context.Context, parts, p int, off, tsMs int64) error
}

// init sets e up as the environment of cfg's tasks (cfg has its
// defaults); peers, status and taskGauges are the Processor's to set.
func (e *taskEnv) init(cfg Config, log *slog.Logger, metrics *Metrics) {
	e.topics, e.instanceID, e.client, e.startOffset = cfg.Topics, cfg.InstanceID, cfg.Client, cfg.StartOffset
	e.limits = taskLimits{
		Grace:            cfg.Grace,
		MaxTaskIdle:      cfg.MaxTaskIdle,
		FetchMaxWait:     cfg.FetchMaxWait,
		RemoteTimeout:    cfg.RemoteTimeout,
		HistoryRetention: cfg.HistoryRetention,
		BulkRestoreMin:   cfg.BulkRestoreMin,
		StallTimeout:     cfg.StallTimeout,
	}
	e.metrics, e.log = metrics, log
	e.lateLog = lograte.New(log, lograte.DefaultInterval)
	e.outLog = lograte.New(log, lograte.DefaultInterval)
	e.dec = record.NewDecoder(cfg.Fields, cfg.MaxRecordBytes)
	e.alerts = record.NewAlertEncoder(cfg.InstanceID)
	e.writer, e.maxBytes = cfg.Writer, cfg.MaxMessageBytes
	e.load = loadLimits{maxTicks: restoreLoadMaxTicks, streams: restoreStreams}
	e.restoreBudget = newTickBudget(restoreBudgetTicks)
}

// noteTaskErr records err as task p's last error (on error paths only).
func (w *taskEnv) noteTaskErr(p int, err error) { w.status.noteErr(p, err) }

// pruneInterval is how often a task prunes its history: a sixtieth of the
// retention, between 1s and 1m.
func (w *taskEnv) pruneInterval() time.Duration {
	return min(max(w.limits.HistoryRetention/60, time.Second), time.Minute)
}
