// Package produce is joiner's producer: it writes alerts and dead letters
// (and the pass-through contestant's copies) with kafka-go's Client, one
// Produce request per topic-partition, and implements join's Writer
// (WriteMessages, each message naming its topic).
//
// It replaces kafka.Writer on joiner's write path because the Writer asks
// the Transport for a topic's metadata for every message (14% of joiner's
// CPU) and holds every partial batch for BatchTimeout on a timer. Producer
// instead caches each topic's partition count, groups the messages of one
// call by partition (keeping their order within a partition), and sends
// the batches at once, concurrently across partitions, with acks=all.
// Each request's record batch is built in one pass into a reused buffer
// (appendRecordSet: the bytes kafka-go's encoder writes, at a tenth of its
// CPU and with no allocation) and sent with kafka-go's Client.RawProduce,
// so that all I/O is still kafka-go's.
//
// Partitioning is murmur2.Partition of the key, exactly as murmur2.Balancer
// places keyed messages (a nil key goes round-robin, as there). A topic's
// partition count is read once from the Transport's metadata, and again
// after an error that says the metadata is stale: partitions added to a
// topic while the worker runs are used after its restart (the topics must
// be co-partitioned again first anyway).
//
// # Errors and leader changes
//
// kafka-go's Transport routes a Produce request to the leader named in its
// cached cluster metadata, which it refreshes every MetadataTTL (6 s by
// default, randomized) and, besides, only after a CreateTopics response. A
// request to a partition whose leader moved fails with
// NOT_LEADER_OR_FOLLOWER, or with a network error when the old leader is
// down, until that cache is refreshed. Producer therefore forces a refresh
// after such an error (see Producer.refresh) and retries the partition's
// batch with backoff; other retriable errors (REQUEST_TIMED_OUT,
// NOT_ENOUGH_REPLICAS, ...) are retried without a refresh. Non-retriable
// errors (authorization, a topic that does not exist after a refresh) end
// WriteMessages at once; ConfigError tells them apart. WriteMessages
// returns nil only when every message is acknowledged; a retried batch may
// be written twice (at-least-once), never reordered within its partition,
// since a partition's next batch is sent only after the previous one is
// acknowledged.
//
// # Records the broker refuses
//
// A broker refuses a record batch, not a request, when a record in it is
// too large for the topic's max.message.bytes (MESSAGE_TOO_LARGE,
// RECORD_LIST_TOO_LARGE) or is itself invalid (INVALID_RECORD,
// CORRUPT_MESSAGE, INVALID_TIMESTAMP). Retrying never helps, and refusing
// the whole batch would refuse its good messages too: Producer sends such
// a batch again in halves, splitting each half refused again, and
// WriteMessages returns a
// *RejectedError naming only the messages refused alone, when every other
// message was acknowledged. Config.TopicMaxBytes keeps a batch of small
// messages within a topic's limit, and RecordBatchBytes lets a caller check
// a message before it is sent.
//
// # Idempotence and transactions
//
// With Config.Idempotent, or Config.TransactionalID (which implies it),
// every record batch carries the producer id and epoch from
// InitProducerID and the partition's next sequence number (the batch's
// first record; it advances by the batch's records and wraps from
// MaxInt32 to 0, as Kafka's clients do). A batch is built once and every
// retry sends the same bytes, so a broker that wrote it but whose
// acknowledgement was lost acknowledges the retry without writing it
// again (DUPLICATE_SEQUENCE_NUMBER counts as success). One partition's
// batches are sent one at a time, across concurrent WriteMessages calls
// too. A batch whose outcome stays unknown (its retries ran out) leaves the
// partition's sequence unknown: an idempotent producer then takes a new
// producer id before its next write; a transactional one must abort, and
// Abort bumps the epoch (InitProducerID with the current id and epoch,
// KIP-360), which restarts the sequences at 0. An idempotent producer
// whose sequence the broker lost (OUT_OF_ORDER_SEQUENCE_NUMBER,
// UNKNOWN_PRODUCER_ID) takes a new producer id and sends the batch again
// once: at-least-once for that batch.
//
// A transactional Producer is used as Kafka's Java producer is:
// InitProducerID once (FindCoordinator with key type transaction, done by
// kafka-go's Transport for every transactional request, so a retry after
// COORDINATOR_NOT_AVAILABLE or NOT_COORDINATOR goes to the new
// coordinator; it fences an older producer with the same id and aborts
// what that one left open), then per transaction Begin, WriteMessages
// (the partitions of a call are added to the transaction with one
// AddPartitionsToTxn before its first batch to them), SendOffsets
// (AddOffsetsToTxn, then TxnOffsetCommit to the group coordinator with
// the generation, member id and instance id, KIP-447), and Commit or
// Abort (EndTxn). The requests are kafka-go's protocol messages sent
// through the Transport (TxnOffsetCommit with committed leader epoch -1,
// which Client.TxnOffsetCommit leaves 0).
//
// Errors, as the Java producer classifies them:
//
//	error                                   on                      result
//	CONCURRENT_TRANSACTIONS                 coordinator requests    retried after 2-20 ms, for up to 30 s
//	COORDINATOR_LOAD_IN_PROGRESS,           coordinator requests    retried with Backoff, up to Attempts
//	  COORDINATOR_NOT_AVAILABLE,
//	  NOT_COORDINATOR, REQUEST_TIMED_OUT,
//	  network errors
//	PRODUCER_FENCED                         any                     ErrFenced, for good
//	INVALID_PRODUCER_EPOCH                  coordinator requests    ErrFenced, for good
//	INVALID_PRODUCER_EPOCH,                 Produce                 ErrAbortable (KIP-588, KIP-360)
//	  OUT_OF_ORDER_SEQUENCE_NUMBER,
//	  UNKNOWN_PRODUCER_ID
//	TRANSACTION_ABORTABLE                   any                     ErrAbortable
//	ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,  TxnOffsetCommit         ErrAbortable
//	  FENCED_INSTANCE_ID
//	a Produce error past its retries        Produce (transactional) ErrAbortable
//	INVALID_TXN_STATE                       any                     ErrTxnState
//
// Protocol versions (the highest kafka-go v0.4.51 and the broker share;
// TestVersions and TestVersionsRealBroker print them), against Kafka
// 4.1.2 and kfake alike: Produce v8, Fetch v11, FindCoordinator v2,
// InitProducerId v4, AddPartitionsToTxn v3, AddOffsetsToTxn v3,
// TxnOffsetCommit v3, EndTxn v3 (docs/kafka.md).
package produce

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/joiner-dev/joiner/internal/backoff"
	"github.com/joiner-dev/joiner/murmur2"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
)

