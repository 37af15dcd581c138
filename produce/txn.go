package produce

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/joiner-dev/joiner/internal/backoff"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/addoffsetstotxn"
	"github.com/segmentio/kafka-go/protocol/addpartitionstotxn"
	"github.com/segmentio/kafka-go/protocol/endtxn"
	"github.com/segmentio/kafka-go/protocol/initproducerid"
	"github.com/segmentio/kafka-go/protocol/txnoffsetcommit"
)

// The errors of an idempotent or transactional Producer. Each is wrapped
// with what failed (errors.Is finds it, and the broker's kafka.Error
// beneath it).
var (
	// ErrFenced is returned by every call of a transactional Producer once
	// the coordinator has fenced it: another producer initialized the same
	// transactional id with a newer epoch (PRODUCER_FENCED, or
	// INVALID_PRODUCER_EPOCH from the coordinator). Nothing the fenced
	// producer writes becomes visible. The coordinator also bumps the
	// epoch of a transaction that stayed open past TransactionTimeout and
	// aborts it: the producer's next write fails (ErrAbortable, or
	// ErrTxnState on kfake) and its Abort gets ErrFenced. The caller
	// must stop using the Producer (and stop processing what it was
	// committing): a new incarnation may be writing. To go on, it makes a
	// new Producer and calls InitProducerID (which fences any other).
	ErrFenced = errors.New("produce: the producer is fenced by a newer producer with the same transactional id")

	// ErrAbortable is returned when the current transaction cannot commit
	// any more: TRANSACTION_ABORTABLE, a batch whose outcome is unknown
	// (its retries ran out, or OUT_OF_ORDER_SEQUENCE_NUMBER,
	// UNKNOWN_PRODUCER_ID or INVALID_PRODUCER_EPOCH on a Produce), or
	// offsets the group refused (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
	// FENCED_INSTANCE_ID: the member lost its partitions). The caller must
	// Abort, rewind its input to the committed offsets, and Begin again.
	// WriteMessages, SendOffsets and Commit return it until Abort.
	ErrAbortable = errors.New("produce: the transaction must be aborted")

	// ErrTxnState is returned when the coordinator's view of the
	// transaction disagrees with the producer's (INVALID_TXN_STATE), or a
	// call comes out of order: WriteMessages or SendOffsets without Begin,
	// Begin inside a transaction, a transactional call before
	// InitProducerID. It is a bug or a lost producer state: call
	// InitProducerID again (it aborts what the coordinator holds open).
	ErrTxnState = errors.New("produce: invalid transaction state")
)

// errTransactionAbortable is TRANSACTION_ABORTABLE (KIP-890), which
// kafka-go v0.4.51 does not name.
const errTransactionAbortable kafka.Error = 120

// txnState is the idempotence and transaction state of a Producer.
type txnState struct {
	id      string        // transactional id; "" for idempotent only
	timeout time.Duration // transaction timeout

	mu    sync.Mutex
	pid   int64 // -1 until initialized
	epoch int16
	// bump is set when a batch's outcome is unknown: its partition's
	// sequence may be off, so the producer's epoch must be bumped (or, for
	// an idempotent producer, a new id taken) before the next batch.
	bump      bool
	fenced    error // set once: every call returns it
	inTxn     bool
	abortable error // set inside a transaction that must abort
	added     map[topicPartition]bool
	groups    map[string]bool
	// prevAdded and prevGroups are what the last committed transaction
	// added: the next one adds them with its first AddPartitionsToTxn
	// (and AddOffsetsToTxn right after it), so that a steady stream of
	// transactions sends one AddPartitionsToTxn each and none on the
	// commit path.
	prevAdded  []topicPartition
	prevGroups []string
	// seqs holds each partition's next sequence number for pid/epoch.
	seqs map[topicPartition]*partitionSeq
}

type topicPartition struct {
	topic     string
	partition int
}

// partitionSeq is one partition's next sequence number. Its mutex is held
// from taking a sequence number until the batch is acknowledged or given
// up, so that one partition's batches are sent one at a time, in sequence
// order, across concurrent WriteMessages calls.
type partitionSeq struct {
	mu   sync.Mutex
	next int32
}

