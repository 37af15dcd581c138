package integration

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/loadgen"
)

// TestIntegrationThroughput measures how fast worker processes drain a
// backlog: it produces the ticks and notifications first, then starts the
// workers and times them until every notification has an alert. It runs
// only with JOINER_BENCH=1 (scripts/bench-throughput), since -race and a
// shared CI machine make the figure meaningless there.
//
//	JOINER_BENCH_WORKERS (2), JOINER_BENCH_SYMBOLS (1000),
//	JOINER_BENCH_TICKS (10 per symbol), JOINER_BENCH_NOTIFICATIONS (100 per symbol)
func TestIntegrationThroughput(t *testing.T) {
	if os.Getenv("JOINER_BENCH") != "1" {
		t.Skip("set JOINER_BENCH=1 (or run scripts/bench-throughput) to measure throughput")
	}
	env := func(name string, def int) int {
		if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
			return v
		}
		return def
	}
	workers := env("JOINER_BENCH_WORKERS", 2)
	c := newCluster(t, partitions)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sum := c.produce(ctx, loadgen.Config{
		Symbols:                env("JOINER_BENCH_SYMBOLS", 1000),
		TicksPerSymbol:         env("JOINER_BENCH_TICKS", 10),
		NotificationsPerSymbol: env("JOINER_BENCH_NOTIFICATIONS", 100),
		RunID:                  "bench-",
	})
	t.Logf("backlog: %d ticks and %d notifications in %s", sum.Ticks, sum.Notifications, sum.Elapsed.Round(time.Millisecond))

	began := time.Now()
	var ws []*worker
	for i := range workers {
		ws = append(ws, c.start(fmt.Sprintf("w%d", i+1)))
	}
	st := c.waitStable(ws, 0, 2*time.Minute)
	ready := time.Since(began)
	c.waitAlerts(sum.NotificationIDs, 10*time.Minute)
	total := time.Since(began)
	drain := total - ready
	fmt.Printf("throughput: %d workers, %d partitions: %d notifications (and %d ticks restored) drained in %s after the group was stable and restored (%s); %.0f notifications/s, %.0f notifications/s from process start\n",
		workers, partitions, sum.Notifications, sum.Ticks, drain.Round(time.Millisecond), ready.Round(time.Millisecond),
		float64(sum.Notifications)/drain.Seconds(), float64(sum.Notifications)/total.Seconds())
	c.checkJoinCounts("throughput", c.waitStable(ws, st.gen-1, time.Minute))
	c.stopAll(ws)
}
