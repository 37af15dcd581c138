package integration

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/record"
	"github.com/joiner-dev/joiner/testsupport/oracle"
	"github.com/segmentio/kafka-go"
)

// The oracle scenarios run `joiner run` processes on the real broker while
// testsupport/oracle produces ticks and notifications interleaved in time,
// disturb them while the load flows, and check every alert against the
// input: each notification has an alert with its symbol's price as of its
// own time (or miss when there was none), and a duplicate is identical to
// its first copy but for the worker.

// oracleLoad is 20 s of load: 200 rounds of 100 ms, each with 10 ticks and
// 30 notifications (300 notifications/s).
var oracleLoad = oracle.Config{Rounds: 200, TicksPerRound: 10, NotificationsPerRound: 30, RoundInterval: 100 * time.Millisecond,
	Symbols: 60, LateSymbols: 10, NoTickSymbols: 10}

type oracleScenario struct {
	workers []string
	args    []string
	// disturb runs while the load flows; at(f) waits until a share f of the
	// rounds was produced. It returns the workers running at the end.
	disturb func(c *cluster, ws map[string]*worker, at func(float64))
	// maxDuplicates bounds the duplicates (-1: no bound).
	maxDuplicates int
	// bulkRestore makes every restore bulk-load the store
	// (--bulk-restore-min 1), and checks that some did.
	bulkRestore bool
	// load replaces oracleLoad when set.
	load *oracle.Config
	// completeWithin, when set, bounds the time from the end of the load
	// to the last alert.
	completeWithin time.Duration
	// after runs once every alert was checked, with the running workers.
	after func(c *cluster, ws map[string]*worker, wl *oracle.Workload)
	// userRecords produces the user's own records (every notification
	// shape, headers, the symbol and price members renamed, ticks up to
	// 400 ms out of timestamp order) to workers with this grace: with a
	// grace, no price may be wrong (but where the producer fell behind by
	// more than it); without one, late ticks must be counted.
	userRecords bool
	grace       time.Duration
	// exactlyOnce runs the workers with --processing-guarantee
	// exactly-once and reads the alerts read_committed (eos_test.go).
	exactlyOnce bool
}

// userFields are the member names of the userRecords scenarios.
var userFields = record.Fields{Symbol: "ticker", Price: "last"}

