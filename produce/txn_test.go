package produce

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/fetch"
	"github.com/joiner-dev/joiner/testsupport/testkit/realkafka"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Sequence numbers advance by the records of each batch and wrap from
// MaxInt32 to 0, as Kafka's DefaultRecordBatch.incrementSequence does.
func TestNextSequence(t *testing.T) {
	for _, c := range []struct{ seq, n, want int32 }{
		{0, 1, 1},
		{0, 5, 5},
		{100, 20, 120},
		{math.MaxInt32 - 5, 5, math.MaxInt32},
		{math.MaxInt32, 1, 0},
		{math.MaxInt32 - 1, 3, 1},
		{math.MaxInt32 - 2, 10, 7},
	} {
		if got := nextSequence(c.seq, c.n); got != c.want {
			t.Errorf("nextSequence(%d, %d) = %d, want %d", c.seq, c.n, got, c.want)
		}
	}
}

// decodeBatch decodes a record set appendProducerRecordSet wrote with
// kafka-go's decoder (which checks the CRC).
func decodeBatch(t *testing.T, set []byte) *protocol.RecordBatch {
	t.Helper()
	var rs protocol.RecordSet
	if _, err := rs.ReadFrom(bytes.NewReader(set)); err != nil {
		t.Fatal(err)
	}
	stream, ok := rs.Records.(*protocol.RecordStream)
	if !ok || len(stream.Records) != 1 {
		t.Fatalf("decoded %T, want one batch", rs.Records)
	}
	b, ok := stream.Records[0].(*protocol.RecordBatch)
	if !ok {
		t.Fatalf("decoded a %T, want a *protocol.RecordBatch", stream.Records[0])
	}
	return b
}

// A batch carries its producer's id, epoch and base sequence, and the
// transactional bit when transactional; a batch of no producer has -1 and
// no bit. The CRC covers them (kafka-go's decoder checks it).
func TestProducerRecordSetFields(t *testing.T) {
	msgs := []kafka.Message{{Key: []byte("k1"), Value: []byte("v1")}, {Key: []byte("k2"), Value: []byte("v2")}}
	now := time.UnixMilli(1_700_000_000_000)
	for _, pr := range []batchProducer{
		{id: 4711, epoch: 3, sequence: 42, transactional: true},
		{id: 1 << 40, epoch: math.MaxInt16, sequence: math.MaxInt32, transactional: false},
		noProducer,
	} {
		set := appendProducerRecordSet(nil, msgs, []int32{0, 1}, now, pr)
		b := decodeBatch(t, set)
		if b.ProducerID != pr.id || b.ProducerEpoch != pr.epoch || b.BaseSequence != pr.sequence {
			t.Errorf("%+v: decoded producer id %d, epoch %d, base sequence %d", pr, b.ProducerID, b.ProducerEpoch, b.BaseSequence)
		}
		if b.Attributes.Transactional() != pr.transactional || b.Attributes.Control() || b.Attributes.Compression() != 0 {
			t.Errorf("%+v: attributes %v", pr, b.Attributes)
		}
		for i := range msgs {
			r, err := b.ReadRecord()
			if err != nil {
				t.Fatal(err)
			}
			v, _ := protocol.ReadAll(r.Value)
			if r.Offset != int64(i) || string(v) != string(msgs[i].Value) {
				t.Errorf("%+v: record %d: offset %d value %q", pr, i, r.Offset, v)
			}
		}
	}
	// appendRecordSet is the batch of no producer.
	if a, b := appendRecordSet(nil, msgs, []int32{0, 1}, now), appendProducerRecordSet(nil, msgs, []int32{0, 1}, now, noProducer); !bytes.Equal(a, b) {
		t.Error("appendRecordSet differs from appendProducerRecordSet(noProducer)")
	}
}

