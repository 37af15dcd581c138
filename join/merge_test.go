package join

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/group"
	"github.com/joiner-dev/joiner/record"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// newTestWorker builds a worker on an embedded broker with one partition
// per topic, holding task 0's state (restored, empty) and processing its
// notifications merged.
func newTestWorker(t testing.TB) (*Processor, *processTask, *kafka.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "market", "notifications", "alerts", "joiner-dead-letters"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	client := &kafka.Client{Addr: kafka.TCP(c.ListenAddrs()...), Timeout: 5 * time.Second}
	writer := &kafka.Writer{Addr: kafka.TCP(c.ListenAddrs()...), BatchTimeout: time.Millisecond}
	t.Cleanup(func() { writer.Close() })
	w, st := newTestStateTask(t, Config{Client: client, Writer: writer, InstanceID: "w"})
	st.dlqFrom = -1
	close(st.restored)
	w.assignment = group.Assignment{Partitions: 1}
	w.states[0] = st
	// The tests hand joinInto records never written to Kafka, which no
	// round can confirm (planconfirm.go; its tests are on the broker).
	w.confirm = nil
	return w, newProcessTask(&w.taskEnv, 0, st), client
}

// recAt is the record at offset of value at ms, keyed by value's symbol
// as a producer keys it (none when it has no valid one).
func recAt(offset int64, ms int, value string) fetchedRecord {
	var key []byte
	if n, err := record.NewDecoder(record.Fields{}, 0).Notification([]byte(value)); err == nil {
		key = []byte(n.Symbol)
	}
	return fetchedRecord{Offset: offset, Time: time.UnixMilli(int64(ms)), Key: key, Value: []byte(value)}
}