// Config configures a Producer. Zero values take the defaults shown.
type Config struct {
	// Addr are the bootstrap brokers. Required.
	Addr net.Addr
	// Transport carries the requests (TLS and SASL settings). Default:
	// kafka-go's default transport.
	Transport kafka.RoundTripper
	// Timeout bounds each request. Default: 10s (kafka.Writer's
	// WriteTimeout).
	Timeout time.Duration
	// Attempts is how many times one partition's batch is sent before a
	// retriable error is returned. Default: 20 (at least 10 s with the
	// default Backoff).
	Attempts int
	// MaxBatchBytes bounds the record batch of one Produce request (an
	// estimate of its encoded size, never below it): a partition's
	// messages beyond it go in further requests, one after the other.
	// Keep it at or below the topics' max.message.bytes. Default:
	// 1,000,000 (Kafka's default max.message.bytes is 1,048,588).
	MaxBatchBytes int
	// Backoff is the delay between attempts. Default: 50ms doubling to 1s.
	// Along with Attempts it should outlast the Transport's metadata TTL
	// (6s), its fallback when a forced refresh fails.
	Backoff backoff.Policy
	// TopicMaxBytes are the max.message.bytes of topics (read from the
	// cluster at start): a request's record batch for one of them stays
	// within it as well as within MaxBatchBytes. A broker refuses a batch
	// larger than its topic's max.message.bytes (MESSAGE_TOO_LARGE) even
	// when each record in it would fit.
	TopicMaxBytes map[string]int

	// Idempotent makes every record batch carry a producer id, epoch and
	// per-partition sequence numbers, so that the broker drops a retried
	// batch it already wrote (see "Idempotence and transactions").
	Idempotent bool
	// TransactionalID makes the Producer transactional (and idempotent):
	// call InitProducerID once, then Begin, WriteMessages, SendOffsets
	// and Commit or Abort. Two producers with the same id fence each
	// other: the later one wins, the earlier one gets ErrFenced.
	TransactionalID string
	// TransactionTimeout is how long the coordinator lets a transaction
	// stay open before it aborts it. Default: 10s. The broker's
	// transaction.max.timeout.ms (15 minutes by default) bounds it.
	TransactionTimeout time.Duration
}

