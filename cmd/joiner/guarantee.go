package main

import (
	"fmt"
	"time"

	"github.com/joiner-dev/joiner/join"
	"github.com/joiner-dev/joiner/node"
)

// The values of --processing-guarantee.
const (
	atLeastOnce = "at-least-once"
	exactlyOnce = "exactly-once"
)

// addGuaranteeFlags adds --processing-guarantee and --transaction-timeout
// (joiner run and joiner demo).
func addGuaranteeFlags(fs *cmdFlags, guarantee *string, timeout *time.Duration) {
	fs.StringVar(guarantee, "processing-guarantee", atLeastOnce, "at-least-once, or exactly-once: one Kafka transaction per commit holds the alerts, dead letters and offsets, inputs are read read_committed, and downstream consumers must read with isolation.level=read_committed")
	fs.DurationVar(timeout, "transaction-timeout", join.DefaultTransactionTimeout, "under exactly-once, how long a transaction may stay open before the coordinator aborts it")
}

// applyGuarantee sets cfg's guarantee from the flags: exactly-once, and
// then a 100ms commit interval unless --commit-interval was given.
func applyGuarantee(fs *cmdFlags, guarantee string, cfg *node.Config) error {
	if eos, err := parseGuarantee(guarantee); err != nil || !eos {
		return err
	}
	if cfg.TransactionTimeout <= 0 {
		return fmt.Errorf("--transaction-timeout %s: want a positive duration", cfg.TransactionTimeout)
	}
	cfg.ExactlyOnce = true
	if !fs.given("commit-interval") {
		cfg.CommitInterval = join.DefaultExactlyOnceCommitInterval
	}
	return nil
}

// parseGuarantee reads a --processing-guarantee value: whether it is
// exactly-once, or an error naming the values it takes.
func parseGuarantee(guarantee string) (exactly bool, err error) {
	switch guarantee {
	case atLeastOnce:
		return false, nil
	case exactlyOnce:
		return true, nil
	}
	return false, fmt.Errorf("--processing-guarantee %q: want %s or %s", guarantee, atLeastOnce, exactlyOnce)
}
