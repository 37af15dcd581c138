package fetch

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// countingTransport counts the Fetch requests and the partitions in them,
// and the most in flight at once.
type countingTransport struct {
	rt                    kafka.RoundTripper
	fetches, parts        atomic.Int64
	inflight, maxInflight atomic.Int64
}

func (c *countingTransport) RoundTrip(ctx context.Context, addr net.Addr, req kafka.Request) (kafka.Response, error) {
	if f, ok := req.(*MuxRequest); ok {
		c.fetches.Add(1)
		for _, t := range f.Topics {
			c.parts.Add(int64(len(t.Partitions)))
		}
		n := c.inflight.Add(1)
		defer c.inflight.Add(-1)
		for {
			m := c.maxInflight.Load()
			if n <= m || c.maxInflight.CompareAndSwap(m, n) {
				break
			}
		}
	}
	return c.rt.RoundTrip(ctx, addr, req)
}

func newMuxCluster(t *testing.T, partitions int) (*kafka.Client, *countingTransport) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(partitions), "t"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	tr := &countingTransport{rt: &kafka.Transport{}}
	return &kafka.Client{Addr: kafka.TCP(c.ListenAddrs()...), Timeout: 10 * time.Second, Transport: tr}, tr
}

var produced = map[int]int{} // by produceN, per partition

func produceN(t *testing.T, c *kafka.Client, p, n int) {
	t.Helper()
	var recs []kafka.Record
	for i := range n {
		recs = append(recs, kafka.Record{Value: kafka.NewBytes(fmt.Appendf(nil, "p%d-%d", p, produced[p]+i))})
	}
	produced[p] += n
	res, err := c.Produce(context.Background(), &kafka.ProduceRequest{Topic: "t", Partition: p, RequiredAcks: kafka.RequireAll, Records: kafka.NewRecordReader(recs...)})
	if err != nil || res.Error != nil {
		t.Fatalf("produce to t-%d: %v %v", p, err, res.Error)
	}
}