// The defaults of Config's zero fields, applied by withDefaults.
const (
	DefaultTimeout            = 10 * time.Second // kafka.Writer's WriteTimeout
	DefaultAttempts           = 20
	DefaultMaxBatchBytes      = 1_000_000
	DefaultBackoffMin         = 50 * time.Millisecond // Backoff's Min and Max
	DefaultBackoffMax         = time.Second
	DefaultTransactionTimeout = 10 * time.Second
)

// Validate reports the first problem of c: no Addr. Zero values of the
// other fields take their defaults (withDefaults), and so do negative
// ones.
func (c Config) Validate() error {
	if c.Addr == nil {
		return errors.New("produce: Config.Addr is required (the bootstrap brokers)")
	}
	return nil
}

// withDefaults returns c with every zero (or negative) field set to the
// default its doc comment names: the one place produce's defaults are
// applied.
func (c Config) withDefaults() Config {
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Attempts <= 0 {
		c.Attempts = DefaultAttempts
	}
	if c.MaxBatchBytes <= 0 {
		c.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if c.Backoff == (backoff.Policy{}) {
		c.Backoff = backoff.Policy{Min: DefaultBackoffMin, Max: DefaultBackoffMax}
	}
	if c.TransactionTimeout <= 0 {
		c.TransactionTimeout = DefaultTransactionTimeout
	}
	return c
}

// Producer writes messages to Kafka. It is safe for concurrent use; calls
// from different goroutines are not ordered with respect to each other.
type Producer struct {
	client     *kafka.Client
	attempts   int
	batchBytes int
	topicBytes map[string]int // TopicMaxBytes, read only
	backoff    backoff.Policy

	mu     sync.RWMutex
	counts map[string]int // partition count per topic

	refreshMu  sync.Mutex
	refreshGen atomic.Uint64 // completed forced refreshes

	roundRobin murmur2.Balancer // nil keys
	scratch    sync.Pool        // *call

	txn    *txnState  // nil unless idempotent or transactional
	initMu sync.Mutex // one InitProducerID at a time (idempotent)
}

// New returns a Producer.
func New(cfg Config) (*Producer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	p := &Producer{
		client:     &kafka.Client{Addr: cfg.Addr, Transport: cfg.Transport, Timeout: cfg.Timeout},
		attempts:   cfg.Attempts,
		batchBytes: cfg.MaxBatchBytes,
		topicBytes: maps.Clone(cfg.TopicMaxBytes),
		backoff:    cfg.Backoff,
		counts:     make(map[string]int),
	}
	if cfg.Idempotent || cfg.TransactionalID != "" {
		p.txn = &txnState{
			id: cfg.TransactionalID, timeout: cfg.TransactionTimeout, pid: -1, epoch: -1,
			added: map[topicPartition]bool{}, groups: map[string]bool{}, seqs: map[topicPartition]*partitionSeq{},
		}
	}
	return p, nil
}

// Close releases nothing today; it is there so that the Producer can
// replace a kafka.Writer where a Close is expected.
func (p *Producer) Close() error { return nil }

// batch is the messages of one call that go to one topic-partition, as
// indexes into the call's messages, in their order.
type batch struct {
	topic     string
	partition int
	msgs      []kafka.Message // the call's
	idx       []int32         // into msgs
	window    []int32         // of idx: the request being sent
	buf       []byte          // its record set
	err       error
	// abandoned: a request over buf ended with a context error, so the
	// Transport may still be writing it (it copies buf to the connection
	// from its own goroutine): buf must not be reused (WriteMessages).
	abandoned bool
	rejected  []Rejected // messages refused alone (see sendEach)
}

// call is the reusable scratch of one WriteMessages.
type call struct {
	batches []batch
}

// Rejected is a message the broker refused on its own: its index in the
// messages given to WriteMessages and the broker's error.
type Rejected struct {
	Index int
	Err   error
}

// RejectedError is WriteMessages' error when the broker refused some
// messages themselves (too large, or invalid: see the package doc) and
// acknowledged every other one. Writing the refused ones again fails the
// same way: a caller sends something else in their place, or nothing.
type RejectedError struct {
	Rejected []Rejected // in the order of the messages
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("the broker refused %d of the messages (the others were written): %v", len(e.Rejected), e.Rejected[0].Err)
}

// Unwrap returns the broker's errors, one per refused message.
func (e *RejectedError) Unwrap() []error {
	errs := make([]error, len(e.Rejected))
	for i, r := range e.Rejected {
		errs[i] = r.Err
	}
	return errs
}

// WriteMessages writes msgs, each to its Topic, and waits until Kafka has
// acknowledged all of them (acks=all). A message's Partition is ignored:
// the partition is murmur2 of its key. It returns nil only when every
// message is acknowledged, and a *RejectedError when the only messages not
// acknowledged were refused by the broker on their own; on any other
// error some batches may have been written (the caller retries them all:
// at-least-once).
func (p *Producer) WriteMessages(ctx context.Context, msgs ...kafka.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	c, _ := p.scratch.Get().(*call)
	if c == nil {
		c = new(call)
	}
	defer func() {
		for i := range c.batches {
			if c.batches[i].abandoned {
				// A request still being written may read a batch's
				// buffer: leave the scratch to the garbage collector.
				return
			}
		}
		for i := range c.batches {
			b := &c.batches[i]
			b.msgs, b.window, b.err = nil, nil, nil // no stale references
			b.rejected = b.rejected[:0]
		}
		p.scratch.Put(c)
	}()
	if err := p.group(ctx, c, msgs); err != nil {
		return err
	}
	if p.txn != nil {
		if err := p.prepare(ctx, c); err != nil {
			return err
		}
	}
	if len(c.batches) == 1 {
		b := &c.batches[0]
		if err := p.send(ctx, b); err != nil {
			return err
		}
		return rejectedError(c.batches)
	}
	var wg sync.WaitGroup
	for i := range c.batches {
		wg.Add(1)
		go func(b *batch) {
			defer wg.Done()
			b.err = p.send(ctx, b)
		}(&c.batches[i])
	}
	wg.Wait()
	var errs []error
	for i := range c.batches {
		if err := c.batches[i].err; err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return rejectedError(c.batches)
}

// rejectedError is the *RejectedError of the messages the batches' sends
// refused, or nil.
func rejectedError(batches []batch) error {
	var rej []Rejected
	for i := range batches {
		rej = append(rej, batches[i].rejected...)
	}
	if len(rej) == 0 {
		return nil
	}
	slices.SortFunc(rej, func(a, b Rejected) int { return a.Index - b.Index })
	return &RejectedError{Rejected: rej}
}

// group fills c.batches with msgs grouped by topic-partition, in order.
func (p *Producer) group(ctx context.Context, c *call, msgs []kafka.Message) error {
	c.batches = c.batches[:0]
	last := -1 // the batch of the previous message: the usual case
	lastTopic, lastCount := "", 0
	for i := range msgs {
		m := &msgs[i]
		if m.Topic == "" {
			return fmt.Errorf("produce: message %d names no topic (set kafka.Message.Topic)", i)
		}
		if m.Topic != lastTopic || lastCount == 0 {
			n, err := p.partitions(ctx, m.Topic)
			if err != nil {
				return err
			}
			lastTopic, lastCount = m.Topic, n
		}
		part := p.partition(m, lastCount)
		if last < 0 || c.batches[last].topic != m.Topic || c.batches[last].partition != part {
			last = -1
			for j := range c.batches {
				if c.batches[j].topic == m.Topic && c.batches[j].partition == part {
					last = j
					break
				}
			}
			if last < 0 {
				if len(c.batches) < cap(c.batches) { // reuse its idx
					c.batches = c.batches[:len(c.batches)+1]
				} else {
					c.batches = append(c.batches, batch{})
				}
				last = len(c.batches) - 1
				b := &c.batches[last]
				b.topic, b.partition, b.err, b.abandoned = m.Topic, part, nil, false
				b.idx, b.rejected = b.idx[:0], b.rejected[:0]
			}
		}
		b := &c.batches[last]
		b.msgs = msgs
		b.idx = append(b.idx, int32(i))
	}
	return nil
}

// partition is murmur2.Balancer's choice among n partitions.
func (p *Producer) partition(m *kafka.Message, n int) int {
	if m.Key == nil {
		return p.roundRobin.Balance(*m, identity(n)...)
	}
	return murmur2.Partition(m.Key, n)
}

func identity(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// batchOverhead is the size of a record batch's header, and recordOverhead
// the most a record adds to its key, value and headers (its length,
// attributes, timestamp and offset deltas and the lengths of its fields,
// as varints).
const (
	batchOverhead  = 61
	recordOverhead = 5 + 1 + 10 + 5 + 5 + 5 + 5
	headerOverhead = 5 + 5
)

// RecordBatchBytes is at least the size of a record batch holding m
// alone: what a broker compares with the topic's max.message.bytes. A
// message for which it is above the limit is refused.
func RecordBatchBytes(m *kafka.Message) int { return batchOverhead + recordSize(m) }

// recordSize is at least the encoded size of m in a record batch.
func recordSize(m *kafka.Message) int {
	n := recordOverhead + len(m.Key) + len(m.Value)
	for _, h := range m.Headers {
		n += headerOverhead + len(h.Key) + len(h.Value)
	}
	return n
}

// send writes one batch in requests of at most batchBytes, one after the
// other (a partition's requests are never in flight together, so a retry
// cannot reorder them).
func (p *Producer) send(ctx context.Context, b *batch) error {
	limit := p.batchBytes
	if n, ok := p.topicBytes[b.topic]; ok && n > 0 {
		limit = min(limit, n)
	}
	for start := 0; start < len(b.idx); {
		end, size := start, batchOverhead
		for end < len(b.idx) {
			n := recordSize(&b.msgs[b.idx[end]])
			if end > start && size+n > limit {
				break
			}
			size += n
			end++
		}
		b.window = b.idx[start:end]
		err := p.sendRequest(ctx, b)
		if err != nil && rejectsRecords(err) {
			err = p.sendEach(ctx, b, err)
		}
		if err != nil {
			if start > 0 {
				return fmt.Errorf("%w (the first %d messages for %s-%d were written)", err, start, b.topic, b.partition)
			}
			return err
		}
		start = end
	}
	return nil
}

// sendEach writes the messages of b.window after the broker refused the
// records of the window (cause): in halves, in order, each half that is
// refused again split again, so that the messages the broker refuses
// alone go to b.rejected and the others are written, in a few requests
// more than the refused ones (a window too large as a whole, each message
// fitting, ends in halves that fit). It returns the first other error.
func (p *Producer) sendEach(ctx context.Context, b *batch, cause error) error {
	window := b.window
	if len(window) == 1 {
		b.rejected = append(b.rejected, Rejected{Index: int(window[0]), Err: cause})
		return nil
	}
	half := len(window) / 2
	for _, w := range [][]int32{window[:half], window[half:]} {
		b.window = w
		err := p.sendRequest(ctx, b)
		if err != nil && rejectsRecords(err) {
			err = p.sendEach(ctx, b, err)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// rejectsRecords reports whether err is the broker refusing the records
// of a batch themselves (their size or content), which no retry changes.
func rejectsRecords(err error) bool {
	var kerr kafka.Error
	if !errors.As(err, &kerr) {
		return false
	}
	switch kerr {
	case kafka.MessageSizeTooLarge, kafka.RecordListTooLarge, kafka.InvalidRecord, kafka.InvalidMessage, kafka.InvalidTimestamp:
		return true
	}
	return false
}

// ConfigError reports whether err is one that no retry fixes until the
// cluster or the worker's configuration changes: an authorization or
// authentication failure, a missing or invalid topic, a request the broker
// does not support. Refused records are not (see RejectedError); nor are
// network errors, leader changes and timeouts, which retries outlast.
func ConfigError(err error) bool {
	var kerr kafka.Error
	if !errors.As(err, &kerr) || rejectsRecords(err) {
		return false
	}
	switch kerr {
	case kafka.UnknownTopicOrPartition, kafka.UnknownTopicID:
		return true // a refresh found no such topic
	}
	return classify(kerr) == fatal
}

// sendRequest writes b.window in one request, retrying retriable errors.
func (p *Producer) sendRequest(ctx context.Context, b *batch) error {
	if p.txn != nil {
		return p.sendSequenced(ctx, b)
	}
	b.buf = appendRecordSet(b.buf[:0], b.msgs, b.window, time.Now())
	return p.sendBuilt(ctx, b, "")
}

// sendBuilt sends b.buf, retrying retriable errors: it is sent
// byte-identical every time.
func (p *Producer) sendBuilt(ctx context.Context, b *batch, transactionalID string) error {
	req := &kafka.RawProduceRequest{
		Topic:           b.topic,
		Partition:       b.partition,
		RequiredAcks:    kafka.RequireAll,
		TransactionalID: transactionalID,
	}
	where := func() string { return fmt.Sprintf("writing %d messages to %s-%d", len(b.window), b.topic, b.partition) }
	var (
		stopped bool // the error already says where
		refresh bool // before the next attempt
		gen     uint64
	)
	err := backoff.Do(ctx, p.backoff, func(attempt int, err error, _ time.Duration) error {
		if attempt+1 >= p.attempts {
			return fmt.Errorf("giving up after %d attempts: %w", attempt+1, err)
		}
		if refresh {
			p.refresh(ctx, gen, b.topic)
		}
		return nil
	}, func(ctx context.Context) error {
		gen = p.refreshGen.Load()
		// A reader of its own per attempt: an attempt that timed out may
		// still be read by the Transport's connection goroutine.
		req.RawRecords = protocol.RawRecordSet{Reader: bytes.NewReader(b.buf)}
		err := p.produce(ctx, req)
		if err == nil {
			return nil
		}
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			b.abandoned = true
		}
		if ctx.Err() != nil {
			return backoff.Permanent(ctx.Err())
		}
		if p.txn != nil {
			if tk, ok := classifyTxn(err, opProduce); ok {
				if tk == txnDuplicate {
					return nil // written by an earlier attempt
				}
				stopped = true
				return backoff.Permanent(&sequenceError{kind: tk, err: fmt.Errorf("%s: %w", where(), err)})
			}
		}
		kind := classify(err)
		if kind == unknownTopic {
			// The Transport's metadata may predate the topic: refresh it
			// and look again; a topic still missing is an error.
			p.refresh(ctx, gen, b.topic)
			stopped = true
			if n, lerr := p.partitions(ctx, b.topic); lerr != nil {
				return backoff.Permanent(lerr)
			} else if n <= b.partition {
				return backoff.Permanent(fmt.Errorf("writing to %s-%d: the topic has %d partitions now (it was recreated or changed under a running worker): restart the worker: %w",
					b.topic, b.partition, n, err))
			}
			stopped = false
			kind = refreshRetry
		}
		if kind == fatal {
			return backoff.Permanent(fmt.Errorf("%w (not retriable: %s)", err, advice(err)))
		}
		refresh = kind == refreshRetry
		return err
	})
	if err == nil || stopped {
		return err
	}
	return fmt.Errorf("%s: %w", where(), err)
}

// produce sends one Produce request and returns its error or the
// partition's.
func (p *Producer) produce(ctx context.Context, req *kafka.RawProduceRequest) error {
	res, err := p.client.RawProduce(ctx, req)
	if err != nil {
		return err
	}
	if res.Error != nil {
		return res.Error
	}
	return nil
}

type errKind int

const (
	retry        errKind = iota // retry as is
	refreshRetry                // refresh the Transport's metadata, then retry
	unknownTopic                // refresh, check the topic exists, then retry
	fatal                       // return at once
)

// classify says what to do after err.
func classify(err error) errKind {
	var kerr kafka.Error
	if errors.As(err, &kerr) {
		switch kerr {
		case kafka.NotLeaderForPartition, kafka.LeaderNotAvailable, kafka.FencedLeaderEpoch,
			kafka.UnknownLeaderEpoch, kafka.NetworkException, kafka.KafkaStorageError,
			kafka.PreferredLeaderNotAvailable, kafka.EligibleLeadersNotAvailable, kafka.BrokerNotAvailable,
			kafka.ReplicaNotAvailable:
			return refreshRetry
		case kafka.UnknownTopicOrPartition, kafka.UnknownTopicID:
			return unknownTopic
		}
		if kerr.Temporary() {
			return retry
		}
		return fatal
	}
	switch {
	case errors.Is(err, protocol.ErrNoTopic), errors.Is(err, protocol.ErrNoPartition):
		// The Transport's metadata does not know the topic-partition.
		return unknownTopic
	default:
		// No leader in the Transport's metadata, a network error (the
		// leader stopped), a request timeout, or a TLS or SASL failure:
		// refresh and retry, up to Attempts; the caller sees it then.
		return refreshRetry
	}
}

// advice says what to do about a non-retriable error.
func advice(err error) string {
	switch {
	case errors.Is(err, kafka.MessageSizeTooLarge), errors.Is(err, kafka.RecordListTooLarge):
		return "a record or the batch exceeds the topic's max.message.bytes or the broker's message.max.bytes; raise them"
	case errors.Is(err, kafka.TopicAuthorizationFailed), errors.Is(err, kafka.ClusterAuthorizationFailed),
		errors.Is(err, kafka.SASLAuthenticationFailed):
		return "grant the worker's principal WRITE (and DESCRIBE) on the topic, or fix its credentials"
	case errors.Is(err, kafka.InvalidTopic):
		return "the topic name is invalid"
	case errors.Is(err, kafka.InvalidRequiredAcks), errors.Is(err, kafka.UnsupportedVersion):
		return "the broker does not support this producer's requests (Kafka 0.11 or newer is needed)"
	default:
		return "see the broker's logs"
	}
}

// partitions returns topic's partition count, from the cache or from the
// Transport's metadata.
func (p *Producer) partitions(ctx context.Context, topic string) (int, error) {
	p.mu.RLock()
	n := p.counts[topic]
	p.mu.RUnlock()
	if n > 0 {
		return n, nil
	}
	n, err := p.lookup(ctx, topic)
	if errors.Is(err, kafka.UnknownTopicOrPartition) {
		// The Transport's cached metadata may predate the topic.
		p.refresh(ctx, p.refreshGen.Load(), topic)
		n, err = p.lookup(ctx, topic)
	}
	if errors.Is(err, kafka.UnknownTopicOrPartition) {
		return 0, fmt.Errorf("produce: topic %q does not exist: create it (joiner run --create-topics, or kafka-topics.sh --create): %w", topic, err)
	}
	if err != nil {
		return 0, fmt.Errorf("produce: looking up the partitions of topic %q: %w", topic, err)
	}
	p.mu.Lock()
	p.counts[topic] = n
	p.mu.Unlock()
	return n, nil
}

func (p *Producer) lookup(ctx context.Context, topic string) (int, error) {
	md, err := p.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return 0, err
	}
	for _, t := range md.Topics {
		if t.Name != topic {
			continue
		}
		if t.Error != nil {
			return 0, t.Error
		}
		if len(t.Partitions) == 0 {
			return 0, kafka.UnknownTopicOrPartition
		}
		return len(t.Partitions), nil
	}
	return 0, kafka.UnknownTopicOrPartition
}

// refreshTopic is an invalid topic name ('!' is not allowed): the
// validate-only CreateTopics request that refresh sends for it, with zero
// partitions and replicas, can create nothing.
const refreshTopic = "joiner!metadata-refresh"

// refresh makes the Transport reload its cluster metadata (the partition
// leaders) and waits for it, unless another refresh completed since gen
// was read. It drops the cached partition count of topic.
//
// kafka-go's Transport has no call for this: it reloads its metadata on a
// timer (MetadataTTL) and after every CreateTopics response, waiting for
// the reload before it returns the response. So refresh sends a
// validate-only CreateTopics for an invalid topic (refreshTopic): the
// broker answers with a per-topic error (INVALID_TOPIC_EXCEPTION, or an
// authorization error for a principal that may not create topics), creates
// nothing, and the Transport reloads. (A request it accepted would make
// the Transport wait for the topic to appear, here for 5 s.) When that request fails (its broker is the one
// that stopped), the Transport's timer is the fallback; the retries
// outlast it.
func (p *Producer) refresh(ctx context.Context, gen uint64, topic string) {
	p.mu.Lock()
	delete(p.counts, topic)
	p.mu.Unlock()
	p.refreshMu.Lock()
	defer p.refreshMu.Unlock()
	if p.refreshGen.Load() != gen {
		return // someone refreshed while we waited
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, _ = p.client.CreateTopics(ctx, &kafka.CreateTopicsRequest{
		// Zero partitions and replicas are invalid too: a broker that
		// accepts the name (kfake does) still refuses the topic.
		Topics:       []kafka.TopicConfig{{Topic: refreshTopic, NumPartitions: 0, ReplicationFactor: 0}},
		ValidateOnly: true,
	})
	p.refreshGen.Add(1)
}
