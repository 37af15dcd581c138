package fetch

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	fetchapi "github.com/segmentio/kafka-go/protocol/fetch"
)

// # One fetch per broker
//
// kafka-go's transport sends one request per connection at a time, so a
// worker whose readers each call Client.Fetch holds about one connection
// per partition it reads (3,999 for 1,024 tasks). A Mux is a Client whose
// Fetch hands the partition's request to one loop per worker, which sends
// one multi-partition Fetch request per broker for every partition whose
// reader is waiting, each with its own offset and byte budget
// (FetchRequest.MaxBytes, so one busy partition cannot take a response's
// bytes from the others), and hands each reader its partition's part of
// the response:
//
//   - At most MuxInflight requests per broker are in flight, so a worker
//     holds at most that many fetch connections per broker whatever its
//     task count.
//   - One of them long-polls (MaxWait) for the partitions with nothing to
//     read. A reader that asks while it is in flight is sent at once in a
//     request that does not wait (MaxWait 0), with the others that asked
//     meanwhile: a restore or a backlog is read at one round trip per
//     fetch, as with a connection of its own. A partition such a request
//     found empty waits for the next long poll.
//   - A partition is in a request only while its reader waits for it: a
//     reader that has not taken its last batch (a slow task, or one
//     paused at a handover) is left out, and the others go on.
//   - Fairness: the readers are served in the order they asked, and a
//     partition that a response left without records although it has
//     some (the response's limit, ResponseMaxBytes, was reached before
//     it, or its first batch is larger than its own limit, which a broker
//     returns only to the first partition of a response) is first in the
//     next request, with 4 times its limit.
//   - read_committed (NewCommittedMux, under exactly-once): the requests
//     are read_committed, each reader's records go through Committed's
//     filter with its partition's aborted transactions (aborted batches
//     and control records dropped, the reader's offset past them), its
//     high watermark is the last stable offset, and ListOffsets reads
//     read_committed too. A request's partition limits then add up to
//     at most ResponseMaxBytes, its response limit, so that the response
//     limit never cuts a partition short (kfake leaves out the aborted
//     transactions of the partition a response's limit cut).
//   - A partition error comes back to its reader as FetchResponse.Error,
//     as from Client.Fetch (OFFSET_OUT_OF_RANGE is the Reader's offset
//     reset); NOT_LEADER_OR_FOLLOWER and the other leadership errors, and
//     any failed request, also make the Mux read the partition leaders
//     again before the reader's retry is sent.

// MuxInflight is the most Fetch requests a Mux has in flight to one
// broker: one long poll and two that do not wait.
const MuxInflight = 3

// ResponseMaxBytes is the most one Mux response returns over all its
// partitions (the broker still returns a whole first record batch): at
// most MuxInflight times this many fetched bytes per broker are in
// memory, whatever the task count.
const ResponseMaxBytes = 16 << 20

// MetadataClient is what a Mux reads partition leaders with (a
// *kafka.Client).
type MetadataClient interface {
	Metadata(ctx context.Context, req *kafka.MetadataRequest) (*kafka.MetadataResponse, error)
}

// Mux is a Client that sends its readers' fetches as one multi-partition
// request per broker (see above). ListOffsets and Metadata go to the
// underlying *kafka.Client. Safe for concurrent use; Close stops it.
type Mux struct {
	c  *kafka.Client
	rt kafka.RoundTripper
	// clientID is the client id of the client's kafka.Transport.
	clientID string
	// committed: read_committed (NewCommittedMux).
	committed bool

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	in     chan *waiter
	done   chan completion

	metaMu  sync.Mutex // one leader refresh at a time
	mu      sync.Mutex
	leaders map[topicPartition]int32
	topics  map[string]bool
	stale   bool
}

type topicPartition struct {
	topic     string
	partition int
}

// waiter is one reader's fetch, waiting for its part of a response.
type waiter struct {
	ctx    context.Context
	req    *kafka.FetchRequest
	tp     topicPartition
	broker int32
	res    chan result // buffered: the loop never blocks on it
	// starved counts the responses that left it out although it has
	// records; maxBytes is its partition limit, 4 times the reader's
	// after each (a partition's first batch larger than its limit is
	// only returned to the first partition of a response).
	starved  int
	maxBytes int
}

type result struct {
	res *kafka.FetchResponse
	err error
}

// completion is a request's answer, back to the loop.
type completion struct {
	broker int32
	batch  []*waiter
	long   bool
	res    *MuxResponse
	err    error
}

