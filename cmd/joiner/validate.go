package main

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/joiner-dev/joiner/group"
	"github.com/joiner-dev/joiner/join"
	"github.com/joiner-dev/joiner/loadgen"
	"github.com/joiner-dev/joiner/node"
	"github.com/joiner-dev/joiner/statestore"
)

// usageError is a flag or environment value that is wrong: the command
// exits 2 without touching Kafka or the disk.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// checks collects the usage errors of one command's flags, in the order the
// checks run; check reports the first.
type checks struct {
	fs   *flag.FlagSet
	errs []string
}

func newChecks(fs *flag.FlagSet) *checks { return &checks{fs: fs} }

// source names a flag and the variable that can set it.
func (c *checks) source(name string) string { return "--" + name + " (" + envName(name) + ")" }

func (c *checks) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Sprintf(format, args...))
}

// nonEmpty: a string flag that must not be empty or blank.
func (c *checks) nonEmpty(name, value string) {
	if strings.TrimSpace(value) == "" {
		c.fail("%s must not be empty", c.source(name))
	}
}

// notGivenEmpty: a string flag whose default is computed when it is not
// given at all, but which must not be given as the empty string.
func (c *checks) notGivenEmpty(name, value string) {
	if flagGiven(c.fs, name) && strings.TrimSpace(value) == "" {
		c.fail("%s must not be empty (leave it out for the default)", c.source(name))
	}
}

func (c *checks) list(name string, items []string) {
	if len(items) == 0 {
		c.fail("%s must name at least one item", c.source(name))
	}
}

func (c *checks) positive(name string, v int64) {
	if v <= 0 {
		c.fail("%s must be positive, got %d", c.source(name), v)
	}
}

func (c *checks) nonNegative(name string, v int64) {
	if v < 0 {
		c.fail("%s must not be negative, got %d", c.source(name), v)
	}
}

func (c *checks) positiveDuration(name string, d time.Duration) {
	if d <= 0 {
		c.fail("%s must be a positive duration, got %s", c.source(name), d)
	}
}

func (c *checks) nonNegativeDuration(name string, d time.Duration) {
	if d < 0 {
		c.fail("%s must not be a negative duration, got %s", c.source(name), d)
	}
}

func (c *checks) oneOf(name, value string, allowed ...string) {
	for _, a := range allowed {
		if value == a {
			return
		}
	}
	c.fail("%s must be %s, got %q", c.source(name), orList(allowed), value)
}