// nextSequence is Kafka's DefaultRecordBatch.incrementSequence: the
// sequence number after n records from seq, wrapping from MaxInt32 to 0.
func nextSequence(seq, n int32) int32 {
	if seq > (1<<31-1)-n {
		return n - ((1<<31 - 1) - seq) - 1
	}
	return seq + n
}

// sequence returns the locked sequence state of tp; the caller unlocks it.
func (s *txnState) sequence(tp topicPartition) *partitionSeq {
	s.mu.Lock()
	ps := s.seqs[tp]
	if ps == nil {
		ps = new(partitionSeq)
		s.seqs[tp] = ps
	}
	s.mu.Unlock()
	ps.mu.Lock()
	return ps
}

// producer returns what the next batch carries: the producer id, epoch,
// and the transactional bit.
func (s *txnState) producer() (batchProducer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fenced != nil {
		return batchProducer{}, s.fenced
	}
	if s.abortable != nil {
		return batchProducer{}, s.abortable
	}
	return batchProducer{id: s.pid, epoch: s.epoch, transactional: s.id != ""}, nil
}

// opKind says which request an error came back on: the Java producer
// treats INVALID_PRODUCER_EPOCH on a Produce as abortable (KIP-588), on a
// coordinator request as fenced.
type opKind int

const (
	opProduce opKind = iota
	opCoordinator
	opGroup // TxnOffsetCommit, to the group coordinator
)

type txnErrKind int

const (
	txnRetry     txnErrKind = iota // back off and send again (coordinator may have moved)
	txnAbortable                   // the transaction must abort
	txnFenced                      // stop: a newer producer owns the id
	txnBadState                    // INVALID_TXN_STATE
	txnDuplicate                   // the batch was written before: success
	txnFatal                       // return as is
)

// classifyTxn classifies the errors that idempotence and transactions add,
// as Kafka's Java producer does. ok is false for an error it does not
// know: the caller falls back to classify.
func classifyTxn(err error, op opKind) (kind txnErrKind, ok bool) {
	var kerr kafka.Error
	if !errors.As(err, &kerr) {
		if op == opProduce {
			return 0, false
		}
		return txnRetry, true // a network error: the Transport reconnects
	}
	switch kerr {
	case kafka.ProducerFenced:
		return txnFenced, true
	case kafka.InvalidProducerEpoch:
		if op == opProduce {
			return txnAbortable, true
		}
		return txnFenced, true
	case kafka.OutOfOrderSequenceNumber, kafka.UnknownProducerId, errTransactionAbortable:
		return txnAbortable, true
	case kafka.DuplicateSequenceNumber:
		if op == opProduce {
			return txnDuplicate, true
		}
	case kafka.InvalidTransactionState:
		return txnBadState, true
	case kafka.ConcurrentTransactions, kafka.GroupCoordinatorNotAvailable, kafka.NotCoordinatorForGroup,
		kafka.GroupLoadInProgress, kafka.RequestTimedOut, kafka.NetworkException:
		// COORDINATOR_NOT_AVAILABLE and NOT_COORDINATOR: kafka-go's
		// Transport finds the coordinator again for every request, so a
		// retry goes to the new one.
		if op != opProduce {
			return txnRetry, true
		}
	case kafka.UnknownTopicOrPartition:
		if op == opCoordinator { // AddPartitionsToTxn before metadata propagated
			return txnRetry, true
		}
	case kafka.IllegalGeneration, kafka.UnknownMemberId, kafka.FencedInstanceID, kafka.GroupAuthorizationFailed:
		if op == opGroup {
			return txnAbortable, true
		}
	case kafka.InvalidProducerIDMapping:
		if op != opProduce {
			return txnBadState, true
		}
	}
	if op == opProduce {
		return 0, false
	}
	if kerr.Temporary() {
		return txnRetry, true
	}
	return txnFatal, true
}