// brokerState is the loop's view of one broker.
type brokerState struct {
	id        int32
	committed bool      // read_committed: a request's partition limits add up to at most ResponseMaxBytes
	waiting   []*waiter // to send, in order
	parked    []*waiter // found empty by a request that did not wait: for the next long poll
	inflight  int
	long      bool // a long poll is in flight
}

// NewMux returns a Mux fetching read_uncommitted through c's transport,
// started; Close stops it.
func NewMux(c *kafka.Client) *Mux { return newMux(c, false) }

// NewCommittedMux returns a Mux fetching read_committed (see above),
// started; Close stops it.
func NewCommittedMux(c *kafka.Client) *Mux { return newMux(c, true) }

func newMux(c *kafka.Client, committed bool) *Mux {
	rt := c.Transport
	if rt == nil {
		rt = kafka.DefaultTransport
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Mux{c: c, rt: rt, clientID: clientIDOf(rt), committed: committed, ctx: ctx, cancel: cancel, in: make(chan *waiter), done: make(chan completion),
		leaders: map[topicPartition]int32{}, topics: map[string]bool{}}
	m.wg.Add(1)
	go m.loop()
	return m
}

// clientIDOf is the ClientID of the kafka.Transport that rt is or wraps;
// "" when none.
func clientIDOf(rt kafka.RoundTripper) string {
	if t := TransportOf(rt); t != nil {
		return t.ClientID
	}
	return ""
}

// TransportOf returns the *kafka.Transport that rt is or wraps (a
// wrapper names the transport it wraps with Unwrap), nil when none: its
// TLS, SASL and client id are what a connection of one's own dials with.
func TransportOf(rt kafka.RoundTripper) *kafka.Transport {
	for range 8 {
		switch t := rt.(type) {
		case *kafka.Transport:
			return t
		case interface{ Unwrap() kafka.RoundTripper }:
			rt = t.Unwrap()
		default:
			return nil
		}
	}
	return nil
}

// Close stops the Mux and waits for its goroutines; fetches in flight and
// after it fail.
func (m *Mux) Close() {
	m.cancel()
	m.wg.Wait()
}

var errMuxClosed = errors.New("fetch: the fetcher is closed")

// Client returns the client m fetches with (package join dials the same
// brokers with its TLS and SASL settings for a read of its own).
func (m *Mux) Client() *kafka.Client { return m.c }

// ListOffsets is the underlying client's, read_committed for a
// NewCommittedMux (the end is the last stable offset).
func (m *Mux) ListOffsets(ctx context.Context, req *kafka.ListOffsetsRequest) (*kafka.ListOffsetsResponse, error) {
	if m.committed {
		r := *req
		r.IsolationLevel = kafka.ReadCommitted
		req = &r
	}
	return m.c.ListOffsets(ctx, req)
}

// Metadata is the underlying client's.
func (m *Mux) Metadata(ctx context.Context, req *kafka.MetadataRequest) (*kafka.MetadataResponse, error) {
	return m.c.Metadata(ctx, req)
}

// Fetch fetches req's partition at req.Offset (an offset, not
// kafka.FirstOffset or LastOffset) in the next request to its leader,
// waiting up to req.MaxWait for records when nothing is there.
func (m *Mux) Fetch(ctx context.Context, req *kafka.FetchRequest) (*kafka.FetchResponse, error) {
	if req.Offset < 0 {
		return nil, fmt.Errorf("fetch %s-%d: offset %d is not an offset (resolve it with ListOffset first)", req.Topic, req.Partition, req.Offset)
	}
	tp := topicPartition{req.Topic, req.Partition}
	id, err := m.leader(ctx, tp)
	if err != nil {
		return nil, err
	}
	w := &waiter{ctx: ctx, req: req, tp: tp, broker: id, res: make(chan result, 1), maxBytes: int(req.MaxBytes)}
	select {
	case m.in <- w:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-m.ctx.Done():
		return nil, errMuxClosed
	}
	select {
	case r := <-w.res:
		return r.res, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-m.ctx.Done():
		return nil, errMuxClosed
	}
}

// leader returns the broker leading tp, reading the leaders again when
// they are unknown or stale.
func (m *Mux) leader(ctx context.Context, tp topicPartition) (int32, error) {
	m.mu.Lock()
	id, ok := m.leaders[tp]
	stale := m.stale
	m.mu.Unlock()
	if ok && !stale {
		return id, nil
	}
	m.metaMu.Lock()
	defer m.metaMu.Unlock()
	m.mu.Lock()
	id, ok = m.leaders[tp]
	if ok && !m.stale {
		m.mu.Unlock()
		return id, nil // refreshed meanwhile
	}
	m.topics[tp.topic] = true
	topics := make([]string, 0, len(m.topics))
	for t := range m.topics {
		topics = append(topics, t)
	}
	m.mu.Unlock()
	md, err := m.c.Metadata(ctx, &kafka.MetadataRequest{Topics: topics})
	if err != nil {
		return 0, fmt.Errorf("fetch %s-%d: read the partition leaders: %w", tp.topic, tp.partition, err)
	}
	leaders := map[topicPartition]int32{}
	for _, t := range md.Topics {
		if t.Error != nil {
			continue
		}
		for _, p := range t.Partitions {
			if p.Error == nil && p.Leader.ID >= 0 {
				leaders[topicPartition{t.Name, p.ID}] = int32(p.Leader.ID)
			}
		}
	}
	m.mu.Lock()
	m.leaders, m.stale = leaders, false
	m.mu.Unlock()
	id, ok = leaders[tp]
	if !ok {
		return 0, fmt.Errorf("fetch %s-%d: %w", tp.topic, tp.partition, kafka.LeaderNotAvailable)
	}
	return id, nil
}

func (m *Mux) markStale() {
	m.mu.Lock()
	m.stale = true
	m.mu.Unlock()
}

// loop owns the brokers' queues: it takes the readers' fetches, sends the
// requests and hands out their answers, until Close.
func (m *Mux) loop() {
	defer m.wg.Done()
	brokers := map[int32]*brokerState{}
	state := func(id int32) *brokerState {
		b := brokers[id]
		if b == nil {
			b = &brokerState{id: id, committed: m.committed}
			brokers[id] = b
		}
		return b
	}
	for {
		var b *brokerState
		select {
		case w := <-m.in:
			b = state(w.broker)
			b.waiting = append(b.waiting, w)
		case c := <-m.done:
			b = state(c.broker)
			if b.answer(c) {
				m.markStale()
			}
		case <-m.ctx.Done():
			return
		}
		for {
			batch, long := b.next()
			if batch == nil {
				break
			}
			m.wg.Add(1)
			go m.send(b.id, batch, long)
		}
	}
}

// next takes b's next request off its queues, nil when it has none to
// send now: a long poll when none is in flight (the parked readers
// first), else one that does not wait, up to MuxInflight in flight. A
// partition is in a request once (two readers of one partition, as a bulk
// restore's ranges, go in successive requests); readers whose context
// ended are answered and dropped.
func (b *brokerState) next() (batch []*waiter, long bool) {
	for b.inflight < MuxInflight && (len(b.waiting) > 0 || (!b.long && len(b.parked) > 0)) {
		long = !b.long
		cand := b.waiting
		if long {
			cand = append(b.parked, b.waiting...)
			b.parked = nil
		}
		var rest []*waiter
		in := make(map[topicPartition]bool, len(cand))
		bytes := 0 // the batch's partition limits, read_committed
		for _, w := range cand {
			switch {
			case w.ctx.Err() != nil:
				w.res <- result{err: w.ctx.Err()}
			case in[w.tp], b.committed && len(batch) > 0 && bytes+w.maxBytes > ResponseMaxBytes:
				rest = append(rest, w)
			default:
				in[w.tp] = true
				bytes += w.maxBytes
				batch = append(batch, w)
			}
		}
		b.waiting = rest
		if len(batch) == 0 {
			continue
		}
		b.inflight++
		b.long = b.long || long
		return batch, long
	}
	return nil, false
}

// send sends one request for batch and hands its answer to the loop.
func (m *Mux) send(broker int32, batch []*waiter, long bool) {
	defer m.wg.Done()
	var maxWait time.Duration
	if long {
		for _, w := range batch {
			maxWait = max(maxWait, w.req.MaxWait)
		}
	}
	timeout := m.c.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(m.ctx, timeout+maxWait)
	defer cancel()
	req := &MuxRequest{ClientID: m.clientID, Request: fetchapi.Request{
		ReplicaID:    -1,
		MaxWaitTime:  int32(min(maxWait/time.Millisecond, math.MaxInt32)),
		MinBytes:     1,
		MaxBytes:     ResponseMaxBytes,
		SessionID:    -1,
		SessionEpoch: -1,
	}}
	if m.committed {
		req.IsolationLevel = int8(kafka.ReadCommitted)
	}
	topic := map[string]int{}
	for _, w := range batch {
		i, ok := topic[w.tp.topic]
		if !ok {
			i = len(req.Topics)
			topic[w.tp.topic] = i
			req.Topics = append(req.Topics, fetchapi.RequestTopic{Topic: w.tp.topic})
		}
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, fetchapi.RequestPartition{
			Partition:          int32(w.tp.partition),
			CurrentLeaderEpoch: -1,
			FetchOffset:        w.req.Offset,
			LogStartOffset:     -1,
			PartitionMaxBytes:  int32(min(w.maxBytes, math.MaxInt32)),
		})
	}
	c := completion{broker: broker, batch: batch, long: long}
	msg, err := m.rt.RoundTrip(ctx, m.c.Addr, req)
	if err != nil {
		c.err = err
	} else if res, ok := msg.(*MuxResponse); ok {
		c.res = res
	} else {
		c.err = fmt.Errorf("fetch: unexpected response %T (a transport that wraps the client's must pass a MuxRequest on)", msg)
	}
	select {
	case m.done <- c:
	case <-m.ctx.Done():
	}
}