func orList(s []string) string {
	switch len(s) {
	case 0:
		return ""
	case 1:
		return s[0]
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// err returns the first usage error, or nil.
func (c *checks) err() error {
	if len(c.errs) == 0 {
		return nil
	}
	return usageError{c.errs[0]}
}

// maxInstanceID is Kafka's limit on group.instance.id; maxAdvertiseAddr is
// group's on the address in the member's user data.
const (
	maxInstanceID    = 249
	maxAdvertiseAddr = 255
)

// validateRun checks `joiner run`'s flags after parsing: every wrong value
// is a usage error (exit 2), found before anything connects to Kafka.
func validateRun(fs *flag.FlagSet, cfg *node.Config) error {
	c := newChecks(fs)
	c.list("brokers", cfg.Brokers)
	c.nonEmpty("group", cfg.Group)
	c.notGivenEmpty("instance-id", cfg.InstanceID)
	if n := len(cfg.InstanceID); n > maxInstanceID {
		c.fail("--instance-id is %d characters; Kafka's limit on a group.instance.id is %d", n, maxInstanceID)
	}
	if n := len(cfg.AdvertiseAddr); n > maxAdvertiseAddr {
		c.fail("--advertise-addr is %d bytes; the limit is %d", n, maxAdvertiseAddr)
	}
	c.nonEmpty("market-topic", cfg.Topics.Market)
	c.nonEmpty("notifications-topic", cfg.Topics.Notifications)
	c.nonEmpty("alerts-topic", cfg.Topics.Alerts)
	c.nonEmpty("dead-letter-topic", cfg.Topics.DeadLetter)
	if cfg.Topics.Market != "" && cfg.Topics.Market == cfg.Topics.Notifications {
		c.fail("--market-topic and --notifications-topic must differ, both are %q", cfg.Topics.Market)
	}
	c.list("state-dir", cfg.Dirs)
	c.oneOf("state-placement", cfg.Placement, statestore.PlacementFreeBytes, statestore.PlacementTasks)
	c.nonNegative("cache-bytes", cfg.CacheBytes)
	c.nonNegative("memtable-budget-bytes", cfg.MemTableBudget)
	c.nonEmpty("http-addr", cfg.HTTPAddr)
	c.positive("partitions", int64(cfg.Partitions))
	c.positive("replication-factor", int64(cfg.ReplicationFactor))
	c.oneOf("assignor", cfg.Assignor, group.AssignorNames()...)
	c.positiveDuration("session-timeout", cfg.SessionTimeout)
	c.positiveDuration("rebalance-timeout", cfg.RebalanceTimeout)
	c.positiveDuration("heartbeat-interval", cfg.HeartbeatInterval)
	if cfg.HeartbeatInterval > 0 && cfg.SessionTimeout > 0 && cfg.HeartbeatInterval > cfg.SessionTimeout/3 {
		c.fail("--heartbeat-interval %s must be at most a third of --session-timeout %s", cfg.HeartbeatInterval, cfg.SessionTimeout)
	}
	c.nonNegative("standby-replicas", int64(cfg.Standbys))
	c.nonNegative("acceptable-recovery-lag", cfg.AcceptableRecoveryLag)
	c.nonNegative("max-warmup-replicas", int64(cfg.MaxWarmupReplicas))
	c.positiveDuration("probing-rebalance-interval", cfg.ProbingRebalanceInterval)
	c.positiveDuration("max-task-idle", cfg.MaxTaskIdle)
	c.nonNegativeDuration("grace", cfg.Grace)
	c.nonEmpty("symbol-field", cfg.Fields.Symbol)
	c.nonEmpty("price-field", cfg.Fields.Price)
	c.positiveDuration("commit-interval", cfg.CommitInterval)
	c.positiveDuration("stall-timeout", cfg.StallTimeout)
	c.positiveDuration("partition-check-interval", cfg.PartitionCheckInterval)
	c.positiveDuration("startup-timeout", cfg.StartupTimeout)
	c.positiveDuration("corrupt-retention", cfg.CorruptRetention)
	c.nonNegative("state-min-free-bytes", cfg.MinFreeBytes)
	c.positiveDuration("state-open-timeout", cfg.OpenTimeout)
	c.oneOf("start-offset", cfg.StartOffset, join.StartEarliest, join.StartLatest)
	return c.err()
}

// flagGiven reports whether the flag was set on the command line or by its
// JOINER_* variable (cmdFlags.parse sets those with fs.Set).
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			given = true
		}
	})
	return given
}

// validateLoadgen checks `joiner loadgen`'s flags besides the counts.
func validateLoadgen(fs *flag.FlagSet, cfg *loadgen.Config, brokers []string) error {
	c := newChecks(fs)
	c.list("brokers", brokers)
	c.nonEmpty("market-topic", cfg.MarketTopic)
	c.nonEmpty("notifications-topic", cfg.NotificationsTopic)
	c.positiveDuration("retry-timeout", cfg.RetryTimeout)
	c.nonNegative("abort-every", int64(cfg.AbortEvery))
	if cfg.AbortEvery > 0 && !cfg.Transactional {
		c.fail("%s needs --transactional", c.source("abort-every"))
	}
	c.nonEmpty("symbol-field", cfg.Fields.Symbol)
	c.nonEmpty("price-field", cfg.Fields.Price)
	c.nonNegativeDuration("out-of-order", cfg.OutOfOrder)
	return c.err()
}