// wrapTxn wraps err, an error of kind, with its sentinel and what failed
// (when err does not say it).
func wrapTxn(kind txnErrKind, what string, err error) error {
	if what == "" {
		switch kind {
		case txnFenced:
			return fmt.Errorf("%w: %w (stop this producer: another process uses its transactional id)", ErrFenced, err)
		case txnAbortable:
			return fmt.Errorf("%w: %w", ErrAbortable, err)
		case txnBadState:
			return fmt.Errorf("%w: %w (call InitProducerID again)", ErrTxnState, err)
		}
		return err
	}
	switch kind {
	case txnFenced:
		return fmt.Errorf("%s: %w: %w (stop this producer: another process uses its transactional id)", what, ErrFenced, err)
	case txnAbortable:
		return fmt.Errorf("%s: %w: %w", what, ErrAbortable, err)
	case txnBadState:
		return fmt.Errorf("%s: %w: %w (call InitProducerID again)", what, ErrTxnState, err)
	default:
		return fmt.Errorf("%s: %w", what, err)
	}
}

// fail records err of kind on the state: fenced for good, or the open
// transaction abortable.
func (s *txnState) fail(kind txnErrKind, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch kind {
	case txnFenced:
		if s.fenced == nil {
			s.fenced = err
		}
	case txnAbortable, txnBadState:
		if s.inTxn && s.abortable == nil {
			s.abortable = err
		}
	}
}

// roundTrip sends msg through the Producer's Transport with its timeout.
func (p *Producer) roundTrip(ctx context.Context, msg protocol.Message) (protocol.Message, error) {
	ctx, cancel := context.WithTimeout(ctx, p.client.Timeout)
	defer cancel()
	rt := p.client.Transport
	if rt == nil {
		rt = kafka.DefaultTransport
	}
	return rt.RoundTrip(ctx, p.client.Addr, msg)
}

// coordinate sends one coordinator request with call, retrying what
// classifyTxn says is retriable, with backoff, up to Attempts. call
// returns the request's error (a kafka.Error from the response's error
// code, or a network error).
//
// CONCURRENT_TRANSACTIONS is the exception: the coordinator is still
// writing the previous transaction's markers, which takes milliseconds,
// so it is retried after concurrentTxnBackoff (2 ms doubling to 20 ms, as
// Kafka's Java producer retries AddPartitionsToTxn after 20 ms rather
// than retry.backoff.ms), for up to concurrentTxnPatience, without
// counting against Attempts. With the default 50 ms backoff every
// transaction that began right after a commit waited 50 ms or more.
func (p *Producer) coordinate(ctx context.Context, what string, op opKind, call func(context.Context) error) error {
	slow, fast := backoff.Retry{Policy: p.backoff}, backoff.Retry{Policy: concurrentTxnBackoff}
	var concurrentSince time.Time
	for attempts := 0; ; {
		err := call(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w (last attempt: %w)", what, ctx.Err(), err)
		}
		if kind, _ := classifyTxn(err, op); kind != txnRetry {
			stopped := wrapTxn(kind, what, err)
			p.txn.fail(kind, stopped)
			return stopped
		}
		var d time.Duration
		if errors.Is(err, kafka.ConcurrentTransactions) {
			if concurrentSince.IsZero() {
				concurrentSince = time.Now()
			}
			if time.Since(concurrentSince) >= concurrentTxnPatience {
				return fmt.Errorf("%s: giving up after %v of CONCURRENT_TRANSACTIONS: %w", what, concurrentTxnPatience, err)
			}
			d = fast.Next()
		} else {
			attempts++
			if attempts >= p.attempts {
				return fmt.Errorf("%s: giving up after %d attempts: %w", what, attempts, err)
			}
			d = slow.Next()
		}
		if serr := backoff.Sleep(ctx, d); serr != nil {
			return fmt.Errorf("%s: %w (last attempt: %w)", what, serr, err)
		}
	}
}

// concurrentTxnBackoff and concurrentTxnPatience are coordinate's retries
// of CONCURRENT_TRANSACTIONS.
var (
	concurrentTxnBackoff  = backoff.Policy{Min: 2 * time.Millisecond, Max: 20 * time.Millisecond}
	concurrentTxnPatience = 30 * time.Second
)

// codeErr is the error of a response's error code, nil for 0.
func codeErr(code int16) error {
	if code == 0 {
		return nil
	}
	return kafka.Error(code)
}