// classifyTxn sorts the errors of idempotence and transactions as Kafka's
// Java producer does.
func TestClassifyTxn(t *testing.T) {
	netErr := errors.New("read tcp: connection reset by peer")
	for _, c := range []struct {
		err  error
		op   opKind
		want txnErrKind
		ok   bool
	}{
		{kafka.ProducerFenced, opProduce, txnFenced, true},
		{kafka.ProducerFenced, opCoordinator, txnFenced, true},
		{kafka.InvalidProducerEpoch, opProduce, txnAbortable, true},
		{kafka.InvalidProducerEpoch, opCoordinator, txnFenced, true},
		{kafka.InvalidProducerEpoch, opGroup, txnFenced, true},
		{kafka.OutOfOrderSequenceNumber, opProduce, txnAbortable, true},
		{kafka.UnknownProducerId, opProduce, txnAbortable, true},
		{errTransactionAbortable, opProduce, txnAbortable, true},
		{errTransactionAbortable, opCoordinator, txnAbortable, true},
		{kafka.DuplicateSequenceNumber, opProduce, txnDuplicate, true},
		{kafka.InvalidTransactionState, opProduce, txnBadState, true},
		{kafka.InvalidTransactionState, opCoordinator, txnBadState, true},
		{kafka.ConcurrentTransactions, opCoordinator, txnRetry, true},
		{kafka.ConcurrentTransactions, opGroup, txnRetry, true},
		{kafka.GroupCoordinatorNotAvailable, opCoordinator, txnRetry, true},
		{kafka.NotCoordinatorForGroup, opCoordinator, txnRetry, true},
		{kafka.NotCoordinatorForGroup, opGroup, txnRetry, true},
		{kafka.GroupLoadInProgress, opCoordinator, txnRetry, true},
		{kafka.RequestTimedOut, opCoordinator, txnRetry, true},
		{kafka.UnknownTopicOrPartition, opCoordinator, txnRetry, true},
		{kafka.IllegalGeneration, opGroup, txnAbortable, true},
		{kafka.UnknownMemberId, opGroup, txnAbortable, true},
		{kafka.FencedInstanceID, opGroup, txnAbortable, true},
		{kafka.TransactionalIDAuthorizationFailed, opCoordinator, txnFatal, true},
		{kafka.InvalidTransactionTimeout, opCoordinator, txnFatal, true},
		{netErr, opCoordinator, txnRetry, true},
		{fmt.Errorf("wrapped: %w", kafka.ProducerFenced), opCoordinator, txnFenced, true},
		// Produce errors it does not know go to classify.
		{kafka.NotLeaderForPartition, opProduce, 0, false},
		{kafka.MessageSizeTooLarge, opProduce, 0, false},
		{netErr, opProduce, 0, false},
	} {
		got, ok := classifyTxn(c.err, c.op)
		if got != c.want || ok != c.ok {
			t.Errorf("classifyTxn(%v, %d) = %d, %v; want %d, %v", c.err, c.op, got, ok, c.want, c.ok)
		}
	}
}

// txnEnv is a broker for the transaction tests: kfake, or the real Kafka.
type txnEnv struct {
	addrs []string
	admin *kafka.Client
	kfake *kfake.Cluster // nil on the real Kafka
}

func kfakeEnv(t *testing.T) *txnEnv {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return &txnEnv{addrs: c.ListenAddrs(), admin: &kafka.Client{Addr: kafka.TCP(c.ListenAddrs()...), Timeout: 10 * time.Second}, kfake: c}
}

func realEnv(t *testing.T) *txnEnv {
	t.Helper()
	addrs := realkafka.Brokers(t)
	return &txnEnv{addrs: addrs, admin: &kafka.Client{Addr: kafka.TCP(addrs...), Timeout: 30 * time.Second}}
}

// topic creates a topic named for the test and returns its name.
func (e *txnEnv) topic(t *testing.T, partitions int) string {
	t.Helper()
	name := fmt.Sprintf("produce-txn-%d", time.Now().UnixNano())
	res, err := e.admin.CreateTopics(context.Background(), &kafka.CreateTopicsRequest{
		Topics: []kafka.TopicConfig{{Topic: name, NumPartitions: partitions, ReplicationFactor: 1}},
	})
	if err == nil {
		err = res.Errors[name]
	}
	if err != nil {
		t.Fatalf("creating %s: %v", name, err)
	}
	return name
}

