package join

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/produce"
	"github.com/joiner-dev/joiner/record"
	"github.com/joiner-dev/joiner/statestore"
	"github.com/segmentio/kafka-go"
)

// fakeFetcher is an in-memory Fetcher: topic → partition → records (the
// offset of a record is its index).
type fakeFetcher struct {
	mu   sync.Mutex
	logs map[string]map[int][]fetchedRecord
	// down makes every fetch and offset request of a topic fail.
	down map[string]bool
}

// setDown makes topic unreadable (down) or readable again.
func (f *fakeFetcher) setDown(topic string, down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down == nil {
		f.down = map[string]bool{}
	}
	f.down[topic] = down
}

func newFakeFetcher() *fakeFetcher {
	return &fakeFetcher{logs: map[string]map[int][]fetchedRecord{}}
}

// produce appends a record with the given timestamp and value.
func (f *fakeFetcher) produce(topic string, p int, tsMs int64, key, value string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.logs[topic] == nil {
		f.logs[topic] = map[int][]fetchedRecord{}
	}
	log := f.logs[topic][p]
	f.logs[topic][p] = append(log, fetchedRecord{Offset: int64(len(log)), Time: time.UnixMilli(tsMs), Key: []byte(key), Value: []byte(value)})
}

func (f *fakeFetcher) Fetch(ctx context.Context, req *kafka.FetchRequest) (*kafka.FetchResponse, error) {
	deadline := time.Now().Add(req.MaxWait)
	for {
		f.mu.Lock()
		if f.down[req.Topic] {
			f.mu.Unlock()
			time.Sleep(time.Millisecond)
			return nil, fmt.Errorf("fake: %s is down", req.Topic)
		}
		log := f.logs[req.Topic][req.Partition]
		var out []kafka.Record
		for _, r := range log[min(max(req.Offset, 0), int64(len(log))):] {
			out = append(out, kafka.Record{Offset: r.Offset, Time: r.Time, Key: kafka.NewBytes(r.Key), Value: kafka.NewBytes(r.Value), Headers: r.Headers})
		}
		hwm := int64(len(log))
		f.mu.Unlock()
		if len(out) > 0 || !time.Now().Before(deadline) {
			return &kafka.FetchResponse{Topic: req.Topic, Partition: req.Partition, HighWatermark: hwm,
				Records: kafka.NewRecordReader(out...)}, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

func (f *fakeFetcher) ListOffsets(_ context.Context, req *kafka.ListOffsetsRequest) (*kafka.ListOffsetsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	res := &kafka.ListOffsetsResponse{Topics: map[string][]kafka.PartitionOffsets{}}
	for topic := range req.Topics {
		if f.down[topic] {
			return nil, fmt.Errorf("fake: %s is down", topic)
		}
	}
	for topic, reqs := range req.Topics {
		for _, r := range reqs {
			res.Topics[topic] = append(res.Topics[topic], kafka.PartitionOffsets{Partition: r.Partition, FirstOffset: 0, LastOffset: int64(len(f.logs[topic][r.Partition]))})
		}
	}
	return res, nil
}

// fakeWriter records what is written; fail makes the next writes fail.
// maxBytes, when set, is a max.message.bytes for every topic: a larger
// message is refused alone (a *produce.RejectedError), as
// produce.Producer reports a broker's MESSAGE_TOO_LARGE, and the others
// are written.
type fakeWriter struct {
	mu       sync.Mutex
	msgs     []kafka.Message
	fail     error
	maxBytes int
	refused  int // messages refused for maxBytes
}

func (f *fakeWriter) WriteMessages(_ context.Context, msgs ...kafka.Message) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	var rej produce.RejectedError
	// Keep copies, as Kafka does: the outbox reuses the buffers of a write
	// once it returned.
	for i, m := range msgs {
		if f.maxBytes > 0 && produce.RecordBatchBytes(&m) > f.maxBytes {
			rej.Rejected = append(rej.Rejected, produce.Rejected{Index: i, Err: fmt.Errorf("writing 1 messages to %s: %w", m.Topic, kafka.MessageSizeTooLarge)})
			f.refused++
			continue
		}
		m.Key, m.Value = bytes.Clone(m.Key), bytes.Clone(m.Value)
		m.Headers = slices.Clone(m.Headers)
		f.msgs = append(f.msgs, m)
	}
	if len(rej.Rejected) > 0 {
		return &rej
	}
	return nil
}

// byTopic returns the messages written to topic so far.
func (f *fakeWriter) byTopic(topic string) []kafka.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []kafka.Message
	for _, m := range f.msgs {
		if m.Topic == topic {
			out = append(out, m)
		}
	}
	return out
}

// startedMember is a fakeMember whose Run says when it has started.
// While inactive is set, it reports itself not confirmed by the group.
type startedMember struct {
	fakeMember
	started  chan struct{}
	inactive atomic.Bool
	// onRelease, when set before the tasks start, hears of each task
	// the Processor releases (restore_faults.go).
	onRelease func(task int)
}

// Release is group.Member's: the Processor gives a failed task up.
func (m *startedMember) Release(task int) {
	if m.onRelease != nil {
		m.onRelease(task)
	}
}

func (m *startedMember) Active() bool { return !m.inactive.Load() }

func (m *startedMember) Run(ctx context.Context) error {
	close(m.started)
	<-ctx.Done()
	return nil
}

// fakeRig is a Processor on fakes, running until the test ends.
type fakeRig struct {
	w      *Processor
	f      *fakeFetcher
	out    *fakeWriter
	member *startedMember
}

// newFakeRig starts a Processor on fakes; opts adjust its Config.
func newFakeRig(t *testing.T, opts ...func(*Config)) *fakeRig {
	t.Helper()
	stores, err := statestore.Open(statestore.Options{Dirs: []string{t.TempDir()}, Group: "g", CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stores.Close() })
	r := &fakeRig{f: newFakeFetcher(), out: &fakeWriter{}, member: &startedMember{started: make(chan struct{})}}
	cfg := Config{Client: r.f, Writer: r.out, Stores: stores, InstanceID: "w",
		FetchMaxWait: 5 * time.Millisecond, MaxTaskIdle: 50 * time.Millisecond, CommitInterval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, o := range opts {
		o(&cfg)
	}
	r.w, err = NewProcessor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.w.Run(ctx, r.member) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	<-r.member.started
	return r
}

// waitFor polls cond for up to 5s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func tickJSON(symbol string, price float64) string {
	return string(record.AppendTick(nil, record.Tick{Symbol: symbol, Price: price}))
}

func noteJSON(id, symbol string) string {
	return string(record.AppendNotification(nil, &record.Notification{ID: id, Symbol: symbol}))
}

// symbolOf returns a symbol whose task is p of n.
func symbolOf(t *testing.T, p, n int) string {
	t.Helper()
	for i := range 1000 {
		if s := fmt.Sprintf("S%d", i); SymbolTask(s, n) == p {
			return s
		}
	}
	t.Fatalf("no symbol of task %d of %d", p, n)
	return ""
}
