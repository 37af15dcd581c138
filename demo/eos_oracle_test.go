package demo_test

import (
	"context"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/testsupport/oracle"
)

// TestOracle runs every scenario again with exactly-once workers
// (node.Config.ExactlyOnce), as "exactly-once-<scenario>", the alerts read
// read_committed: under every disturbance, no notification is lost, no
// price is wrong and no alert is written twice. A crashed worker (cut off
// and cancelled without a commit) leaves its transaction open; its restart
// fences it and aborts it, and its tasks restart from the offsets the last
// committed transaction holds.

// settleCommitted reads the alerts once more a while after they were all
// read: an alert committed late (a transaction ending after the last one
// read) would be a duplicate.
func settleCommitted(ctx context.Context, t *testing.T, wl *oracle.Workload, r *oracle.AlertReader) oracle.Report {
	t.Helper()
	time.Sleep(500 * time.Millisecond)
	rep, err := wl.WaitComplete(ctx, r, wl.Produced(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}