func (e *txnEnv) producer(t *testing.T, cfg Config) *Producer {
	t.Helper()
	tr := &kafka.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	cfg.Addr, cfg.Transport = kafka.TCP(e.addrs...), tr
	if cfg.Backoff == (Config{}).Backoff {
		cfg.Backoff = fastRetries
	}
	if cfg.Attempts == 0 {
		cfg.Attempts = 50 // a new topic's first moments on the real Kafka
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// readBatch is a batch read back: its header and its records' values.
type readBatch struct {
	*protocol.RecordBatch
	values []string
}

// batches reads topic-partition from the start to its end, uncommitted,
// with kafka-go: the data batches with their producer fields.
func (e *txnEnv) batches(t *testing.T, topic string, partition int) []readBatch {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []readBatch
	for offset := int64(0); ; {
		res, err := e.admin.Fetch(ctx, &kafka.FetchRequest{Topic: topic, Partition: partition, Offset: offset, MinBytes: 1, MaxBytes: 1 << 20, MaxWait: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if res.Error != nil {
			t.Fatal(res.Error)
		}
		if offset >= res.HighWatermark {
			return out
		}
		s, ok := res.Records.(*protocol.RecordStream)
		if !ok {
			continue
		}
		for _, b := range s.Records {
			var values []string
			for {
				r, err := b.ReadRecord()
				if err != nil {
					break
				}
				offset = max(offset, r.Offset+1)
				v, _ := protocol.ReadAll(r.Value)
				values = append(values, string(v))
			}
			if rb, ok := b.(*protocol.RecordBatch); ok {
				out = append(out, readBatch{rb, values})
			}
		}
	}
}

// messages returns n messages for topic with keys on partition part of
// parts, values "<prefix>-<i>".
func messages(topic, prefix string, part, parts, n int) []kafka.Message {
	keys := keysFor(part, parts, n)
	msgs := make([]kafka.Message, n)
	for i := range msgs {
		msgs[i] = kafka.Message{Topic: topic, Key: keys[i], Value: fmt.Appendf(nil, "%s-%d", prefix, i)}
	}
	return msgs
}

// An idempotent producer's batches carry one producer id and epoch, and
// each partition's base sequences count that partition's records from 0,
// independently of the other partitions.
func testIdempotentSequences(t *testing.T, e *txnEnv) {
	topic := e.topic(t, 2)
	p := e.producer(t, Config{Idempotent: true})
	ctx := context.Background()
	sizes := []int{3, 1, 5}
	for i, n := range sizes {
		msgs := append(messages(topic, fmt.Sprintf("a%d", i), 0, 2, n), messages(topic, fmt.Sprintf("b%d", i), 1, 2, 2*n)...)
		if err := p.WriteMessages(ctx, msgs...); err != nil {
			t.Fatal(err)
		}
	}
	for part, mult := range []int{1, 2} {
		bs := e.batches(t, topic, part)
		if len(bs) != len(sizes) {
			t.Fatalf("partition %d has %d batches, want %d", part, len(bs), len(sizes))
		}
		seq := int32(0)
		for i, b := range bs {
			if b.ProducerID < 0 || b.ProducerID != bs[0].ProducerID || b.ProducerEpoch < 0 || b.ProducerEpoch != bs[0].ProducerEpoch {
				t.Errorf("partition %d batch %d: producer id %d epoch %d (first batch: %d, %d)", part, i, b.ProducerID, b.ProducerEpoch, bs[0].ProducerID, bs[0].ProducerEpoch)
			}
			if b.BaseSequence != seq {
				t.Errorf("partition %d batch %d: base sequence %d, want %d", part, i, b.BaseSequence, seq)
			}
			if b.Attributes.Transactional() {
				t.Errorf("partition %d batch %d: transactional bit set on an idempotent producer's batch", part, i)
			}
			seq += int32(mult * sizes[i])
		}
	}
}

func TestIdempotentSequences(t *testing.T) { testIdempotentSequences(t, kfakeEnv(t)) }
func TestIdempotentSequencesRealBroker(t *testing.T) {
	testIdempotentSequences(t, realEnv(t))
}

// A batch the broker wrote but whose acknowledgement was lost (the first
// Produce request is answered only after the client's timeout) is sent
// again byte-identical, with the same sequence number, and the broker
// keeps one copy.
func TestIdempotentRetryWrittenOnce(t *testing.T) {
	e := kfakeEnv(t)
	topic := e.topic(t, 1)
	c := e.kfake
	var mu sync.Mutex
	var sent [][]byte
	var n int
	answered := make(chan struct{})
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.ProduceRequest)
		if len(r.Topics) != 1 || r.Topics[0].Topic != topic {
			return nil, nil, false
		}
		mu.Lock()
		sent = append(sent, slices.Clone(r.Topics[0].Partitions[0].Records))
		n++
		first := n == 1
		mu.Unlock()
		if first {
			// Answer after the client gave up: the batch is written, its
			// acknowledgement lost.
			c.SleepControl(func() { time.Sleep(1500 * time.Millisecond) })
			close(answered)
		}
		return nil, nil, false
	})
	p := e.producer(t, Config{Idempotent: true, Timeout: 500 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msgs := messages(topic, "once", 0, 1, 4)
	if err := p.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	if err := p.WriteMessages(ctx, messages(topic, "next", 0, 1, 1)...); err != nil {
		t.Fatal(err)
	}
	<-answered
	time.Sleep(200 * time.Millisecond) // the broker handles the late request
	mu.Lock()
	defer mu.Unlock()
	if len(sent) < 3 {
		t.Fatalf("%d produce requests, want the first batch at least twice and the next one", len(sent))
	}
	for i := 1; i < len(sent)-1; i++ {
		if !bytes.Equal(sent[i], sent[0]) {
			t.Errorf("attempt %d of the first batch differs from attempt 1", i+1)
		}
	}
	var values []string
	for _, b := range e.batches(t, topic, 0) {
		values = append(values, b.values...)
	}
	want := []string{"once-0", "once-1", "once-2", "once-3", "next-0"}
	if !slices.Equal(values, want) {
		t.Errorf("the log holds %q, want %q", values, want)
	}
	last := sent[len(sent)-1]
	if seq := int32(binary.BigEndian.Uint32(last[53:])); seq != 4 {
		t.Errorf("the next batch has base sequence %d, want 4", seq)
	}
}

// join makes a member of group (static, with instanceID, when not "")
// and returns its generation and member id.
func (e *txnEnv) join(t *testing.T, group, topic, instanceID string) (int32, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := &kafka.JoinGroupRequest{
		GroupID: group, GroupInstanceID: instanceID, SessionTimeout: 30 * time.Second, RebalanceTimeout: 30 * time.Second,
		ProtocolType: "consumer",
		Protocols:    []kafka.GroupProtocol{{Name: "range", Metadata: kafka.GroupProtocolSubscription{Topics: []string{topic}}}},
	}
	var res *kafka.JoinGroupResponse
	for range 5 {
		var err error
		if res, err = e.admin.JoinGroup(ctx, req); err != nil {
			t.Fatal(err)
		}
		if errors.Is(res.Error, kafka.MemberIDRequired) {
			req.MemberID = res.MemberID
			continue
		}
		if errors.Is(res.Error, kafka.GroupCoordinatorNotAvailable) || errors.Is(res.Error, kafka.GroupLoadInProgress) {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		break
	}
	if res.Error != nil {
		t.Fatalf("joining %s: %v", group, res.Error)
	}
	sres, err := e.admin.SyncGroup(ctx, &kafka.SyncGroupRequest{
		GroupID: group, GenerationID: res.GenerationID, MemberID: res.MemberID, GroupInstanceID: instanceID,
		ProtocolType: "consumer", ProtocolName: "range",
		Assignments: []kafka.SyncGroupRequestAssignment{{MemberID: res.MemberID}},
	})
	if err != nil || sres.Error != nil {
		t.Fatalf("syncing %s: %v %v", group, err, sres.Error)
	}
	return int32(res.GenerationID), res.MemberID
}

// committed returns group's committed offset of topic-partition (-1 for
// none) once it is want, or after 10 s: a real Kafka applies a committed
// transaction's offsets when its markers are written, after EndTxn
// returned.
func (e *txnEnv) committed(t *testing.T, group, topic string, partition int, want int64) int64 {
	return e.committedWithin(t, group, topic, partition, want, 10*time.Second)
}

func (e *txnEnv) committedWithin(t *testing.T, group, topic string, partition int, want int64, wait time.Duration) int64 {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		got := e.committedNow(t, group, topic, partition)
		if got == want || time.Now().After(deadline) {
			return got
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *txnEnv) committedNow(t *testing.T, group, topic string, partition int) int64 {
	t.Helper()
	res, err := e.admin.OffsetFetch(context.Background(), &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: {partition}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Error != nil {
		t.Fatal(res.Error)
	}
	for _, p := range res.Topics[topic] {
		if p.Partition == partition {
			if p.Error != nil {
				t.Fatal(p.Error)
			}
			return p.CommittedOffset
		}
	}
	return -1
}

// transactional returns a transactional producer with id, initialized.
func (e *txnEnv) transactional(ctx context.Context, t *testing.T, id string, cfg Config) *Producer {
	t.Helper()
	cfg.TransactionalID = id
	p := e.producer(t, cfg)
	if err := p.InitProducerID(ctx); err != nil {
		t.Fatal(err)
	}
	return p
}

// txnGroup makes a topic of one partition and a member of a group for it.
func (e *txnEnv) txnGroup(t *testing.T) (topic, group string, gen int32, member string) {
	t.Helper()
	topic = e.topic(t, 1)
	group = topic + "-group"
	gen, member = e.join(t, group, topic, "")
	return topic, group, gen, member
}

// txnStep runs one transaction on p: Begin, n messages "<prefix>-<i>" to
// topic-0, the offset of topic-0 for group, then Commit or Abort.
func txnStep(ctx context.Context, t *testing.T, p *Producer, topic, group string, gen int32, member, prefix string, n int, offset int64, commit bool) {
	t.Helper()
	if err := p.Begin(); err != nil {
		t.Fatal(err)
	}
	if n > 0 {
		if err := p.WriteMessages(ctx, messages(topic, prefix, 0, 1, n)...); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.SendOffsets(ctx, group, gen, member, "", []Offset{{Topic: topic, Partition: 0, Offset: offset}}); err != nil {
		t.Fatal(err)
	}
	end := p.Abort
	if commit {
		end = p.Commit
	}
	if err := end(ctx); err != nil {
		t.Fatal(err)
	}
}

// A transactional producer's batches carry the transactional bit; its
// offsets, sent with the member's generation, are the group's once the
// transaction commits, and an aborted transaction's never are; its
// records are in the log either way (a read_committed reader drops the
// aborted ones: package fetch's tests).
func testTxnCommitAbort(t *testing.T, e *txnEnv) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topic, group, gen, member := e.txnGroup(t)
	p := e.transactional(ctx, t, topic+"-txn", Config{})
	step := func(prefix string, offset int64, commit bool) {
		t.Helper()
		txnStep(ctx, t, p, topic, group, gen, member, prefix, 3, offset, commit)
	}
	step("c1", 10, true)
	if got := e.committed(t, group, topic, 0, 10); got != 10 {
		t.Errorf("after the commit the group's offset is %d, want 10", got)
	}
	step("a1", 20, false)
	if got := e.committedWithin(t, group, topic, 0, 20, time.Second); got != 10 { // a wrong 20 would show
		t.Errorf("after the abort the group's offset is %d, want 10 (the committed transaction's)", got)
	}
	step("c2", 30, true)
	if got := e.committed(t, group, topic, 0, 30); got != 30 {
		t.Errorf("after the second commit the group's offset is %d, want 30", got)
	}
	if got, want := e.readCommitted(t, topic), []string{"c1-0", "c1-1", "c1-2", "c2-0", "c2-1", "c2-2"}; !slices.Equal(got, want) {
		t.Errorf("read_committed: %q, want %q", got, want)
	}
	bs := e.batches(t, topic, 0)
	if len(bs) != 3 {
		t.Fatalf("%d data batches, want 3", len(bs))
	}
	for i, b := range bs {
		if !b.Attributes.Transactional() || b.ProducerID < 0 {
			t.Errorf("batch %d: attributes %v, producer id %d: want the transactional bit and an id", i, b.Attributes, b.ProducerID)
		}
	}
	// One partition's sequence counts on across transactions.
	if bs[0].BaseSequence != 0 || bs[1].BaseSequence != 3 || bs[2].BaseSequence != 6 {
		t.Errorf("base sequences %d, %d, %d; want 0, 3, 6", bs[0].BaseSequence, bs[1].BaseSequence, bs[2].BaseSequence)
	}
}

func TestTxnCommitAbort(t *testing.T)           { testTxnCommitAbort(t, kfakeEnv(t)) }
func TestTxnCommitAbortRealBroker(t *testing.T) { testTxnCommitAbort(t, realEnv(t)) }

// TxnOffsetCommit carries the generation and member id (KIP-447): the
// group refuses the offsets of a stale generation (ILLEGAL_GENERATION) or
// an unknown member, SendOffsets returns ErrAbortable, Commit refuses too,
// and after Abort the next transaction goes through.
func testTxnStaleGeneration(t *testing.T, e *txnEnv) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topic, group, gen, member := e.txnGroup(t)
	p := e.transactional(ctx, t, topic+"-txn", Config{})
	for _, c := range []struct {
		gen    int32
		member string
		want   error
	}{
		{gen - 1, member, kafka.IllegalGeneration},
		{gen + 1, member, kafka.IllegalGeneration},
		{gen, "someone-else", kafka.UnknownMemberId},
	} {
		if err := p.Begin(); err != nil {
			t.Fatal(err)
		}
		if err := p.WriteMessages(ctx, messages(topic, "stale", 0, 1, 1)...); err != nil {
			t.Fatal(err)
		}
		err := p.SendOffsets(ctx, group, c.gen, c.member, "", []Offset{{Topic: topic, Partition: 0, Offset: 5}})
		if !errors.Is(err, ErrAbortable) || !errors.Is(err, c.want) {
			t.Errorf("generation %d (the member's: %d), member %q: SendOffsets = %v, want ErrAbortable and %v", c.gen, gen, c.member, err, c.want)
		}
		if err := p.Commit(ctx); !errors.Is(err, ErrAbortable) {
			t.Errorf("Commit after a refused TxnOffsetCommit = %v, want ErrAbortable", err)
		}
		if err := p.WriteMessages(ctx, messages(topic, "stale", 0, 1, 1)...); !errors.Is(err, ErrAbortable) {
			t.Errorf("WriteMessages after a refused TxnOffsetCommit = %v, want ErrAbortable", err)
		}
		if err := p.Abort(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.committed(t, group, topic, 0, -1); got != -1 {
		t.Errorf("the group's offset is %d after refused commits, want none (-1)", got)
	}
	txnStep(ctx, t, p, topic, group, gen, member, "", 0, 7, true)
	if got := e.committed(t, group, topic, 0, 7); got != 7 {
		t.Errorf("the group's offset is %d, want 7", got)
	}
}

func TestTxnStaleGeneration(t *testing.T)           { testTxnStaleGeneration(t, kfakeEnv(t)) }
func TestTxnStaleGenerationRealBroker(t *testing.T) { testTxnStaleGeneration(t, realEnv(t)) }

// A second producer with the same transactional id fences the first: the
// first's next call returns ErrFenced, every call after it too, and what
// it wrote in its open transaction is aborted (not in the group's
// offsets); the second producer commits.
func testTxnFenced(t *testing.T, e *txnEnv) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topic, group, gen, member := e.txnGroup(t)
	id := topic + "-txn"
	first := e.transactional(ctx, t, id, Config{})
	if err := first.Begin(); err != nil {
		t.Fatal(err)
	}
	if err := first.WriteMessages(ctx, messages(topic, "zombie", 0, 1, 2)...); err != nil {
		t.Fatal(err)
	}
	if err := first.SendOffsets(ctx, group, gen, member, "", []Offset{{Topic: topic, Partition: 0, Offset: 2}}); err != nil {
		t.Fatal(err)
	}
	second := e.transactional(ctx, t, id, Config{})
	err := first.Commit(ctx)
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("the fenced producer's Commit = %v, want ErrFenced", err)
	}
	for name, call := range map[string]func() error{
		"Begin":          first.Begin,
		"WriteMessages":  func() error { return first.WriteMessages(ctx, messages(topic, "zombie", 0, 1, 1)...) },
		"Abort":          func() error { return first.Abort(ctx) },
		"InitProducerID": func() error { return first.InitProducerID(ctx) },
	} {
		if err := call(); !errors.Is(err, ErrFenced) {
			t.Errorf("the fenced producer's %s = %v, want ErrFenced", name, err)
		}
	}
	if got := e.committed(t, group, topic, 0, -1); got != -1 {
		t.Errorf("the group's offset is %d: the fenced transaction's offsets were committed", got)
	}
	txnStep(ctx, t, second, topic, group, gen, member, "live", 1, 3, true)
	if got := e.committed(t, group, topic, 0, 3); got != 3 {
		t.Errorf("the group's offset is %d, want the second producer's 3", got)
	}
}

func TestTxnFenced(t *testing.T)           { testTxnFenced(t, kfakeEnv(t)) }
func TestTxnFencedRealBroker(t *testing.T) { testTxnFenced(t, realEnv(t)) }

// readCommitted reads topic-0 read_committed from the start to its end
// with package fetch and returns the values.
func (e *txnEnv) readCommitted(t *testing.T, topic string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []string
	for next := int64(0); ; {
		req := fetch.Request(topic, 0, next, 50*time.Millisecond, fetch.MaxBytes)
		req.IsolationLevel = kafka.ReadCommitted
		res, err := fetch.Isolated(ctx, e.admin, req)
		if err != nil {
			t.Fatal(err)
		}
		if res.Error != nil {
			t.Fatal(res.Error)
		}
		var recs []fetch.Record
		if recs, next, err = fetch.Committed(res.Records, res.Aborted, next, nil); err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			out = append(out, string(r.Value))
		}
		if next >= res.LastStableOffset && res.LastStableOffset == res.HighWatermark {
			return out // every transaction ended, its marker read
		}
		if ctx.Err() != nil {
			t.Fatalf("read %q, stuck at offset %d", out, next)
		}
	}
}

// A Produce error of the transaction classes ends WriteMessages with the
// sentinel the caller must act on. After an abortable one, Commit refuses,
// Abort works and bumps the epoch (sequence numbers restart at 0), and the
// next transaction commits; a read_committed reader sees only that one.
func TestTxnProduceErrors(t *testing.T) {
	for _, c := range []struct {
		err  *kerr.Error
		want error
	}{
		{kerr.TransactionAbortable, ErrAbortable},
		{kerr.OutOfOrderSequenceNumber, ErrAbortable},
		{kerr.UnknownProducerID, ErrAbortable},
		{kerr.InvalidProducerEpoch, ErrAbortable},
		{kerr.InvalidTxnState, ErrTxnState},
		{kerr.ProducerFenced, ErrFenced},
	} {
		t.Run(c.err.Message, func(t *testing.T) {
			e := kfakeEnv(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			topic := e.topic(t, 1)
			p := e.transactional(ctx, t, topic+"-txn", Config{})
			if err := p.Begin(); err != nil {
				t.Fatal(err)
			}
			if err := p.WriteMessages(ctx, messages(topic, "ok", 0, 1, 2)...); err != nil {
				t.Fatal(err)
			}
			e.kfake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: c.err})
			err := p.WriteMessages(ctx, messages(topic, "failed", 0, 1, 1)...)
			if !errors.Is(err, c.want) {
				t.Fatalf("WriteMessages after %s = %v, want %v", c.err.Message, err, c.want)
			}
			if err := p.Commit(ctx); !errors.Is(err, c.want) {
				t.Errorf("Commit = %v, want %v", err, c.want)
			}
			if c.want == ErrFenced {
				if err := p.Abort(ctx); !errors.Is(err, ErrFenced) {
					t.Errorf("Abort of a fenced producer = %v, want ErrFenced", err)
				}
				return
			}
			if err := p.Abort(ctx); err != nil {
				t.Fatal(err)
			}
			if err := p.Begin(); err != nil {
				t.Fatal(err)
			}
			if err := p.WriteMessages(ctx, messages(topic, "after", 0, 1, 2)...); err != nil {
				t.Fatal(err)
			}
			if err := p.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if got, want := e.readCommitted(t, topic), []string{"after-0", "after-1"}; !slices.Equal(got, want) {
				t.Errorf("read_committed: %q, want %q", got, want)
			}
			bs := e.batches(t, topic, 0)
			last := bs[len(bs)-1]
			if last.ProducerEpoch != bs[0].ProducerEpoch+1 || last.BaseSequence != 0 {
				t.Errorf("after the abort the batch has epoch %d (first: %d), base sequence %d; want the next epoch and 0", last.ProducerEpoch, bs[0].ProducerEpoch, last.BaseSequence)
			}
		})
	}
}

// Coordinator errors that mean "not now" or "ask the new coordinator"
// are retried with backoff: the transaction still commits.
func TestTxnCoordinatorRetries(t *testing.T) {
	e := kfakeEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topic, group, gen, member := e.txnGroup(t)
	p := e.producer(t, Config{TransactionalID: topic + "-txn"})
	init := e.kfake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.InitProducerID}, Err: kerr.CoordinatorLoadInProgress, Count: 2})
	if err := p.InitProducerID(ctx); err != nil {
		t.Fatal(err)
	}
	faults := []*kfake.FaultHandle{
		init,
		e.kfake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.AddPartitionsToTxn}, Err: kerr.ConcurrentTransactions, Count: 2}),
		e.kfake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.AddOffsetsToTxn}, Err: kerr.NotCoordinator, Count: 2}),
		e.kfake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.TxnOffsetCommit}, Err: kerr.CoordinatorNotAvailable, Count: 2}),
		e.kfake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, Err: kerr.ConcurrentTransactions, Count: 2}),
	}
	if err := p.Begin(); err != nil {
		t.Fatal(err)
	}
	if err := p.WriteMessages(ctx, messages(topic, "v", 0, 1, 2)...); err != nil {
		t.Fatal(err)
	}
	if err := p.SendOffsets(ctx, group, gen, member, "", []Offset{{Topic: topic, Partition: 0, Offset: 2}}); err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for i, f := range faults {
		if h := f.Hits(); h != 2 {
			t.Errorf("fault %d hit %d times, want 2", i, h)
		}
	}
	if got, want := e.readCommitted(t, topic), []string{"v-0", "v-1"}; !slices.Equal(got, want) {
		t.Errorf("read_committed: %q, want %q", got, want)
	}
	if got := e.committed(t, group, topic, 0, 2); got != 2 {
		t.Errorf("the group's offset is %d, want 2", got)
	}
}