// TestMuxReadsEveryPartitionInFewRequests: 64 readers, each reading its
// partition to the end, get every record of their own partition in order,
// through far fewer Fetch requests than fetches and never more than
// MuxInflight in flight.
func TestMuxReadsEveryPartitionInFewRequests(t *testing.T) {
	const parts, per = 64, 300
	c, tr := newMuxCluster(t, parts)
	for range 10 { // ten batches per partition
		for p := range parts {
			produceN(t, c, p, per/10)
		}
	}
	m := NewMux(c)
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var readerFetches atomic.Int64
	errs := make(chan error, parts)
	for p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := NewReader(m, "t", p, 0, 50*time.Millisecond, nil)
			r.maxBytes = 1 << 10 // small fetches: many of them
			var got []string
			for r.Next < per {
				recs, err := r.Fetch(ctx)
				readerFetches.Add(1)
				if err != nil {
					errs <- err
					return
				}
				for _, rec := range recs {
					got = append(got, string(rec.Value))
				}
				r.maxBytes = 1 << 9
			}
			for i, v := range got {
				if want := fmt.Sprintf("p%d-%d", p, i); v != want {
					errs <- fmt.Errorf("t-%d: record %d is %q, want %q", p, i, v, want)
					return
				}
			}
			if len(got) != per {
				errs <- fmt.Errorf("t-%d: %d records, want %d", p, len(got), per)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	f, n := tr.fetches.Load(), readerFetches.Load()
	t.Logf("%d reader fetches in %d Fetch requests (%d partitions), at most %d in flight", n, f, tr.parts.Load(), tr.maxInflight.Load())
	if f*4 > n {
		t.Errorf("%d Fetch requests for %d reader fetches; want them batched (at most a quarter)", f, n)
	}
	if tr.maxInflight.Load() > MuxInflight {
		t.Errorf("%d Fetch requests in flight at once; want at most %d", tr.maxInflight.Load(), MuxInflight)
	}
}

// TestMuxSlowReaderDoesNotStallOthers: a reader that never asks again
// (a task paused at a handover) is left out of the requests, and a reader
// of another partition still gets records produced after it stopped.
func TestMuxSlowReaderDoesNotStallOthers(t *testing.T) {
	c, _ := newMuxCluster(t, 2)
	produceN(t, c, 0, 10)
	m := NewMux(c)
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	paused := NewReader(m, "t", 0, 0, 20*time.Millisecond, nil)
	if recs, err := paused.Fetch(ctx); err != nil || len(recs) == 0 {
		t.Fatalf("first fetch of t-0: %d records, %v", len(recs), err)
	}
	// paused never fetches again.
	r := NewReader(m, "t", 1, 0, 20*time.Millisecond, nil)
	got := 0
	for i := 0; got < 5 && ctx.Err() == nil; i++ {
		if i == 3 {
			produceN(t, c, 1, 5)
		}
		recs, err := r.Fetch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got += len(recs)
	}
	if got != 5 {
		t.Fatalf("t-1 got %d records; want 5 while t-0's reader is paused", got)
	}
}

func testWaiter(p int, offset int64) *waiter {
	return &waiter{ctx: context.Background(), req: &kafka.FetchRequest{Topic: "t", Partition: p, Offset: offset, MaxBytes: 1 << 20},
		tp: topicPartition{"t", p}, res: make(chan result, 1)}
}

func oneRecord(t *testing.T, offset int64, v string) []byte {
	return testBatch{base: offset, pid: -1, recs: []testRec{{value: []byte(v)}}}.encode(t, nil)
}

// TestMuxAnswer: the demultiplexer hands each reader its own partition's
// records; a partition the response's size limit left without records
// although it has some (high watermark above its offset) is first in the
// next request, not answered; one that a request that did not wait found
// empty waits for the next long poll; one that a long poll found empty is
// answered with no records; a partition error reaches its reader and makes
// the leaders stale.
func TestMuxAnswer(t *testing.T) {
	w0, w1, w2, w3 := testWaiter(0, 5), testWaiter(1, 7), testWaiter(2, 3), testWaiter(3, 1)
	queued := testWaiter(9, 0)
	b := &brokerState{waiting: []*waiter{queued}, inflight: 1}
	res := &MuxResponse{Topics: []MuxTopic{{Topic: "t", Partitions: []MuxPartition{
		{Partition: 0, HighWatermark: 6, Records: oneRecord(t, 5, "zero")},
		{Partition: 1, HighWatermark: 9}, // starved: records at 7 and 8
		{Partition: 2, HighWatermark: 3}, // nothing to read
		{Partition: 3, HighWatermark: 4, ErrorCode: 6 /* NOT_LEADER_OR_FOLLOWER */},
	}}}}
	stale := b.answer(completion{batch: []*waiter{w0, w1, w2, w3}, res: res})
	if b.inflight != 0 {
		t.Errorf("inflight %d after the answer; want 0", b.inflight)
	}
	select {
	case r := <-w0.res:
		recs, err := Records(r.res.Records, 5, nil)
		if err != nil || len(recs) != 1 || string(recs[0].Value) != "zero" || r.res.HighWatermark != 6 {
			t.Errorf("t-0 got %v %v hwm %d; want its record zero and hwm 6", recs, err, r.res.HighWatermark)
		}
	default:
		t.Error("t-0 not answered")
	}
	select {
	case r := <-w1.res:
		t.Errorf("starved t-1 answered %+v; want it queued first", r)
	default:
	}
	if len(b.waiting) != 2 || b.waiting[0] != w1 || b.waiting[1] != queued {
		t.Errorf("waiting %v; want t-1 (starved) then t-9", b.waiting)
	}
	if len(b.parked) != 1 || b.parked[0] != w2 {
		t.Errorf("parked %v; want t-2 (empty, found by a request that did not wait)", b.parked)
	}
	select {
	case r := <-w3.res:
		if r.err != nil || r.res.Error != kafka.NotLeaderForPartition {
			t.Errorf("t-3 got %+v; want NOT_LEADER_OR_FOLLOWER", r)
		}
	default:
		t.Error("t-3 not answered")
	}
	if !stale {
		t.Error("leaders not stale after NOT_LEADER_OR_FOLLOWER")
	}

	// A long poll that found t-2 empty answers it with no records.
	b = &brokerState{inflight: 1, long: true}
	b.answer(completion{batch: []*waiter{w2}, long: true, res: &MuxResponse{Topics: []MuxTopic{{Topic: "t", Partitions: []MuxPartition{{Partition: 2, HighWatermark: 3}}}}}})
	select {
	case r := <-w2.res:
		if r.err != nil || r.res.Records == nil {
			t.Errorf("t-2 after a long poll: %+v; want an empty answer", r)
		}
	default:
		t.Error("t-2 not answered after the long poll")
	}
	if b.long || len(b.parked) != 0 {
		t.Errorf("after the long poll: long %v, parked %v; want none", b.long, b.parked)
	}
}

// TestMuxDispatch: one long poll at a time, with the parked partitions;
// the others do not wait; a partition is in a request once; at most
// MuxInflight requests.
func TestMuxDispatch(t *testing.T) {
	a, a2, b1, c1 := testWaiter(0, 0), testWaiter(0, 100), testWaiter(1, 0), testWaiter(2, 0)
	st := &brokerState{waiting: []*waiter{a, a2, b1}, parked: []*waiter{c1}}
	first, long := st.next()
	if !long || len(first) != 3 || first[0] != c1 || first[1] != a || first[2] != b1 {
		t.Fatalf("first request %v long %v; want the long poll [t-2 t-0 t-1] (parked first)", first, long)
	}
	second, long := st.next()
	if long || len(second) != 1 || second[0] != a2 {
		t.Fatalf("second request %v long %v; want [t-0@100], not waiting (t-0 twice cannot share one)", second, long)
	}
	if batch, _ := st.next(); batch != nil {
		t.Fatalf("a request %v with nothing waiting", batch)
	}
	for p := range 5 {
		st.waiting = append(st.waiting, testWaiter(10+p, 0))
		for batch, long := st.next(); batch != nil; batch, long = st.next() {
			if long {
				t.Fatal("a second long poll while one is in flight")
			}
		}
	}
	if st.inflight != MuxInflight {
		t.Fatalf("inflight %d; want at most %d", st.inflight, MuxInflight)
	}
	if len(st.waiting) != 4 {
		t.Fatalf("%d waiting; want 4 (one was sent in the third request)", len(st.waiting))
	}
}

// TestMuxDispatchCommitted: a read_committed request's partition limits
// add up to at most ResponseMaxBytes (its response limit then never cuts
// a partition short, which would lose its aborted transactions on
// kfake); the readers left out go, in order, in the next request, and a
// partition whose limit alone is that large still goes alone.
func TestMuxDispatchCommitted(t *testing.T) {
	var ws []*waiter
	for p := range 40 {
		w := testWaiter(p, 0)
		w.maxBytes = 1 << 20
		ws = append(ws, w)
	}
	big := testWaiter(99, 0)
	big.maxBytes = ResponseMaxBytes
	st := &brokerState{committed: true, waiting: append(append([]*waiter{}, ws...), big)}
	var sent []*waiter
	for batch, _ := st.next(); batch != nil; batch, _ = st.next() {
		bytes := 0
		for _, w := range batch {
			bytes += w.maxBytes
		}
		if bytes > ResponseMaxBytes && len(batch) > 1 {
			t.Errorf("a request of %d partitions, %d bytes of partition limits; want at most %d", len(batch), bytes, ResponseMaxBytes)
		}
		sent = append(sent, batch...)
	}
	// 16, 16 and 8 of the 1 MiB readers; the large one waits.
	if len(sent) != len(ws) || len(st.waiting) != 1 || st.waiting[0] != big {
		t.Fatalf("%d readers in the first %d requests, %d waiting; want %d, then t-99", len(sent), MuxInflight, len(st.waiting), len(ws))
	}
	for i, w := range sent {
		if w != ws[i] {
			t.Fatalf("reader %d sent is t-%d; want t-%d (in order)", i, w.tp.partition, ws[i].tp.partition)
		}
	}
	st.inflight--
	if batch, _ := st.next(); len(batch) != 1 || batch[0] != big {
		t.Errorf("the next request is %v; want t-99 alone", batch)
	}
	// read_uncommitted: one request takes them all.
	st = &brokerState{waiting: append(append([]*waiter{}, ws...), big)}
	if batch, _ := st.next(); len(batch) != len(ws)+1 {
		t.Errorf("read_uncommitted: %d readers in the first request; want %d", len(batch), len(ws)+1)
	}
}