// answer hands each reader of c its partition's part of the response, or
// queues it again: first when the response's size limit left it out, or
// for the next long poll when a request that did not wait found it
// empty.
// It reports whether the partition leaders are to be read again.
func (b *brokerState) answer(c completion) (stale bool) {
	b.inflight--
	if c.long {
		b.long = false
	}
	if c.err != nil {
		for _, w := range c.batch {
			w.res <- result{err: fmt.Errorf("fetch %s-%d at offset %d: %w", w.tp.topic, w.tp.partition, w.req.Offset, c.err)}
		}
		return true
	}
	parts := make(map[topicPartition]*MuxPartition, len(c.batch))
	for i := range c.res.Topics {
		t := &c.res.Topics[i]
		for j := range t.Partitions {
			p := &t.Partitions[j]
			parts[topicPartition{t.Topic, int(p.Partition)}] = p
		}
	}
	var front []*waiter
	for _, w := range c.batch {
		p := parts[w.tp]
		var res *kafka.FetchResponse
		var err error
		switch {
		case c.res.ErrorCode != 0:
			err = kafka.Error(c.res.ErrorCode)
		case p == nil:
			err = fmt.Errorf("the partition is missing from the response")
		default:
			end := p.HighWatermark
			if b.committed && p.LastStableOffset >= 0 {
				end = p.LastStableOffset // what a read_committed reader can reach
			}
			res = &kafka.FetchResponse{
				Topic:            w.tp.topic,
				Partition:        w.tp.partition,
				HighWatermark:    end,
				LastStableOffset: p.LastStableOffset,
				LogStartOffset:   p.LogStartOffset,
			}
			if len(p.Records) > 0 {
				res.Records = NewRawRecords(p.Records, abortedIf(b.committed, p))
			}
			if p.ErrorCode != 0 {
				res.Error = kafka.Error(p.ErrorCode)
				stale = stale || leadership(res.Error)
			}
		}
		if err != nil {
			stale = true
			w.res <- result{err: fmt.Errorf("fetch %s-%d at offset %d: %w", w.tp.topic, w.tp.partition, w.req.Offset, err)}
			continue
		}
		if res.Error == nil && res.Records == nil {
			switch {
			case res.HighWatermark > w.req.Offset && w.starved < maxStarved:
				w.starved++
				w.maxBytes = min(4*max(w.maxBytes, 1), ResponseMaxBytes)
				// Records are there, but the response's limit was reached
				// before this partition: first in the next request.
				front = append(front, w)
				continue
			case !c.long:
				b.parked = append(b.parked, w)
				continue
			}
			res.Records = NewRawRecords(nil, nil)
		}
		w.res <- result{res: res}
	}
	if len(front) > 0 {
		b.waiting = append(front, b.waiting...)
	}
	return stale
}

// abortedIf is p's aborted transactions under read_committed.
func abortedIf(committed bool, p *MuxPartition) []Aborted {
	if !committed {
		return nil
	}
	return p.Aborted
}

// maxStarved is how many responses in a row may leave a partition out
// before its reader is answered with no records (a broker that keeps
// answering nothing below its high watermark is not asked again at once
// forever).
const maxStarved = 4

// leadership reports whether err says the partition's leader is not the
// broker the Mux thought.
func leadership(err error) bool {
	for _, e := range []kafka.Error{kafka.NotLeaderForPartition, kafka.UnknownTopicOrPartition, kafka.LeaderNotAvailable,
		kafka.FencedLeaderEpoch, kafka.UnknownLeaderEpoch, kafka.ReplicaNotAvailable, kafka.KafkaStorageError} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
