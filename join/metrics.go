package join

import (
	"strconv"

	"github.com/joiner-dev/joiner/record"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics are one worker's Prometheus metrics. Build them with NewMetrics
// on the worker's own registry; the in-process demo runs several workers,
// each with its own.
type Metrics struct {
	Joins            *prometheus.CounterVec // joiner_joins_total{result}
	Tasks            *prometheus.GaugeVec   // joiner_tasks{role}
	Rebalances       prometheus.Counter     // joiner_rebalances_total
	TasksMoved       prometheus.Counter     // joiner_tasks_moved_total
	RestoreRecords   *prometheus.CounterVec // joiner_restore_records_total{reason}
	RestoreSeconds   prometheus.Histogram   // joiner_restore_seconds
	TaskLag          *prometheus.GaugeVec   // joiner_task_lag_records{task}
	DeadLetters      *prometheus.CounterVec // joiner_dead_letters_total{reason}
	Alerts           prometheus.Counter     // joiner_alerts_total
	Records          *prometheus.CounterVec // joiner_records_total{topic}
	RemoteLookup     prometheus.Histogram   // joiner_remote_lookup_seconds
	RemoteLookupErrs prometheus.Counter     // joiner_remote_lookup_errors_total
	CommitErrors     prometheus.Counter     // joiner_commit_errors_total
	ProduceErrors    prometheus.Counter     // joiner_produce_errors_total
	FetchErrors      prometheus.Counter     // joiner_fetch_errors_total
	PruneSeconds     prometheus.Histogram   // joiner_prune_seconds
	TasksLost        prometheus.Counter     // joiner_tasks_lost_total
	RebalancePause   prometheus.Histogram   // joiner_rebalance_pause_seconds
	TasksRevoked     prometheus.Counter     // joiner_rebalance_tasks_revoked_total
	TasksAssigned    prometheus.Counter     // joiner_rebalance_tasks_assigned_total
	StandbyLag       *prometheus.GaugeVec   // joiner_standby_lag_records{task}
	Misrouted        prometheus.Counter     // joiner_notifications_misrouted_total
	TaskStalled      *prometheus.GaugeVec   // joiner_task_stalled{task}
	PartitionChanges prometheus.Counter     // joiner_partition_changes_total
	// PartitionsAhead: joiner_market_partitions_ahead (planconfirm.go).
	PartitionsAhead prometheus.Gauge
	// FieldConflicts: joiner_alert_field_conflicts_total{member}.
	FieldConflicts *prometheus.CounterVec
	TicksLate      prometheus.Counter // joiner_ticks_late_total

	// Dead letters the dead-letter topic could not take whole:
	// joiner_dead_letters_truncated_total{reason} and
	// joiner_dead_letters_dropped_total{reason}.
	DeadLettersTruncated *prometheus.CounterVec
	DeadLettersDropped   *prometheus.CounterVec
	// joiner_output_blocked
	OutputBlocked prometheus.Gauge
	// txn are the exactly-once metrics (txn.go).
	txn txnMetrics
}

// Reasons of joiner_restore_records_total: why market records were applied
// to a store other than by an active task's tail.
const (
	// ReasonMove: an active task restoring a store it did not hold as a
	// standby or warm-up (a new one, or one left on disk).
	ReasonMove = "move"
	// ReasonFailover: an active task restoring the tail after the copy it
	// held as a standby or warm-up.
	ReasonFailover = "failover"
	// ReasonStandby and ReasonWarmup: a standby or warm-up copy catching up
	// and tailing.
	ReasonStandby = "standby"
	ReasonWarmup  = "warmup"
)

// RestoreReasons lists every reason, for metrics and Stats.
var RestoreReasons = []string{ReasonMove, ReasonFailover, ReasonStandby, ReasonWarmup}

// NewMetrics registers the worker metrics on reg.
//
// It is table-like: one definition per metric, so it is the one function
// of join allowed over 100 lines (docs/architecture.md, "A metric").
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	m := &Metrics{
		Joins: f.NewCounterVec(prometheus.CounterOpts{
			Name: "joiner_joins_total",
			Help: "Joins of a notification with its price as of the notification's time, by result: local (own store), remote (looked up from the owner), late (older than the retained history: the oldest kept price), miss (no price then).",
		}, []string{"result"}),
		Tasks: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "joiner_tasks",
			Help: "Tasks held by this member, by role: active (assigned), restoring (assigned, state not yet restored), standby (standby copies, warm-ups included) and warmup (warm-up copies).",
		}, []string{"role"}),
		Rebalances: f.NewCounter(prometheus.CounterOpts{
			Name: "joiner_rebalances_total",
			Help: "Assignments (group generations) this member received.",
		}),
		TasksMoved: f.NewCounter(prometheus.CounterOpts{
			Name: "joiner_tasks_moved_total",
			Help: "Tasks that changed owner, as reported by the plans this member computed as group leader (sum over members for the group total).",
		}),
		RestoreRecords: f.NewCounterVec(prometheus.CounterOpts{
			Name: "joiner_restore_records_total",
			Help: "Market records applied to task stores other than by an active task's tail, by reason: move (an active task restoring a store it did not hold as a standby), failover (an active task restoring the tail after its standby or warm-up copy), standby and warmup (a standby or warm-up copy catching up and tailing).",
		}, []string{"reason"}),
		RestoreSeconds: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "joiner_restore_seconds",
			Help:    "Time to restore one task's state from the market topic.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
		TaskLag: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "joiner_task_lag_records",
			Help: "Notifications of a task not yet processed: the partition's end offset minus the next offset whose alert is not acknowledged, read every progress interval whether or not the task takes notifications.",
		}, []string{"task"}),
		DeadLetters: f.NewCounterVec(prometheus.CounterOpts{
			Name: "joiner_dead_letters_total",
			Help: "Malformed input records routed to the dead-letter topic, by reason.",
		}, []string{"reason"}),
		DeadLettersTruncated: f.NewCounterVec(prometheus.CounterOpts{
			Name: "joiner_dead_letters_truncated_total",
			Help: "Dead letters larger than the dead-letter topic's max.message.bytes, written truncated (their headers carry the original size and SHA-256), by reason; each is counted in joiner_dead_letters_total too.",
		}, []string{"reason"}),
		DeadLettersDropped: f.NewCounterVec(prometheus.CounterOpts{
			Name: "joiner_dead_letters_dropped_total",
			Help: "Dead letters the dead-letter topic refused even truncated, or refused as invalid records, and that were dropped (logged at ERROR), by reason; not counted in joiner_dead_letters_total.",
		}, []string{"reason"}),
		OutputBlocked: f.NewGauge(prometheus.GaugeOpts{
			Name: "joiner_output_blocked",
			Help: "1 while writes of alerts or dead letters fail with an error no retry fixes (authorization, a missing topic: see /readyz and the ERROR log); the tasks hold and retry meanwhile. Else 0.",
		}),
		Alerts: f.NewCounter(prometheus.CounterOpts{
			Name: "joiner_alerts_total",
			Help: "Enriched alerts acknowledged by the alerts topic.",
		}),
		Records: f.NewCounterVec(prometheus.CounterOpts{
			Name: "joiner_records_total",
			Help: "Input records consumed, by topic.",
		}, []string{"topic"}),
		RemoteLookup: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "joiner_remote_lookup_seconds",
			Help:    "Latency of price lookups from the owning member.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 9),
		}),
		RemoteLookupErrs: f.NewCounter(prometheus.CounterOpts{
			Name: "joiner_remote_lookup_errors_total",
			Help: "Remote price lookups that failed (the batch is retried; a failed lookup never becomes an alert).",
		}),
		CommitErrors: f.NewCounter(prometheus.CounterOpts{
			Name: "joiner_commit_errors_total",
			Help: "Offset commits that failed (retried on the next interval).",
		}),
		ProduceErrors: f.NewCounter(prometheus.CounterOpts{
			Name: "joiner_produce_errors_total",
			Help: "Failed writes of alerts or dead letters (the batch is retried).",
		}),
		FetchErrors: f.NewCounter(prometheus.CounterOpts{
			Name: "joiner_fetch_errors_total",
			Help: "Failed fetches or offset lookups (retried with backoff).",
		}),
		PruneSeconds: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "joiner_prune_seconds",
			Help:    "Time to prune one task's price history to the retention.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
		TasksLost: f.NewCounter(prometheus.CounterOpts{
			Name: "joiner_tasks_lost_total",
			Help: "Tasks stopped because this member's group membership was lost (they restart from the committed offsets if assigned again).",
		}),
		RebalancePause: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "joiner_rebalance_pause_seconds",
			Help:    "One observation per task a rebalance paused on this member (a task revoked, or changing role): from when it stopped taking batches to when its offsets were committed and its store closed or handed over. Tasks that stay observe nothing.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
		TasksRevoked: f.NewCounter(prometheus.CounterOpts{
			Name: "joiner_rebalance_tasks_revoked_total",
			Help: "Active tasks this member gave up in rebalances (sum over rebalances).",
		}),
		TasksAssigned: f.NewCounter(prometheus.CounterOpts{
			Name: "joiner_rebalance_tasks_assigned_total",
			Help: "Active tasks this member received in rebalances (sum over rebalances).",
		}),
		StandbyLag: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "joiner_standby_lag_records",
			Help: "Market records a standby or warm-up copy lacks: the market partition's end offset (the high watermark of its last fetch) minus the next offset its store lacks.",
		}, []string{"task"}),
		Misrouted: f.NewCounter(prometheus.CounterOpts{
			Name: "joiner_notifications_misrouted_total",
			Help: "Notifications joined that were not in their symbol's murmur2 partition (a producer with another partitioner, e.g. librdkafka's CRC32 default, or another key): each was joined exactly, with its symbol's price as of its time from the task that holds the symbol.",
		}),
		PartitionChanges: f.NewCounter(prometheus.CounterOpts{
			Name: "joiner_partition_changes_total",
			Help: "Changes of the input topics' partition count seen in this worker's plans: from then on a moved symbol's price is looked up in its new task and in the task that held it under each earlier count.",
		}),
		PartitionsAhead: f.NewGauge(prometheus.GaugeOpts{
			Name: "joiner_market_partitions_ahead",
			Help: "Partitions the market topic has beyond the group's plan, as this worker last confirmed them before a join: above 0, joins wait (for the replan when the notifications topic grew too, else until it does). 0 otherwise.",
		}),
		TaskStalled: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "joiner_task_stalled",
			Help: "1 while a task has unprocessed notifications (joiner_task_lag_records > 0) and has acknowledged none for Config.StallTimeout (--stall-timeout); /readyz fails meanwhile. 0 otherwise.",
		}, []string{"task"}),
		FieldConflicts: f.NewCounterVec(prometheus.CounterOpts{
			Name: "joiner_alert_field_conflicts_total",
			Help: "Members of notifications named like one of the members the join adds (member: its name), kept in their alerts under a renamed key (notification_ prefixed); counted when the alert is acknowledged.",
		}, []string{"member"}),
		TicksLate: f.NewCounter(prometheus.CounterOpts{
			Name: "joiner_ticks_late_total",
			Help: "Ticks applied to a task's store after a notification at or after their timestamp was already joined on the task (later than --grace): stored for later lookups; alerts already written are not corrected.",
		}),
	}
	// Pre-create the label values users alert on, so absent series do not
	// hide a problem.
	for _, r := range record.Results {
		m.Joins.WithLabelValues(string(r))
	}
	for _, r := range RestoreReasons {
		m.RestoreRecords.WithLabelValues(r)
	}
	for _, r := range []string{"active", "restoring", roleStandby, roleWarmup} {
		m.Tasks.WithLabelValues(r)
	}
	for _, name := range record.AlertMembers {
		m.FieldConflicts.WithLabelValues(name)
	}
	for _, r := range record.Reasons {
		m.DeadLetters.WithLabelValues(r)
		m.DeadLettersTruncated.WithLabelValues(r)
		m.DeadLettersDropped.WithLabelValues(r)
	}
	m.txn = newTxnMetrics(reg)
	return m
}

func taskLabel(p int) string { return strconv.Itoa(p) }
