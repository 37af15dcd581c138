package join

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// A pass hands the alerts of every run of notifications between ticks to
// the outbox as one chunk, not one chunk (and one write) per run: with
// ticks interleaved, that is what kept writes small and latency high.
func TestMergePassOneChunkForInterleavedRuns(t *testing.T) {
	_, pt, _ := newTestWorker(t)
	var mbuf, nbuf []fetchedRecord
	for i := range 20 {
		mbuf = append(mbuf, recAt(int64(i), 1000+10*i, fmt.Sprintf(`{"symbol":"BBCA","price":%d}`, i)))
		for j := range 3 {
			nbuf = append(nbuf, recAt(int64(3*i+j), 1001+10*i+j, fmt.Sprintf(`{"id":"n%d-%d","symbol":"BBCA"}`, i, j)))
		}
	}
	out := make(chan chunk, 100)
	m := merger{t: pt, st: pt.st, mbuf: mbuf, nbuf: nbuf, force: true, out: out}
	ctx := context.Background()
	if err := pt.gate.enter(ctx); err != nil {
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
		alerts += c.alerts.len()
		next = c.next
		pt.gate.leave()
	}
	if chunks != 1 || alerts != len(nbuf) || next != int64(len(nbuf)) {
		t.Errorf("%d chunks of %d alerts in all, up to offset %d; want 1 chunk of %d up to %d", chunks, alerts, next, len(nbuf), len(nbuf))
	}
}

// A market fetch that reached its high watermark clears no notification:
// after a leader change the new leader answers with a stale high
// watermark, below ticks the old one acknowledged. The market's end
// offset, asked after the notifications were answered and reached, is the
// proof; an end the market is not read to proves nothing.
func TestMergeOnlyTheEndCheckClearsNotifications(t *testing.T) {
	_, pt, _ := newTestWorker(t)
	m := merger{t: pt, st: pt.st, mNext: -1, nNext: -1}
	m.takeNotifications(fetched{recs: []fetchedRecord{recAt(0, 2000, `{"id":"n0","symbol":"BBCA"}`)}, next: 1, hwm: 1, sent: time.Now()})
	time.Sleep(time.Millisecond)
	m.takeMarket(fetched{next: 7, hwm: 7, sent: time.Now()})
	if m.nCleared != 0 {
		t.Fatalf("a market fetch at its high watermark cleared the notifications up to %d", m.nCleared)
	}
	if err := m.pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(m.nbuf) != 1 {
		t.Fatalf("after the pass %d notifications buffered; want n0 still held", len(m.nbuf))
	}
	m.takeEndCheck(endCheck{market: true, coverN: 1, end: 9, sent: time.Now()})
	if m.nCleared != 0 {
		t.Fatal("an end check the market is not read to cleared notifications")
	}
	m.takeEndCheck(endCheck{market: true, coverN: 1, end: 7, sent: time.Now()})
	if m.nCleared != 1 {
		t.Fatalf("cleared up to %d after the end check; want 1", m.nCleared)
	}
}

// Offsets cleared in a log that was then recreated (its offsets start
// again lower) clear nothing in the new one.
func TestMergeClearedForgottenWhenTheLogGoesBack(t *testing.T) {
	_, pt, _ := newTestWorker(t)
	m := merger{t: pt, st: pt.st, mNext: -1, nNext: -1}
	m.takeNotifications(fetched{recs: []fetchedRecord{recAt(100, 2000, `{"id":"n","symbol":"BBCA"}`)}, next: 101, hwm: 500, sent: time.Now()})
	m.takeMarket(fetched{next: 5, hwm: 5, sent: time.Now()})
	m.takeEndCheck(endCheck{market: true, coverN: m.nHwm, end: 5, sent: time.Now()})
	if m.nCleared != 500 {
		t.Fatalf("cleared up to %d; want 500", m.nCleared)
	}
	m.nbuf = nil
	m.takeNotifications(fetched{recs: []fetchedRecord{recAt(0, 3000, `{"id":"new","symbol":"BBCA"}`)}, next: 1, hwm: 1, sent: time.Now()})
	if m.nCleared != 0 {
		t.Fatalf("after the log went back, offsets up to %d are still cleared", m.nCleared)
	}
}

// orderedFetcher logs when fetches are answered and end offsets asked.
type orderedFetcher struct {
	*fakeFetcher
	mu    sync.Mutex
	calls []string
}

func (f *orderedFetcher) Fetch(ctx context.Context, req *kafka.FetchRequest) (*kafka.FetchResponse, error) {
	res, err := f.fakeFetcher.Fetch(ctx, req)
	f.mu.Lock()
	f.calls = append(f.calls, "fetch "+req.Topic+" answered")
	f.mu.Unlock()
	return res, err
}

func (f *orderedFetcher) ListOffsets(ctx context.Context, req *kafka.ListOffsetsRequest) (*kafka.ListOffsetsResponse, error) {
	f.mu.Lock()
	for topic := range req.Topics {
		f.calls = append(f.calls, "end of "+topic+" asked")
	}
	f.mu.Unlock()
	return f.fakeFetcher.ListOffsets(ctx, req)
}

// While its state restores, a task fetches its first notifications and
// then asks for the market's end: asked after the fetch was answered, the
// end proves the notifications below that answer's high watermark
// joinable once the market is read to it, so the first chunk is joined as
// soon as the state is restored, without a fetch and a request more.
func TestHeadStartAsksTheMarketsEndAfterTheFirstFetch(t *testing.T) {
	w, pt, _ := newTestWorker(t)
	f := &orderedFetcher{fakeFetcher: newFakeFetcher()}
	w.client = f
	for i := range 3 {
		f.produce("notifications", 0, int64(2000+i), "BBCA", noteJSON(fmt.Sprint("n", i), "BBCA"))
	}
	f.produce("market", 0, 1000, "BBCA", tickJSON("BBCA", 1))
	f.produce("market", 0, 1001, "BBCA", tickJSON("BBCA", 2))

	ctx := context.Background()
	var wg sync.WaitGroup
	h := <-pt.headStart(ctx, &wg, newPartitionReader(f, "notifications", 0, 0, 10*time.Millisecond))
	wg.Wait()
	if want := []string{"fetch notifications answered", "end of market asked"}; fmt.Sprint(f.calls) != fmt.Sprint(want) {
		t.Fatalf("calls %q; want %q: the market's end proves nothing for notifications fetched after it was read", f.calls, want)
	}
	if !h.fetched || !h.checked || len(h.f.recs) != 3 || h.f.next != 3 || h.e.coverN != 3 || h.e.end != 2 || !h.e.market {
		t.Fatalf("head %+v; want the 3 notifications fetched and the market's end 2 covering them", h)
	}
	// The merge starts from the restored market: the end check clears
	// the fetched notifications; from a market behind it, nothing.
	for _, c := range []struct {
		mNext, cleared int64
	}{{2, 3}, {1, 0}} {
		m := merger{t: pt, st: pt.st, mNext: c.mNext, nNext: -1}
		m.takeNotifications(h.f)
		m.takeEndCheck(h.e)
		if m.nCleared != c.cleared {
			t.Errorf("market restored to %d: cleared up to %d; want %d", c.mNext, m.nCleared, c.cleared)
		}
	}
}