// InitProducerID gets the producer id and epoch from the transaction
// coordinator of the Producer's transactional id (FindCoordinator with key
// type transaction, done by kafka-go's Transport), fencing any older
// producer with the same id and aborting the transaction it left open. A
// transactional Producer must call it once before Begin, and again after
// ErrTxnState. An idempotent Producer calls it itself before its first
// write. Sequence numbers start at 0 for the new epoch.
func (p *Producer) InitProducerID(ctx context.Context) error {
	s := p.txn
	if s == nil {
		return fmt.Errorf("produce: InitProducerID: %w: the Producer is neither idempotent nor transactional (set Config.Idempotent or Config.TransactionalID)", ErrTxnState)
	}
	s.mu.Lock()
	if s.fenced != nil {
		defer s.mu.Unlock()
		return s.fenced
	}
	s.mu.Unlock()
	return p.initProducerID(ctx, -1, -1)
}

// initProducerID asks for a producer id; with pid and epoch of the current
// one (KIP-360, InitProducerId v3+), a transactional producer keeps its
// id and gets the next epoch.
func (p *Producer) initProducerID(ctx context.Context, pid int64, epoch int16) error {
	s := p.txn
	var res *initproducerid.Response
	what := "produce: InitProducerID"
	if s.id != "" {
		what = fmt.Sprintf("produce: InitProducerID for transactional id %q", s.id)
	}
	err := p.coordinate(ctx, what, opCoordinator, func(ctx context.Context) error {
		m, err := p.roundTrip(ctx, &initproducerid.Request{
			TransactionalID:      s.id,
			TransactionTimeoutMs: int32(s.timeout / time.Millisecond),
			ProducerID:           pid,
			ProducerEpoch:        epoch,
		})
		if err != nil {
			return err
		}
		res = m.(*initproducerid.Response)
		return codeErr(res.ErrorCode)
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pid, s.epoch = res.ProducerID, res.ProducerEpoch
	s.bump, s.inTxn, s.abortable = false, false, nil
	clear(s.added)
	clear(s.groups)
	// A new id or epoch starts every partition's sequence at 0. The
	// partitions' mutexes are not held here: a batch in flight holds its
	// own partitionSeq, which is replaced, so it cannot advance the new one.
	s.seqs = make(map[topicPartition]*partitionSeq)
	return nil
}

// Begin starts a transaction (locally: the coordinator learns of it with
// the first partition or offsets added). Within a transaction
// WriteMessages and SendOffsets may run concurrently; Commit and Abort
// must run after they returned.
func (p *Producer) Begin() error {
	s := p.txn
	if s == nil || s.id == "" {
		return fmt.Errorf("produce: Begin: %w: the Producer is not transactional (set Config.TransactionalID)", ErrTxnState)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.fenced != nil:
		return s.fenced
	case s.pid < 0:
		return fmt.Errorf("produce: Begin: %w: call InitProducerID first", ErrTxnState)
	case s.inTxn:
		return fmt.Errorf("produce: Begin: %w: a transaction is open (Commit or Abort it first)", ErrTxnState)
	}
	s.inTxn, s.abortable = true, nil
	clear(s.added)
	clear(s.groups)
	return nil
}

// remember keeps what the transaction that just committed added, for the
// next one (prevAdded, prevGroups). s.mu is held.
func (s *txnState) remember() {
	s.prevAdded, s.prevGroups = s.prevAdded[:0], s.prevGroups[:0]
	for tp := range s.added {
		s.prevAdded = append(s.prevAdded, tp)
	}
	for g := range s.groups {
		s.prevGroups = append(s.prevGroups, g)
	}
}

// usable says why call cannot go on in the open transaction: the
// producer is fenced, no transaction is open, or it must abort. s.mu is
// held.
func (s *txnState) usable(call string) error {
	switch {
	case s.fenced != nil:
		return s.fenced
	case !s.inTxn:
		return fmt.Errorf("produce: %s: %w: no transaction is open (call Begin)", call, ErrTxnState)
	case s.abortable != nil:
		return s.abortable
	}
	return nil
}

// addPartitions adds to the open transaction the partitions of c's
// batches that are not in it yet, in one AddPartitionsToTxn, before any
// batch is sent to them.
func (p *Producer) addPartitions(ctx context.Context, c *call) error {
	s := p.txn
	s.mu.Lock()
	if err := s.usable("WriteMessages"); err != nil {
		s.mu.Unlock()
		return err
	}
	topics := map[string][]int32{}
	var tps []topicPartition
	want := map[topicPartition]bool{}
	add := func(tp topicPartition) {
		if !s.added[tp] && !want[tp] {
			want[tp] = true
			topics[tp.topic] = append(topics[tp.topic], int32(tp.partition))
			tps = append(tps, tp)
		}
	}
	for i := range c.batches {
		add(topicPartition{c.batches[i].topic, c.batches[i].partition})
	}
	var groups []string
	if len(tps) > 0 {
		// The first partitions of this transaction: those of the last
		// one are likely written again, so they are added with them.
		for _, tp := range s.prevAdded {
			add(tp)
		}
		s.prevAdded = s.prevAdded[:0]
		groups, s.prevGroups = s.prevGroups, nil
	}
	pid, epoch := s.pid, s.epoch
	s.mu.Unlock()
	if len(tps) == 0 {
		return nil
	}
	for _, ps := range topics {
		slices.Sort(ps)
	}
	req := &addpartitionstotxn.Request{TransactionalID: s.id, ProducerID: pid, ProducerEpoch: epoch}
	for _, topic := range sortedKeys(topics) {
		req.Topics = append(req.Topics, addpartitionstotxn.RequestTopic{Name: topic, Partitions: topics[topic]})
	}
	err := p.coordinate(ctx, fmt.Sprintf("produce: AddPartitionsToTxn %v", tps), opCoordinator, func(ctx context.Context) error {
		m, err := p.roundTrip(ctx, req)
		if err != nil {
			return err
		}
		// The first partition error that is not the OPERATION_NOT_ATTEMPTED
		// (55) the others get because of it.
		var first error
		for _, t := range m.(*addpartitionstotxn.Response).Results {
			for _, r := range t.Results {
				if r.ErrorCode != 0 && (first == nil || first == kafka.Error(55)) {
					first = fmt.Errorf("%s-%d: %w", t.Name, r.PartitionIndex, kafka.Error(r.ErrorCode))
				}
			}
		}
		return first
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	for _, tp := range tps {
		s.added[tp] = true
	}
	s.mu.Unlock()
	for _, g := range groups {
		if err := p.addOffsets(ctx, g); err != nil {
			return err
		}
	}
	return nil
}

// addOffsets adds group's offsets to the open transaction
// (AddOffsetsToTxn), once per transaction.
func (p *Producer) addOffsets(ctx context.Context, group string) error {
	s := p.txn
	s.mu.Lock()
	if err := s.usable("SendOffsets"); err != nil {
		s.mu.Unlock()
		return err
	}
	pid, epoch, added := s.pid, s.epoch, s.groups[group]
	s.mu.Unlock()
	if added {
		return nil
	}
	err := p.coordinate(ctx, fmt.Sprintf("produce: AddOffsetsToTxn for group %q", group), opCoordinator, func(ctx context.Context) error {
		m, err := p.roundTrip(ctx, &addoffsetstotxn.Request{TransactionalID: s.id, ProducerID: pid, ProducerEpoch: epoch, GroupID: group})
		if err != nil {
			return err
		}
		return codeErr(m.(*addoffsetstotxn.Response).ErrorCode)
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.groups[group] = true
	s.mu.Unlock()
	return nil
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// Offset is a consumer offset committed in a transaction: the offset of
// the next record to read of Topic-Partition.
type Offset struct {
	Topic     string
	Partition int
	Offset    int64
}

// SendOffsets commits offsets for group in the open transaction, as
// Kafka's sendOffsetsToTransaction does with a consumer's group metadata
// (KIP-447): AddOffsetsToTxn to the transaction coordinator (once per
// group and transaction), then TxnOffsetCommit to the group coordinator
// with the member's generation, member id and instance id ("" for none),
// so that the group refuses the offsets of a member that lost its
// partitions (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID:
// ErrAbortable). The offsets become visible when the transaction commits,
// never if it aborts.
func (p *Producer) SendOffsets(ctx context.Context, group string, generation int32, memberID, instanceID string, offsets []Offset) error {
	s := p.txn
	if s == nil || s.id == "" {
		return fmt.Errorf("produce: SendOffsets: %w: the Producer is not transactional", ErrTxnState)
	}
	s.mu.Lock()
	if err := s.usable("SendOffsets"); err != nil {
		s.mu.Unlock()
		return err
	}
	pid, epoch := s.pid, s.epoch
	s.mu.Unlock()
	if err := p.addOffsets(ctx, group); err != nil {
		return err
	}
	byTopic := map[string][]txnoffsetcommit.RequestPartition{}
	for _, o := range offsets {
		byTopic[o.Topic] = append(byTopic[o.Topic], txnoffsetcommit.RequestPartition{
			Partition:            int32(o.Partition),
			CommittedOffset:      o.Offset,
			CommittedLeaderEpoch: -1,
		})
	}
	req := &txnoffsetcommit.Request{
		TransactionalID: s.id, GroupID: group, ProducerID: pid, ProducerEpoch: epoch,
		GenerationID: generation, MemberID: memberID, GroupInstanceID: instanceID,
	}
	for _, topic := range sortedKeys(byTopic) {
		req.Topics = append(req.Topics, txnoffsetcommit.RequestTopic{Name: topic, Partitions: byTopic[topic]})
	}
	return p.coordinate(ctx, fmt.Sprintf("produce: TxnOffsetCommit for group %q (generation %d, member %q)", group, generation, memberID), opGroup, func(ctx context.Context) error {
		m, err := p.roundTrip(ctx, req)
		if err != nil {
			return err
		}
		for _, t := range m.(*txnoffsetcommit.Response).Topics {
			for _, r := range t.Partitions {
				if r.ErrorCode != 0 {
					return fmt.Errorf("%s-%d: %w", t.Name, r.Partition, kafka.Error(r.ErrorCode))
				}
			}
		}
		return nil
	})
}

// Commit commits the open transaction (EndTxn): its records become
// visible to read_committed consumers and its offsets to the group. It
// returns ErrAbortable, without committing, when the transaction must
// abort; the caller then calls Abort.
func (p *Producer) Commit(ctx context.Context) error { return p.end(ctx, true) }

// Abort aborts the open transaction (EndTxn): none of its records or
// offsets ever become visible. When a batch's outcome was unknown it then
// bumps the producer's epoch (InitProducerID with the current id and
// epoch, KIP-360), which restarts the sequence numbers. After Abort the
// caller rewinds its input to the committed offsets and calls Begin.
func (p *Producer) Abort(ctx context.Context) error { return p.end(ctx, false) }

func (p *Producer) end(ctx context.Context, commit bool) error {
	s := p.txn
	verb := map[bool]string{true: "Commit", false: "Abort"}[commit]
	if s == nil || s.id == "" {
		return fmt.Errorf("produce: %s: %w: the Producer is not transactional", verb, ErrTxnState)
	}
	s.mu.Lock()
	err := s.usable(verb)
	if !commit && err != nil && err == s.abortable {
		err = nil // what Abort is for
	}
	if err != nil {
		s.mu.Unlock()
		return err
	}
	pid, epoch, bump := s.pid, s.epoch, s.bump
	empty := len(s.added) == 0 && len(s.groups) == 0
	s.mu.Unlock()
	if !empty {
		err := p.coordinate(ctx, fmt.Sprintf("produce: EndTxn (%s) for transactional id %q", verb, s.id), opCoordinator, func(ctx context.Context) error {
			m, err := p.roundTrip(ctx, &endtxn.Request{TransactionalID: s.id, ProducerID: pid, ProducerEpoch: epoch, Committed: commit})
			if err != nil {
				return err
			}
			return codeErr(m.(*endtxn.Response).ErrorCode)
		})
		if err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.inTxn, s.abortable = false, nil
	if commit && !empty {
		s.remember()
	} else if !commit {
		s.prevAdded, s.prevGroups = s.prevAdded[:0], nil
	}
	s.mu.Unlock()
	if bump {
		return p.initProducerID(ctx, pid, epoch)
	}
	return nil
}
