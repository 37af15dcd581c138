package produce

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// sequenceError is a Produce error that classifyTxn knows: sendSequenced
// decides what it means for the producer.
type sequenceError struct {
	kind txnErrKind
	err  error
}

func (e *sequenceError) Error() string { return e.err.Error() }
func (e *sequenceError) Unwrap() error { return e.err }

// prepare readies an idempotent or transactional write of c's batches: an
// idempotent producer gets its producer id (again, after a batch whose
// outcome is unknown); a transactional one adds the batches' partitions
// to its open transaction.
func (p *Producer) prepare(ctx context.Context, c *call) error {
	s := p.txn
	if s.id != "" {
		s.mu.Lock()
		pid := s.pid
		s.mu.Unlock()
		if pid < 0 {
			return fmt.Errorf("produce: WriteMessages: %w: call InitProducerID first", ErrTxnState)
		}
		return p.addPartitions(ctx, c)
	}
	p.initMu.Lock()
	defer p.initMu.Unlock()
	s.mu.Lock()
	need := s.pid < 0 || s.bump
	s.mu.Unlock()
	if !need {
		return nil
	}
	return p.initProducerID(ctx, -1, -1)
}

// sendSequenced sends b.window as one batch with the next sequence number
// of its partition, and advances it when the batch is acknowledged. A
// retry resends the same bytes (same sequence number): the broker
// acknowledges a batch it already has without writing it again.
func (p *Producer) sendSequenced(ctx context.Context, b *batch) error {
	s := p.txn
	tp := topicPartition{b.topic, b.partition}
	for renewed := false; ; renewed = true {
		ps := s.sequence(tp)
		pr, err := s.producer()
		if err != nil {
			ps.mu.Unlock()
			return err
		}
		pr.sequence = ps.next
		b.buf = appendProducerRecordSet(b.buf[:0], b.msgs, b.window, time.Now(), pr)
		err = p.sendBuilt(ctx, b, s.id)
		if err == nil {
			ps.next = nextSequence(ps.next, int32(len(b.window)))
			ps.mu.Unlock()
			return nil
		}
		ps.mu.Unlock()
		if rejectsRecords(err) {
			// The broker refused the records themselves and wrote
			// nothing: the sequence number is still free, and send
			// writes the window again in halves (sendEach).
			return err
		}
		var se *sequenceError
		if !errors.As(err, &se) {
			// Retries ran out, or a non-retriable error: whether the
			// broker wrote the batch is unknown, so the sequence is too.
			s.markBump()
			if s.id != "" {
				err = wrapTxn(txnAbortable, "", err)
				s.fail(txnAbortable, err)
			}
			return err
		}
		if se.kind == txnFenced {
			err = wrapTxn(txnFenced, "", se.err)
			s.fail(txnFenced, err)
			return err
		}
		s.markBump()
		if s.id == "" && se.kind == txnAbortable && !renewed {
			// An idempotent producer whose sequence the broker lost
			// (OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID) takes a
			// new producer id and sends the batch again, once, from
			// sequence 0: at-least-once for this batch, as the Java
			// producer is after it resets its producer id.
			p.initMu.Lock()
			ierr := p.renew(ctx, pr)
			p.initMu.Unlock()
			if ierr != nil {
				return fmt.Errorf("%w (then: %w)", se.err, ierr)
			}
			continue
		}
		if s.id == "" {
			return se.err // no transaction to abort: the caller retries
		}
		err = wrapTxn(se.kind, "", se.err)
		s.fail(se.kind, err)
		return err
	}
}

// renew takes a new producer id unless another call did since pr was read.
func (p *Producer) renew(ctx context.Context, pr batchProducer) error {
	s := p.txn
	s.mu.Lock()
	same := s.pid == pr.id && s.epoch == pr.epoch
	s.mu.Unlock()
	if !same {
		return nil
	}
	return p.initProducerID(ctx, -1, -1)
}

// markBump notes that a partition's sequence may be off.
func (s *txnState) markBump() {
	s.mu.Lock()
	s.bump = true
	s.mu.Unlock()
}