// A transaction open past TransactionTimeout is aborted by the
// coordinator, which bumps the epoch: the producer's next write fails
// (ErrAbortable on Kafka: INVALID_PRODUCER_EPOCH; ErrTxnState on kfake),
// its Abort then returns ErrFenced, and nothing it wrote is visible. (The
// real Kafka looks for timed-out transactions every 10 s.)
func testTxnTimeout(t *testing.T, e *txnEnv) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topic := e.topic(t, 1)
	p := e.transactional(ctx, t, topic+"-txn", Config{TransactionTimeout: time.Second})
	if err := p.Begin(); err != nil {
		t.Fatal(err)
	}
	if err := p.WriteMessages(ctx, messages(topic, "late", 0, 1, 1)...); err != nil {
		t.Fatal(err)
	}
	var err error
	for start := time.Now(); err == nil && time.Since(start) < 30*time.Second; {
		time.Sleep(500 * time.Millisecond)
		err = p.WriteMessages(ctx, messages(topic, "late", 0, 1, 1)...)
	}
	if !errors.Is(err, ErrAbortable) && !errors.Is(err, ErrTxnState) {
		t.Fatalf("writing after the transaction timed out: %v, want ErrAbortable or ErrTxnState", err)
	}
	if err := p.Abort(ctx); !errors.Is(err, ErrFenced) {
		t.Errorf("Abort after the transaction timed out = %v, want ErrFenced", err)
	}
	if got := e.readCommitted(t, topic); len(got) != 0 {
		t.Errorf("read_committed sees %q of a timed-out transaction", got)
	}
}