func runOracle(t *testing.T, sc oracleScenario) {
	c := newCluster(t, partitions)
	if sc.exactlyOnce {
		c.net.runFlags = append(c.net.runFlags, exactlyOnceFlags...)
	}
	c.net.runFlags = append(c.net.runFlags, sc.args...) // (after: a flag given again wins)
	load := oracleLoad
	if sc.load != nil {
		load = *sc.load
	}
	if sc.userRecords {
		c.net.runFlags = append(c.net.runFlags, "--symbol-field", userFields.Symbol, "--price-field", userFields.Price, "--grace", sc.grace.String())
		load.Fields, load.Shapes, load.Headers, load.OutOfOrder = userFields, true, true, 400*time.Millisecond
	}
	if sc.bulkRestore {
		c.net.runFlags = append(c.net.runFlags, "--bulk-restore-min", "1")
	}
	ws := map[string]*worker{}
	var list []*worker
	for _, id := range sc.workers {
		ws[id] = c.start(id)
		list = append(list, ws[id])
	}
	if sc.args == nil {
		c.waitStable(list, 0, 60*time.Second)
	} else {
		waitReady(t, list, 60*time.Second)
	}

	p := oracle.NewProducer(brokers, nil, oracle.Topics{Market: c.market, Notifications: c.notifs, Alerts: c.alertsT}, load)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	produced := make(chan error, 1)
	go func() { produced <- p.Run(ctx) }()
	if sc.disturb != nil {
		sc.disturb(c, ws, func(share float64) {
			for float64(p.Rounds()) < share*float64(load.Rounds) {
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	wl := p.Workload()
	loaded := time.Now()
	reader := oracle.NewAlertReader(c.client, c.alertsT, partitions)
	if sc.exactlyOnce {
		reader.ReadCommitted()
		defer reader.Close()
	}
	rep, err := wl.WaitComplete(ctx, reader, wl.Produced(), 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if sc.exactlyOnce {
		rep = settleCommitted(ctx, t, c, wl, reader, rep)
		if err := reader.CrossCheck(ctx); err != nil {
			t.Error(err)
		}
	}
	if d := time.Since(loaded); sc.completeWithin > 0 && d > sc.completeWithin {
		t.Errorf("the last alert came %v after the load ended, want within %v", d, sc.completeWithin)
	}
	_, ticks, exact := wl.Counts()
	t.Logf("oracle %s: %v (ticks=%d, notifications at a tick's exact time=%d)", t.Name(), rep, ticks, exact)
	wrong := rep.Wrong
	if sc.userRecords {
		late := int64(0)
		for _, w := range ws {
			if v, err := w.view(); err == nil {
				late += v.TicksLate
			}
		}
		behind := 0
		for _, id := range rep.WrongIDs {
			if wl.AckedAfter(id, sc.grace) {
				behind++
			}
		}
		t.Logf("grace %s: %d wrong, %d late ticks counted, the longest a tick was written after its time %s", sc.grace, rep.Wrong, late, wl.MaxTickDelay())
		switch {
		case sc.grace == 0 && late == 0:
			t.Errorf("without a grace, no late tick was counted (%d wrong prices)", rep.Wrong)
		case sc.grace == 0:
			wrong = 0 // expected: the ticks were later than no grace
		case behind > 0:
			t.Logf("%d wrong alerts had a tick the producer wrote more than the grace after the notification's time (a loaded machine)", behind)
			wrong -= behind
		}
	}
	if rep.Lost != 0 || wrong != 0 || rep.Mismatched != 0 || rep.DuplicatesDiffering != 0 {
		t.Errorf("oracle: %v; examples: %q", rep, rep.Examples)
	}
	if rep.Results["miss"] == 0 || rep.Results["miss"] == rep.Notifications {
		t.Errorf("the workload must mix priced and unpriced notifications: %v", rep)
	}
	if sc.maxDuplicates >= 0 && rep.Duplicates > sc.maxDuplicates {
		t.Errorf("oracle: %d duplicates, want at most %d", rep.Duplicates, sc.maxDuplicates)
	}
	if sc.after != nil {
		sc.after(c, ws, wl)
	}
	if sc.bulkRestore {
		// JSON or text logs.
		if n := c.countLogLines("restore complete", `"bulk":true`) + c.countLogLines("restore complete", "bulk=true"); n == 0 {
			t.Errorf("no worker logged a bulk-loaded restore (\"restore complete\" with bulk true)")
		} else {
			t.Logf("%d restores were bulk-loaded", n)
		}
	}
}

// waitReady waits until the workers agree on a generation and are ready,
// for assignors whose plans waitStable does not describe.
func waitReady(t *testing.T, ws []*worker, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		gens := map[int32]bool{}
		ready := true
		for _, w := range ws {
			v, err := w.view()
			if err != nil || !v.Ready {
				ready = false
				break
			}
			gens[v.Generation] = true
		}
		if ready && len(gens) == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("workers %v not ready on one generation within %s", ids(ws), timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The user's own records (see oracleScenario.userRecords) with --grace
// 500ms, merged and with every join remote (roundrobin), and without a
// grace.
func TestIntegrationOracleUserRecordsGrace(t *testing.T) {
	runOracle(t, oracleScenario{workers: []string{"w1", "w2", "w3"}, maxDuplicates: 0, userRecords: true, grace: 500 * time.Millisecond})
}

func TestIntegrationOracleUserRecordsGraceRoundRobin(t *testing.T) {
	runOracle(t, oracleScenario{workers: []string{"w1", "w2", "w3", "w4"}, args: []string{"--assignor", "roundrobin"}, maxDuplicates: 0,
		userRecords: true, grace: 500 * time.Millisecond})
}

func TestIntegrationOracleUserRecordsNoGrace(t *testing.T) {
	runOracle(t, oracleScenario{workers: []string{"w1", "w2", "w3"}, maxDuplicates: 0, userRecords: true})
}

func TestIntegrationOracleUndisturbed(t *testing.T) {
	runOracle(t, oracleScenario{workers: []string{"w1", "w2", "w3"}, maxDuplicates: 0})
}

// With 4 members and 6 partitions roundrobin puts market-p and
// notifications-p on different members: every priced join is remote, and
// must equal what a local join gives.
func TestIntegrationOracleRoundRobin(t *testing.T) {
	runOracle(t, oracleScenario{workers: []string{"w1", "w2", "w3", "w4"}, args: []string{"--assignor", "roundrobin"}, maxDuplicates: 0})
}

// Scale out and in, every moved task's store bulk-loaded.
func TestIntegrationOracleScaleOutAndIn(t *testing.T) {
	t.Setenv("JOINER_LEAVE_ON_SHUTDOWN", "true") // scale-in leaves at once
	runOracle(t, oracleScenario{workers: []string{"w1", "w2"}, maxDuplicates: -1, bulkRestore: true, disturb: scaleOutAndIn})
}

// scaleOutAndIn starts w3 and w4 beside w1 and w2, then stops w1 and w4,
// at a fifth of the load each.
func scaleOutAndIn(c *cluster, ws map[string]*worker, at func(float64)) {
	at(0.2)
	ws["w3"] = c.start("w3")
	at(0.4)
	ws["w4"] = c.start("w4")
	at(0.6)
	c.stop(ws["w1"])
	at(0.8)
	c.stop(ws["w4"])
}

// kill -9 of a worker, restarted 10 s later with the same id and state dir:
// the replayed notifications get their as-of prices, not the restored
// latest ones. Every restore bulk-loads, including the catch-up of the
// restarted worker's own stores (a load on top of what they held).
func TestIntegrationOracleKill9Restart(t *testing.T) {
	runOracle(t, oracleScenario{workers: []string{"w1", "w2", "w3"}, maxDuplicates: -1, bulkRestore: true,
		disturb: func(c *cluster, ws map[string]*worker, at func(float64)) {
			at(0.2)
			c.kill9(ws["w2"])
			time.Sleep(10 * time.Second)
			ws["w2"] = c.start("w2")
		}})
}

// SIGSTOP of a worker past the session timeout (6 s), then SIGCONT: its
// tasks were given to others meanwhile, so it must not resume them from
// memory. Duplicates are bounded by what it processed after its last
// commit (--commit-interval 500ms of its share of 300 notifications/s, plus
// a batch in flight); resuming would repeat the ~10 s the others processed.
func TestIntegrationOracleSIGSTOP(t *testing.T) {
	runOracle(t, oracleScenario{workers: []string{"w1", "w2", "w3"}, maxDuplicates: 300,
		disturb: func(c *cluster, ws map[string]*worker, at func(float64)) {
			at(0.2)
			w := ws["w3"]
			if err := w.signal(syscall.SIGSTOP); err != nil {
				c.t.Fatal(err)
			}
			time.Sleep(10 * time.Second)
			if err := w.signal(syscall.SIGCONT); err != nil {
				c.t.Fatal(err)
			}
		}})
}

// 5% of the notifications written with librdkafka's default partitioner
// (CRC32) instead of murmur2 (issue 19, item 2): most land in another
// task's partition and are looked up in their symbol's task, on the same
// worker process or another. Before, two merged tasks each waiting for the
// other's market stalled every partition within seconds. Every alert must
// be exact, all of them within 30 s of the end of the load, and the
// misrouted ones counted.
func TestIntegrationOracleMisrouted(t *testing.T) {
	load := oracleLoad
	load.NotificationsPerRound, load.TicksPerRound, load.Misrouted = 150, 30, 0.05
	runOracle(t, oracleScenario{workers: []string{"w1", "w2", "w3"}, maxDuplicates: 0, load: &load, completeWithin: 30 * time.Second,
		after: func(c *cluster, ws map[string]*worker, wl *oracle.Workload) {
			want := 0
			for _, id := range wl.Misrouted() {
				if oracle.MisroutedTo(wl.Symbol(id), partitions) {
					want++
				}
			}
			var got int64
			for _, w := range ws {
				v, err := w.view()
				if err != nil {
					c.t.Fatal(err)
				}
				got += v.Misrouted
			}
			c.t.Logf("%d notifications written with CRC32, %d outside their symbol's partition; the workers counted %d misrouted", len(wl.Misrouted()), want, got)
			if want < 100 || got < int64(want) {
				c.t.Errorf("joiner_notifications_misrouted_total sums to %d, want at least %d (and 100)", got, want)
			}
		}})
}

// Both input topics grown from 6 to 8 partitions while the load flows
// (issue 19, item 5): most symbols move to another task, whose store lacks
// their history from before the change. Every alert must still carry the
// exact as-of price: a moved symbol's lookup also asks the task that held
// it under 6 partitions, on whichever worker process holds it now.
func TestIntegrationOracleBothTopicsGrow(t *testing.T) {
	load := oracleLoad
	load.Symbols, load.TicksPerRound = 120, 6 // sparse ticks: many prices from before the change
	runOracle(t, oracleScenario{workers: []string{"w1", "w2", "w3"}, maxDuplicates: -1, load: &load,
		disturb: func(c *cluster, ws map[string]*worker, at func(float64)) {
			at(0.25)
			resp, err := c.client.CreatePartitions(context.Background(), &kafka.CreatePartitionsRequest{Topics: []kafka.TopicPartitionsConfig{
				{Name: c.market, Count: partitions + 2}, {Name: c.notifs, Count: partitions + 2},
			}})
			if err == nil {
				err = errors.Join(resp.Errors[c.market], resp.Errors[c.notifs])
			}
			if err != nil {
				c.t.Fatal(err)
			}
			c.t.Logf("both topics grown to %d partitions", partitions+2)
		},
		after: func(c *cluster, ws map[string]*worker, _ *oracle.Workload) {
			for _, w := range ws {
				v, err := w.view()
				if err != nil {
					c.t.Fatal(err)
				}
				if v.Partitions != partitions+2 {
					c.t.Errorf("%s plans %d partitions after the change, want %d", v.Instance, v.Partitions, partitions+2)
				}
			}
			if n := c.countLogLines("partition count changed"); n == 0 {
				c.t.Errorf("no worker logged the partition count change")
			}
		}})
}
