package main

import (
	"io"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/node"
)

// --processing-guarantee exactly-once (or JOINER_PROCESSING_GUARANTEE)
// turns node.Config.ExactlyOnce on with a 100ms commit interval unless
// --commit-interval is given; at-least-once keeps the 1s default.
func TestProcessingGuaranteeFlags(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		env      string
		eos      bool
		interval time.Duration
		timeout  time.Duration
	}{
		{name: "default", interval: time.Second, timeout: 10 * time.Second},
		{name: "exactly-once", args: []string{"--processing-guarantee", "exactly-once"}, eos: true, interval: 100 * time.Millisecond, timeout: 10 * time.Second},
		{name: "exactly-once from env", env: "exactly-once", eos: true, interval: 100 * time.Millisecond, timeout: 10 * time.Second},
		{name: "exactly-once, interval given", args: []string{"--processing-guarantee", "exactly-once", "--commit-interval", "2s", "--transaction-timeout", "30s"}, eos: true, interval: 2 * time.Second, timeout: 30 * time.Second},
		{name: "at-least-once", args: []string{"--processing-guarantee", "at-least-once"}, interval: time.Second, timeout: 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("JOINER_PROCESSING_GUARANTEE", tc.env)
			}
			fs := newFlags("run", "run [flags]", io.Discard, io.Discard)
			fs.env = true
			var (
				cfg       node.Config
				guarantee string
			)
			fs.DurationVar(&cfg.CommitInterval, "commit-interval", time.Second, "")
			addGuaranteeFlags(fs, &guarantee, &cfg.TransactionTimeout)
			if _, _, ok := fs.parse(tc.args); !ok {
				t.Fatal("parse failed")
			}
			if err := applyGuarantee(fs, guarantee, &cfg); err != nil {
				t.Fatal(err)
			}
			if cfg.ExactlyOnce != tc.eos || cfg.CommitInterval != tc.interval || cfg.TransactionTimeout != tc.timeout {
				t.Errorf("exactly-once %v, commit interval %v, transaction timeout %v; want %v, %v, %v",
					cfg.ExactlyOnce, cfg.CommitInterval, cfg.TransactionTimeout, tc.eos, tc.interval, tc.timeout)
			}
		})
	}
}
