package join

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// A pass hands the alerts of every run of notifications between ticks to
// the outbox as one chunk, not one chunk (and one write) per run: with
// ticks interleaved, that is what kept writes small and latency high.
func TestMergePassOneChunkForInterleavedRuns(t *testing.T) {
	w, pt, _ := newTestWorker(t)
	var mbuf, nbuf []fetchedRecord
	for i := range 20 {
		mbuf = append(mbuf, recAt(int64(i), 1000+10*i, fmt.Sprintf(`{"symbol":"BBCA","price":%d}`, i)))
		for j := range 3 {
			nbuf = append(nbuf, recAt(int64(3*i+j), 1001+10*i+j, fmt.Sprintf(`{"id":"n%d-%d","symbol":"BBCA"}`, i, j)))
		}
	}
	out := make(chan chunk, 100)
	m := merger{t: pt, st: pt.st, mbuf: mbuf, nbuf: nbuf, force: true, out: out, lag: w.metrics.TaskLag.WithLabelValues("0")}
	ctx := context.Background()
	if err := w.gate.enter(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.pass(ctx); err != nil {
		t.Fatal(err)
	}
	close(out)
	var chunks, alerts int
	var next int64
	for c := range out {
		chunks++
		alerts += len(c.alerts)
		next = c.next
		w.gate.leave()
	}
	if chunks != 1 || alerts != len(nbuf) || next != int64(len(nbuf)) {
		t.Errorf("%d chunks of %d alerts in all, up to offset %d; want 1 chunk of %d up to %d", chunks, alerts, next, len(nbuf), len(nbuf))
	}
}

// Notifications need not wait for an end-offset request when the market
// was fetched to its high watermark by a fetch sent after they were
// received; a market fetch sent before they were received proves nothing.
func TestMergeMarketFetchedToEndAfterNotifications(t *testing.T) {
	w, pt, _ := newTestWorker(t)
	m := merger{t: pt, st: pt.st, mNext: -1, nNext: -1, lag: w.metrics.TaskLag.WithLabelValues("0")}
	before := time.Now()
	m.takeMarket(fetched{next: 5, hwm: 5, sent: before})
	time.Sleep(time.Millisecond)
	m.takeNotifications(fetched{recs: []fetchedRecord{recAt(0, 2000, `{"id":"n","symbol":"BBCA"}`)}, next: 1, hwm: 1, sent: time.Now()})
	if m.otherSideFetchedToEnd() {
		t.Fatal("a market fetch sent before the notifications were received let them go ahead")
	}
	time.Sleep(time.Millisecond)
	m.takeMarket(fetched{next: 5, hwm: 7, sent: time.Now()})
	if m.otherSideFetchedToEnd() {
		t.Fatal("a market fetch below its high watermark let the notifications go ahead")
	}
	m.takeMarket(fetched{next: 7, hwm: 7, sent: time.Now()})
	if !m.otherSideFetchedToEnd() {
		t.Fatal("the market was fetched to its end after the notifications were received, yet they wait")
	}
	// Newer notifications are not covered by that fetch.
	time.Sleep(time.Millisecond)
	m.takeNotifications(fetched{recs: []fetchedRecord{recAt(1, 2001, `{"id":"m","symbol":"BBCA"}`)}, next: 2, hwm: 2, sent: time.Now()})
	if m.otherSideFetchedToEnd() {
		t.Fatal("notifications received after the market's last fetch went ahead")
	}
}