func TestTxnTimeout(t *testing.T)           { testTxnTimeout(t, kfakeEnv(t)) }
func TestTxnTimeoutRealBroker(t *testing.T) { testTxnTimeout(t, realEnv(t)) }

// Concurrent WriteMessages calls to one partition of an idempotent
// producer: its batches go one at a time, each with the sequence number
// after the one before, so the broker takes every one (no
// OUT_OF_ORDER_SEQUENCE_NUMBER) and the log holds every record once.
func TestIdempotentConcurrentCalls(t *testing.T) {
	e := kfakeEnv(t)
	topic := e.topic(t, 1)
	p := e.producer(t, Config{Idempotent: true, Attempts: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const callers, calls = 8, 15
	var wg sync.WaitGroup
	errs := make(chan error, callers*calls)
	for g := range callers {
		wg.Go(func() {
			for c := range calls {
				if err := p.WriteMessages(ctx, messages(topic, fmt.Sprintf("g%d-c%d", g, c), 0, 1, 1+c%3)...); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	bs := e.batches(t, topic, 0)
	seq, n := int32(0), 0
	seen := map[string]bool{}
	for i, b := range bs {
		if b.BaseSequence != seq || b.ProducerID != bs[0].ProducerID {
			t.Fatalf("batch %d: producer %d base sequence %d, want %d (producer %d)", i, b.ProducerID, b.BaseSequence, seq, bs[0].ProducerID)
		}
		seq += int32(len(b.values))
		for _, v := range b.values {
			if seen[v] {
				t.Errorf("%s written twice", v)
			}
			seen[v] = true
			n++
		}
	}
	want := 0
	for c := range calls {
		want += callers * (1 + c%3)
	}
	if n != want {
		t.Errorf("the log holds %d records, want %d", n, want)
	}
}

// A static member (instance id, as joiner's workers join) replaced by a
// new incarnation with the same instance id: the old member's offsets
// are refused (FENCED_INSTANCE_ID: the request carries the instance id),
// ErrAbortable; the new member's commit.
func testTxnFencedInstance(t *testing.T, e *txnEnv) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topic := e.topic(t, 1)
	group := topic + "-group"
	oldGen, oldMember := e.join(t, group, topic, "worker-0")
	newGen, newMember := e.join(t, group, topic, "worker-0")
	if newMember == oldMember {
		t.Fatalf("the second join kept member id %q", oldMember)
	}
	p := e.transactional(ctx, t, topic+"-txn", Config{})
	if err := p.Begin(); err != nil {
		t.Fatal(err)
	}
	err := p.SendOffsets(ctx, group, oldGen, oldMember, "worker-0", []Offset{{Topic: topic, Partition: 0, Offset: 4}})
	if !errors.Is(err, ErrAbortable) || !errors.Is(err, kafka.FencedInstanceID) {
		t.Errorf("the replaced member's SendOffsets = %v, want ErrAbortable with FENCED_INSTANCE_ID", err)
	}
	if err := p.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Begin(); err != nil {
		t.Fatal(err)
	}
	if err := p.SendOffsets(ctx, group, newGen, newMember, "worker-0", []Offset{{Topic: topic, Partition: 0, Offset: 5}}); err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.committed(t, group, topic, 0, 5); got != 5 {
		t.Errorf("the group's offset is %d, want the new member's 5", got)
	}
}

func TestTxnFencedInstance(t *testing.T)           { testTxnFencedInstance(t, kfakeEnv(t)) }
func TestTxnFencedInstanceRealBroker(t *testing.T) { testTxnFencedInstance(t, realEnv(t)) }

// A transactional batch the broker refuses for a record too large
// (MESSAGE_TOO_LARGE) wrote nothing: its sequence number is still free,
// the halves go with it, the transaction stays committable, and a
// read_committed reader sees every other message once, in order.
func TestTxnRejectedRecord(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "alerts"),
		kfake.BrokerConfigs(map[string]string{"message.max.bytes": "2000"}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	e := &txnEnv{addrs: c.ListenAddrs(), admin: &kafka.Client{Addr: kafka.TCP(c.ListenAddrs()...), Timeout: 10 * time.Second}, kfake: c}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := e.transactional(ctx, t, "rejected-txn", Config{})
	if err := p.Begin(); err != nil {
		t.Fatal(err)
	}
	msgs := messages("alerts", "m", 0, 1, 10)
	msgs[4].Value = bytes.Repeat([]byte{'B'}, 3000)
	err = p.WriteMessages(ctx, msgs...)
	var rej *RejectedError
	if !errors.As(err, &rej) || len(rej.Rejected) != 1 || rej.Rejected[0].Index != 4 {
		t.Fatalf("err = %v, want a *RejectedError of message 4", err)
	}
	if err := p.WriteMessages(ctx, messages("alerts", "after", 0, 1, 2)...); err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"m-0", "m-1", "m-2", "m-3", "m-5", "m-6", "m-7", "m-8", "m-9", "after-0", "after-1"}
	if got := e.readCommitted(t, "alerts"); !slices.Equal(got, want) {
		t.Errorf("read_committed: %q, want %q", got, want)
	}
}

// A transaction adds, with its first AddPartitionsToTxn, the partitions
// the last committed one wrote, and its group right after
// (AddOffsetsToTxn): in a steady stream of transactions each sends one
// AddPartitionsToTxn, and a commit sends only TxnOffsetCommit and EndTxn.
func TestTxnAddsTheLastTransactionsPartitionsFirst(t *testing.T) {
	e := kfakeEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topic, group, gen, member := e.txnGroup(t)
	other := e.topic(t, 1)
	p := e.transactional(ctx, t, topic+"-txn", Config{})
	var mu sync.Mutex
	var seen []string
	for _, k := range []kmsg.Key{kmsg.AddPartitionsToTxn, kmsg.AddOffsetsToTxn, kmsg.TxnOffsetCommit, kmsg.EndTxn} {
		e.kfake.ControlKey(int16(k), func(req kmsg.Request) (kmsg.Response, error, bool) {
			e.kfake.KeepControl()
			s := k.Name()
			if r, ok := req.(*kmsg.AddPartitionsToTxnRequest); ok {
				var tps []string
				for _, rt := range r.Topics {
					for _, p := range rt.Partitions {
						tps = append(tps, fmt.Sprintf("%s-%d", rt.Topic, p))
					}
				}
				for _, tx := range r.Transactions {
					for _, rt := range tx.Topics {
						for _, p := range rt.Partitions {
							tps = append(tps, fmt.Sprintf("%s-%d", rt.Topic, p))
						}
					}
				}
				slices.Sort(tps)
				s += fmt.Sprint(tps)
			}
			mu.Lock()
			seen = append(seen, s)
			mu.Unlock()
			return nil, nil, false
		})
	}
	took := func() []string {
		mu.Lock()
		defer mu.Unlock()
		s := seen
		seen = nil
		return s
	}
	both := []string{topic + "-0", other + "-0"}
	slices.Sort(both)
	steady := []string{fmt.Sprintf("AddPartitionsToTxn%v", both), "AddOffsetsToTxn", "TxnOffsetCommit", "EndTxn"}
	for i, want := range [][]string{
		{"AddPartitionsToTxn[" + topic + "-0]", "AddPartitionsToTxn[" + other + "-0]", "AddOffsetsToTxn", "TxnOffsetCommit", "EndTxn"},
		steady, steady,
	} {
		if err := p.Begin(); err != nil {
			t.Fatal(err)
		}
		for _, tp := range []string{topic, other} {
			if err := p.WriteMessages(ctx, messages(tp, fmt.Sprintf("t%d", i), 0, 1, 2)...); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.SendOffsets(ctx, group, gen, member, "", []Offset{{Topic: topic, Partition: 0, Offset: int64(2 * (i + 1))}}); err != nil {
			t.Fatal(err)
		}
		if err := p.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if got := took(); !slices.Equal(got, want) {
			t.Errorf("transaction %d sent %q, want %q", i+1, got, want)
		}
	}
	if got := e.committed(t, group, topic, 0, 6); got != 6 {
		t.Errorf("the group's offset is %d, want 6", got)
	}
	for _, tp := range []string{topic, other} {
		if n := len(e.batches(t, tp, 0)); n < 3 {
			t.Errorf("%s-0 holds %d batches, want the 3 transactions' (and their markers)", tp, n)
		}
	}
}
