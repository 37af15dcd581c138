// Package group runs joiner's own consumer-group membership loop on top of
// kafka-go's Client: FindCoordinator, JoinGroup (with a group instance id),
// SyncGroup, Heartbeat, LeaveGroup, OffsetFetch and OffsetCommit.
//
// The elected leader plans the assignment with the Assignor named in
// Config.Assignor (copartition by default: every member that owns task p,
// a partition index, receives partition p of every configured topic).
// Members act only on the assignment carried by their own SyncGroup
// response, never on a plan they computed themselves. A new assignor is
// one file implementing Assignor plus one line in the registry
// (assignor.go).
//
// The package knows nothing about prices or Pebble.
package group

import (
	"context"
	"log/slog"
	"time"

	"github.com/joiner-dev/joiner/record"
	"github.com/segmentio/kafka-go"
)

// Config configures a Member. Zero durations take the defaults shown.
type Config struct {
	// Brokers are bootstrap addresses, host:port. Required unless Client is set.
	Brokers []string
	// Client, when set, is used for every request instead of one built from
	// Brokers. Its Timeout is not applied to JoinGroup and SyncGroup, which
	// the coordinator may hold for up to RebalanceTimeout; the member bounds
	// those itself.
	Client *kafka.Client

	// GroupID is the consumer group. Required.
	GroupID string
	// InstanceID is the stable identity of this member (a pod name). The
	// planner orders and compares members by it. Required.
	InstanceID string
	// QueryAddr is host:port of this member's HTTP listener, published to
	// the other members in the owner map.
	QueryAddr string

	// Topics names the co-partitioned input topics the member subscribes
	// to (Topics.Inputs(): the state topic Market, whose owners
	// Assignment.Owners tells, then Notifications); the output topics are
	// not the group's concern. Market and Notifications are required.
	Topics record.Topics

	// Assignor names the leader's plan, one of AssignorNames (see
	// Assignor). Default: DefaultAssignor(), AssignorCopartition.
	Assignor string

	// SessionTimeout. Default: 10s.
	SessionTimeout time.Duration
	// RebalanceTimeout bounds a rebalance and a clean leave. Default: 30s.
	RebalanceTimeout time.Duration
	// HeartbeatInterval. Default: 1s (and at most SessionTimeout/3).
	HeartbeatInterval time.Duration
	// MetadataCheckInterval is how often the planning leader compares the
	// topics' partition counts with the ones it planned for, and rejoins
	// to replan when they changed. Default: 10s.
	MetadataCheckInterval time.Duration

	// LeaveOnShutdown sends LeaveGroup when Run's context is cancelled,
	// so the group rebalances at once (scale-down). Default false: the
	// member stops as a static member (KIP-345, like Kafka's own clients
	// with a group.instance.id), its tasks wait for it until the session
	// timeout, and a restart within it rejoins without a rebalance.
	// RemoveMember removes a stopped member for good.
	LeaveOnShutdown bool

	// Handler receives assignment and rebalance events. Required.
	Handler Handler

	// Owned, when set, returns the tasks (partition indexes) for which this
	// member holds local state. Until the member has received its first
	// assignment (e.g. right after a restart) they are reported to the
	// leader as the tasks it owns, so stickiness survives restarts; after
	// that the tasks of the latest assignment are reported, flagged as
	// running (live), so that the leader withholds a task that moves until
	// this member has stopped it. After Handler.Lost the tasks of Owned
	// are reported again, not running. Optional; it is called from Run's
	// goroutine before each JoinGroup when no assignment is running.
	Owned func() []int

	// Standbys, AcceptableRecoveryLag and MaxWarmupReplicas are the
	// planning leader's high-availability rules, as in copartition.Options
	// (used by the copartition assignor; the others ignore them): every
	// task gets min(Standbys, members-1) standby copies, a copy at most
	// AcceptableRecoveryLag records behind the end of market-p is caught
	// up, and at most MaxWarmupReplicas warm-up copies exist at once. Zero
	// values turn each off (the CLI's defaults are
	// copartition.DefaultAcceptableRecoveryLag and
	// copartition.DefaultMaxWarmupReplicas).
	Standbys              int
	AcceptableRecoveryLag int64
	MaxWarmupReplicas     int
	// ProbingRebalanceInterval is how often the leader rejoins while its
	// plan has warm-ups, to move each task whose warm-up copy caught up.
	// Default: 10m.
	ProbingRebalanceInterval time.Duration

	// Held, when set, returns every task whose store this member holds
	// (active, standby, or left on disk) with the next offset of the
	// state topic's partition that the store lacks (its applied offset
	// + 1). It is reported to the leader in each subscription, which
	// computes each copy's lag from the partition's end offset. Optional;
	// called from Run's goroutine before each JoinGroup.
	Held func() map[int]int64
	// PartitionCounts, when set, returns the partition counts this
	// member's tasks were planned with so far (the current one included),
	// as its state dirs and the assignments it received tell. They are
	// reported to the leader in each subscription; the leader sends every
	// member the counts below its plan's that any member reported
	// (Assignment.PastPartitions), so a member on new state dirs learns
	// them. Optional; called from Run's goroutine before each JoinGroup.
	PartitionCounts func() []int

	// Logger. Default: slog.Default().
	Logger *slog.Logger
}

