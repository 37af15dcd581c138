package group

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Defaults of the zero durations of Config.
const (
	DefaultSessionTimeout        = 10 * time.Second
	DefaultRebalanceTimeout      = 30 * time.Second
	DefaultHeartbeatInterval     = time.Second // and at most a third of the session timeout
	DefaultMetadataCheckInterval = 10 * time.Second
	// DefaultProbingRebalanceInterval is Config.ProbingRebalanceInterval's.
	DefaultProbingRebalanceInterval = 10 * time.Minute
)

// Validate reports the first problem with c, naming the Config field. Zero
// durations, an empty Assignor and a nil Logger are valid: they take their
// defaults (see withDefaults).
func (c Config) Validate() error {
	switch {
	case c.GroupID == "":
		return errors.New("group: Config.GroupID is required")
	case c.InstanceID == "":
		return errors.New("group: Config.InstanceID is required (static membership)")
	case len(c.InstanceID) > maxIDLen:
		return fmt.Errorf("group: Config.InstanceID is %d bytes, the limit is %d", len(c.InstanceID), maxIDLen)
	case len(c.QueryAddr) > maxAddrLen:
		return fmt.Errorf("group: Config.QueryAddr is %d bytes, the limit is %d", len(c.QueryAddr), maxAddrLen)
	case c.Topics.Market == "" || c.Topics.Notifications == "":
		return errors.New("group: Config.Topics.Market and Config.Topics.Notifications are required")
	case c.Handler == nil:
		return errors.New("group: Config.Handler is required")
	case c.Client == nil && len(c.Brokers) == 0:
		return errors.New("group: Config.Brokers or Config.Client is required")
	case c.SessionTimeout < 0 || c.RebalanceTimeout < 0 || c.HeartbeatInterval < 0 || c.MetadataCheckInterval < 0 ||
		c.ProbingRebalanceInterval < 0:
		return errors.New("group: negative timeout in Config")
	case c.Standbys < 0 || c.AcceptableRecoveryLag < 0 || c.MaxWarmupReplicas < 0:
		return errors.New("group: Config.Standbys, AcceptableRecoveryLag and MaxWarmupReplicas must not be negative")
	}
	if c.Topics.Market == c.Topics.Notifications {
		return fmt.Errorf("group: Config.Topics.Market and Config.Topics.Notifications are both %q", c.Topics.Market)
	}
	if _, err := LookupAssignor(c.Assignor); err != nil {
		return fmt.Errorf("group: Config.Assignor: %w", err)
	}
	if d := c.withDefaults(); d.HeartbeatInterval > d.SessionTimeout/3 {
		return fmt.Errorf("group: Config.HeartbeatInterval %v is more than a third of SessionTimeout %v",
			d.HeartbeatInterval, d.SessionTimeout)
	}
	return nil
}

// withDefaults returns c with its zero fields set to their defaults and its
// Topics copied. It is the one place the defaults are applied.
func (c Config) withDefaults() Config {
	if c.Assignor == "" {
		c.Assignor = DefaultAssignor()
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.RebalanceTimeout == 0 {
		c.RebalanceTimeout = DefaultRebalanceTimeout
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = min(DefaultHeartbeatInterval, c.SessionTimeout/3)
	}
	if c.MetadataCheckInterval == 0 {
		c.MetadataCheckInterval = DefaultMetadataCheckInterval
	}
	if c.ProbingRebalanceInterval == 0 {
		c.ProbingRebalanceInterval = DefaultProbingRebalanceInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}