// readAlerts returns the alerts written so far, by notification id.
func readAlerts(t *testing.T, c *kafka.Client, want int) map[string]record.Alert {
	t.Helper()
	out := map[string]record.Alert{}
	deadline := time.Now().Add(10 * time.Second)
	for next := int64(0); len(out) < want && time.Now().Before(deadline); {
		res, err := c.Fetch(context.Background(), &kafka.FetchRequest{Topic: "alerts", Partition: 0, Offset: next, MaxBytes: 1 << 20, MaxWait: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		for {
			rec, err := res.Records.ReadRecord()
			if err != nil {
				break
			}
			v, _ := kafka.ReadAll(rec.Value)
			var a record.Alert
			if err := json.Unmarshal(v, &a); err != nil {
				t.Fatal(err)
			}
			out[a.ID] = a
			next = rec.Offset + 1
		}
	}
	return out
}

// A merge pass joins each notification with the ticks up to its own
// timestamp, even when newer ticks are already buffered; what it cannot
// order yet stays buffered until the other side is known to be at its end.
func TestMergePassFollowsTimestamps(t *testing.T) {
	_, pt, client := newTestWorker(t)
	tick := func(off int64, ms int, price float64) fetchedRecord {
		return recAt(off, ms, fmt.Sprintf(`{"symbol":"BBCA","price":%v}`, price))
	}
	note := func(off int64, ms int, id string) fetchedRecord {
		return recAt(off, ms, fmt.Sprintf(`{"id":%q,"symbol":"BBCA"}`, id))
	}
	m := merger{t: pt, st: pt.st, mNext: 3, nNext: 6,
		mbuf: []fetchedRecord{tick(0, 1000, 1), tick(1, 2000, 2), tick(2, 3000, 3)},
		nbuf: []fetchedRecord{note(0, 500, "before-any"), note(1, 1000, "at-1000"), note(2, 1500, "at-1500"),
			recAt(3, 1600, `{"id":"broken"`), note(4, 2500, "at-2500"), note(5, 9000, "at-9000")},
	}
	ctx := context.Background()
	if err := m.pass(ctx); err != nil {
		t.Fatal(err)
	}
	// The tick at 3000 is applied (the next notification is newer), but
	// the notification at 9000 waits: the market may still hold ticks
	// before it.
	if len(m.mbuf) != 0 || len(m.nbuf) != 1 || pt.acked.Load() != 5 {
		t.Fatalf("after the pass: %d ticks and %d notifications buffered, acked %d; want 0, 1 and 5", len(m.mbuf), len(m.nbuf), pt.acked.Load())
	}
	m.force = true // the market is at its end, or MaxTaskIdle passed
	if err := m.pass(ctx); err != nil {
		t.Fatal(err)
	}
	if len(m.nbuf) != 0 || pt.acked.Load() != 6 {
		t.Fatalf("forced pass left %d notifications, acked %d", len(m.nbuf), pt.acked.Load())
	}
	alerts := readAlerts(t, client, 5)
	want := map[string]float64{"at-1000": 1, "at-1500": 1, "at-2500": 2, "at-9000": 3}
	for id, price := range want {
		a := alerts[id]
		if a.Price == nil || *a.Price != price || a.Result != record.ResultLocal {
			t.Errorf("%s: joined %+v, want price %v", id, a, price)
		}
	}
	if a := alerts["before-any"]; a.Result != record.ResultMiss || a.Price != nil {
		t.Errorf("a notification older than every tick joined %+v, want a miss", a)
	}
	if pt.st.appliedOffset() != 2 {
		t.Errorf("applied offset %d, want 2", pt.st.appliedOffset())
	}
}

// Ticks wait for older notifications: with nothing on the notifications
// side, a pass applies nothing until that side is known to be at its end.
func TestMergePassHoldsTicksForOlderNotifications(t *testing.T) {
	_, pt, _ := newTestWorker(t)
	m := merger{t: pt, st: pt.st, mbuf: []fetchedRecord{recAt(0, 1000, `{"symbol":"BBCA","price":1}`)}}
	if err := m.pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(m.mbuf) != 1 || pt.st.appliedOffset() != -1 {
		t.Fatalf("tick applied before the notifications side was known to be at its end")
	}
	m.force = true
	if err := m.pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(m.mbuf) != 0 || pt.st.appliedOffset() != 0 {
		t.Fatalf("forced pass did not apply the tick")
	}
}

// A pause at the task's gate longer than MaxTaskIdle does not count as
// idle time: the wait for the other side resumes where it was.
func TestMergeIdleClockStopsAtTheGate(t *testing.T) {
	w, pt, _ := newTestWorker(t)
	w.limits.MaxTaskIdle = 100 * time.Millisecond
	m := merger{t: pt, st: pt.st, waitStart: time.Now()}
	pt.gate.close(context.Background())
	go func() {
		time.Sleep(3 * w.cfg.MaxTaskIdle)
		pt.gate.reopen()
	}()
	if err := m.enterGate(context.Background()); err != nil {
		t.Fatal(err)
	}
	pt.gate.leave()
	if waited := time.Since(m.waitStart); waited >= w.cfg.MaxTaskIdle {
		t.Errorf("after a gate pause of %v the wait counts %v idle, want less than MaxTaskIdle (%v)", 3*w.cfg.MaxTaskIdle, waited, w.cfg.MaxTaskIdle)
	}
}

// When an idle wait runs out, the batches already fetched are taken first:
// a tick fetched while the loop was paused is applied before the
// notification that waited for it, instead of being overtaken by a forced
// join.
func TestMergeForceTakesFetchedBatchesFirst(t *testing.T) {
	_, pt, client := newTestWorker(t)
	m := merger{t: pt, st: pt.st, mNext: 0, nNext: 1,
		nbuf: []fetchedRecord{recAt(0, 2000, `{"id":"n","symbol":"BBCA"}`)},
	}
	mCh, nCh := make(chan fetched, 1), make(chan fetched, 1)
	mCh <- fetched{recs: []fetchedRecord{recAt(0, 1500, `{"symbol":"BBCA","price":7}`)}, next: 1}
	log := pt.env.log
	m.idleExpired(context.Background(), mCh, nCh, log)
	if m.force || len(m.mbuf) != 1 {
		t.Fatalf("forced with a fetched tick waiting: force %v, %d ticks buffered", m.force, len(m.mbuf))
	}
	if err := m.pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	m.idleExpired(context.Background(), mCh, nCh, log) // nothing fetched, the market at its end: the notification goes ahead
	if !m.force {
		t.Fatal("not forced with nothing fetched")
	}
	if err := m.pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	a := readAlerts(t, client, 1)["n"]
	if a.Price == nil || *a.Price != 7 || a.PriceTsMs != 1500 {
		t.Errorf("joined %+v, want the tick at 1500 (price 7)", a)
	}
}

// The outbox writes joined chunks while the merge goes on, and a rebalance
// (closing the gate) waits until every chunk handed to it is acknowledged,
// so the commit it makes covers them.
func TestOutboxChunksHoldTheGate(t *testing.T) {
	_, pt, client := newTestWorker(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	var nbuf []fetchedRecord
	for i := range 2*mergeChunk + 10 {
		nbuf = append(nbuf, recAt(int64(i), 1000+i, fmt.Sprintf(`{"id":"n%d","symbol":"BBCA"}`, i)))
	}
	m := merger{t: pt, st: pt.st, nbuf: nbuf, force: true}
	m.free = make(chan *encoded, alcOutboxDepth+2) // buffers are reused after their write
	m.out = pt.startOutbox(ctx, &wg, m.free)
	if err := pt.gate.enter(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.pass(ctx); err != nil {
		t.Fatal(err)
	}
	pt.gate.leave()
	if !pt.gate.close(ctx) {
		t.Fatal("the gate did not drain")
	}
	if got, want := pt.acked.Load(), int64(len(nbuf)); got != want {
		t.Errorf("gate closed with acked %d, want %d: a chunk was still being written", got, want)
	}
	if n := len(readAlerts(t, client, len(nbuf))); n != len(nbuf) {
		t.Errorf("%d alerts written, want %d", n, len(nbuf))
	}
}

// A notification is never joined before the market is read past it or
// known to be at its end: when the market is behind (or cannot be read),
// an idle wait running out does not force the join.
func TestMergeNeverForcesNotificationsPastTheMarket(t *testing.T) {
	w, pt, _ := newTestWorker(t)
	// The market holds a tick the merge has not read (its reader is at 0).
	if err := w.cfg.Writer.WriteMessages(context.Background(), kafka.Message{Topic: "market", Value: []byte(`{"symbol":"BBCA","price":1}`)}); err != nil {
		t.Fatal(err)
	}
	m := merger{t: pt, st: pt.st, mNext: 0, nNext: 1, waitStart: time.Now().Add(-time.Hour),
		nbuf: []fetchedRecord{recAt(0, 2000, `{"id":"n","symbol":"BBCA"}`)},
	}
	m.idleExpired(context.Background(), make(chan fetched), make(chan fetched), w.log)
	if m.force {
		t.Fatal("forced a notification ahead of a market that is not read to its end")
	}
	if time.Since(m.waitStart) > time.Minute {
		t.Error("the wait did not start again")
	}
	m.mNext = 1 // read to the end now
	m.idleExpired(context.Background(), make(chan fetched), make(chan fetched), w.log)
	if !m.force {
		t.Fatal("not forced once the market is at its end")
	}
}

// With a grace, a notification at T waits for the ticks up to T + grace:
// a tick older than T written after one newer than T (but within the
// grace) is still its as-of price, and is not late. A market end
// confirmed less than the grace after a notification's time does not let
// it go ahead; one confirmed later does.
func TestMergePassWaitsForTheGrace(t *testing.T) {
	w, pt, client := newTestWorker(t)
	w.limits.Grace = 500 * time.Millisecond
	tick := func(off int64, ms int, price float64) fetchedRecord {
		return recAt(off, ms, fmt.Sprintf(`{"symbol":"BBCA","price":%v}`, price))
	}
	m := newMerger(pt, pt.st)
	m.mNext, m.nNext = 1, 1
	m.mbuf = []fetchedRecord{tick(0, 900, 1), tick(1, 1400, 2)}
	m.nbuf = []fetchedRecord{recAt(0, 1000, `{"id":"at-1000","symbol":"BBCA"}`)}
	ctx := context.Background()
	if err := m.pass(ctx); err != nil {
		t.Fatal(err)
	}
	if len(m.mbuf) != 0 || len(m.nbuf) != 1 {
		t.Fatalf("after the first pass: %d ticks, %d notifications buffered; want 0 and 1 (1400 is within the grace of 1000)", len(m.mbuf), len(m.nbuf))
	}
	// The market confirmed at its end now: the notification's time plus
	// the grace is long past by the clock, but a check "sent" 100 ms after
	// its time is not enough.
	m.mNext = 2
	m.takeEndCheck(endCheck{market: true, coverN: 1, end: 2, sent: time.UnixMilli(1100)})
	if m.nCleared != 1 {
		t.Fatalf("the end check cleared offsets below %d, want 1", m.nCleared)
	}
	if err := m.pass(ctx); err != nil {
		t.Fatal(err)
	}
	if len(m.nbuf) != 1 {
		t.Fatalf("joined on an end confirmed within the grace of the notification")
	}
	// The late tick (950, written after 1400) and one past the grace.
	m.mbuf = []fetchedRecord{tick(2, 950, 3), tick(3, 1600, 4)}
	if err := m.pass(ctx); err != nil {
		t.Fatal(err)
	}
	if len(m.nbuf) != 0 {
		t.Fatalf("the notification still waits after a tick past its grace")
	}
	a := readAlerts(t, client, 1)["at-1000"]
	if a.Price == nil || *a.Price != 3 {
		t.Errorf("joined %+v, want the tick at 950 written within the grace (price 3)", a)
	}
	if n := counterValue(w.metrics.TicksLate); n != 0 {
		t.Errorf("%v late ticks, want 0 within the grace", n)
	}
	// A notification at 2000 confirmed by an end check sent at 2600 goes
	// ahead without a tick past its grace.
	m.nbuf = []fetchedRecord{recAt(1, 2000, `{"id":"at-2000","symbol":"BBCA"}`)}
	m.nNext, m.mNext = 2, 4
	m.takeEndCheck(endCheck{market: true, coverN: 2, end: 4, sent: time.UnixMilli(2400)})
	if err := m.pass(ctx); err != nil || len(m.nbuf) != 1 {
		t.Fatalf("joined on an end confirmed 400 ms after the notification (grace 500 ms): %v", err)
	}
	m.takeEndCheck(endCheck{market: true, coverN: 2, end: 4, sent: time.UnixMilli(2600)})
	if err := m.pass(ctx); err != nil || len(m.nbuf) != 0 {
		t.Fatalf("not joined on an end confirmed past the grace: %d left, %v", len(m.nbuf), err)
	}
	if a := readAlerts(t, client, 2)["at-2000"]; a.Price == nil || *a.Price != 4 {
		t.Errorf("joined %+v, want price 4", a)
	}
}