// Owner is the member assigned one partition of the state topic.
type Owner struct {
	InstanceID string
	Addr       string // its QueryAddr
}

// Assignment is what one member received for one generation.
type Assignment struct {
	Generation int32
	MemberID   string
	Leader     bool // this member computed the plan for this generation

	// Partitions is the partition count of every topic (they are equal).
	Partitions int
	// PastPartitions are the partition counts the group planned with
	// before Partitions, ascending, as the members reported them
	// (Config.PartitionCounts); empty when none did, or when the leader
	// is older than this field.
	PastPartitions []int
	// Topics maps each configured topic to the partitions of it assigned to
	// this member, ascending. With AssignorCopartition every topic has the
	// same list: this member's tasks.
	Topics map[string][]int
	// Standby are the tasks (partitions of Config.Topics.Market) this
	// member keeps a standby copy of, ascending: it tails each into the
	// task's store, never processes its notifications and never commits
	// its offsets. Warmup is the subset of Standby that are warm-ups: the
	// copies of tasks the plan will move here once they are caught up.
	Standby []int
	Warmup  []int
	// Owners[p] is the member assigned partition p of Config.Topics.Market (the state
	// topic); the zero Owner when nobody is.
	Owners []Owner
	// Moved is the number of tasks whose owner changed, as the leader's plan
	// reported it. For the non-sticky assignors the leader counts the
	// partitions of Config.Topics.Market whose owner differs from the one
	// reported in the subscriptions (a partition nobody reported counts as
	// moved). A task handed over cooperatively is counted once, in the
	// generation that gives it to its new owner (not in the one that
	// withholds it), so the sum over generations counts each move once.
	Moved int

	// Unpaired is set on the planning leader's assignment only: the
	// partition indexes of the larger topics that have no pair because the
	// topics' counts differ (the plan covers the indexes below the smaller
	// count).
	Unpaired int

	// Error is non-empty when the leader excluded this member (it starts
	// with ExcludedPrefix; see Assignment.Excluded) or when the leader could not plan (for instance the
	// topics are not co-partitioned; the text names each topic and its
	// count). Every member then receives no partitions.
	Error string
}

// Handler receives a member's events. Calls come from the membership
// goroutine, one at a time, in order.
//
// Rebalances are cooperative (KIP-429 style, two phases): a task that stays
// with a member keeps running through a rebalance, and a task that moves is
// first revoked from its old owner (absent from the old owner's next
// assignment, and given to nobody in it), then given to its new owner in a
// follow-up rebalance that the old owner starts at once. Two members never
// hold the same task in their assignments at once.
type Handler interface {
	// Assigned delivers the assignment of a new generation. The handler
	// starts the tasks that are new and keeps the others running
	// untouched. Tasks absent from a that the previous assignment had
	// were revoked: the handler stops them and commits their final
	// offsets (through Member.Commit: the new generation is valid) before
	// returning; the member then rejoins at once so that their new owners
	// get them. It should return promptly: heartbeats wait for it.
	Assigned(ctx context.Context, a Assignment)
	// Rebalancing is called when a rebalance starts and before the member
	// leaves, while the current generation can still commit: the handler
	// commits what it has processed (through Member.Commit); its tasks
	// keep running. The generation stays valid for Commit until the
	// member's JoinGroup is answered; commits after that return
	// ErrRebalancing until the next Assigned (not a failure: commit again
	// then). Lost may follow Rebalancing when the rejoin finds the
	// membership gone.
	Rebalancing(ctx context.Context)
	// Lost is called instead of Rebalancing (or after it, during the
	// rejoin) when the member learns that its membership was lost
	// (unknown member id, fenced instance id, illegal generation, or no
	// confirmation from the coordinator for a session timeout):
	// other members may hold its tasks already. The generation is dropped
	// before the call, so commits fail. The handler stops every task at
	// once, writes nothing more for them, and starts any task it is given
	// again from the group's committed offsets. err says why.
	Lost(ctx context.Context, err error)
}
