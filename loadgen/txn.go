package loadgen

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/joiner-dev/joiner/internal/backoff"
	"github.com/joiner-dev/joiner/produce"
	"github.com/joiner-dev/joiner/record"
	"github.com/segmentio/kafka-go"
)

// DecoyPrice is the price of every tick of an aborted transaction: no
// real tick has it (real prices stay near 1000–9999), so an alert that
// carries it was joined with aborted data.
const DecoyPrice = 0.01

// DecoyIDPrefix starts the id of every notification of an aborted
// transaction.
const DecoyIDPrefix = "aborted-"

// txnWriter writes each chunk of a transactional run in one transaction
// and, before every AbortEvery-th one, writes decoys of the chunk (same
// keys and topics; ticks at DecoyPrice, notifications with ids starting
// with DecoyIDPrefix) in a transaction it aborts. A read_committed reader
// so sees exactly what a run without transactions writes.
type txnWriter struct {
	p          *produce.Producer
	abortEvery int
	runID      string
	market     string
	txns       int // committed transactions
	decoys     int // decoy records written (and aborted)
	aborted    Summary
}

func newTxnWriter(ctx context.Context, cfg Config) (*txnWriter, error) {
	var tr kafka.RoundTripper
	if cfg.Transport != nil {
		tr = cfg.Transport
	}
	id := cfg.TransactionalID
	if id == "" {
		id = "joiner-loadgen-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	p, err := produce.New(produce.Config{Addr: kafka.TCP(cfg.Brokers...), Transport: tr, TransactionalID: id})
	if err != nil {
		return nil, err
	}
	if err := p.InitProducerID(ctx); err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	return &txnWriter{p: p, abortEvery: cfg.AbortEvery, runID: cfg.RunID, market: cfg.MarketTopic}, nil
}

// decoy is m's copy in an aborted transaction.
func (w *txnWriter) decoy(m kafka.Message) kafka.Message {
	d := kafka.Message{Topic: m.Topic, Key: m.Key, Time: m.Time}
	if m.Topic == w.market {
		d.Value = record.AppendTick(nil, record.Tick{Symbol: string(m.Key), Price: DecoyPrice})
		w.aborted.Ticks++
	} else {
		n := record.Notification{ID: fmt.Sprintf("%s%s-%d", DecoyIDPrefix, w.runID, w.decoys), User: "aborted", Symbol: string(m.Key), Text: "aborted"}
		d.Value = record.AppendNotification(nil, &n)
		w.aborted.Notifications++
	}
	w.decoys++
	return d
}

// write commits msgs in one transaction, after an aborted one of decoys
// when it is the AbortEvery-th. A failed transaction is aborted and sent
// again (the caller's retry loop).
func (w *txnWriter) write(ctx context.Context, msgs []kafka.Message) error {
	if w.abortEvery > 0 && (w.txns+1)%w.abortEvery == 0 {
		decoys := make([]kafka.Message, len(msgs))
		for i, m := range msgs {
			decoys[i] = w.decoy(m)
		}
		if err := w.transaction(ctx, decoys, false); err != nil {
			return err
		}
	}
	if err := w.transaction(ctx, msgs, true); err != nil {
		return err
	}
	w.txns++
	return nil
}

// transaction writes msgs in one transaction and commits or aborts it.
func (w *txnWriter) transaction(ctx context.Context, msgs []kafka.Message, commit bool) error {
	err := w.p.Begin()
	if err == nil {
		err = w.p.WriteMessages(ctx, msgs...)
	}
	if err == nil {
		if commit {
			err = w.p.Commit(ctx)
		} else {
			err = w.p.Abort(ctx)
		}
	}
	if err == nil {
		return nil
	}
	if errors.Is(err, produce.ErrFenced) {
		return fmt.Errorf("%w (another loadgen uses transactional id of this run)", err)
	}
	// Abort what is open and let the caller retry the whole chunk; a
	// state the producer cannot abort from is reinitialized.
	if aerr := w.p.Abort(ctx); aerr != nil && !errors.Is(aerr, produce.ErrTxnState) {
		return fmt.Errorf("%w (then aborting: %w)", err, aerr)
	} else if aerr != nil && errors.Is(err, produce.ErrTxnState) {
		if ierr := w.p.InitProducerID(ctx); ierr != nil {
			return fmt.Errorf("%w (then: %w)", err, ierr)
		}
	}
	return err
}

// writeTxn is producer.write for a transactional run: a failed chunk is
// aborted and retried whole, with backoff, for up to the retry timeout.
func (p *producer) writeTxn(ctx context.Context, msgs []kafka.Message) error {
	start := time.Now()
	return backoff.Do(ctx, backoff.Default, func(_ int, err error, d time.Duration) error {
		if time.Since(start) >= p.retryTimeout {
			return err
		}
		p.retried += len(msgs)
		fmt.Fprintf(p.out, "loadgen: transaction of %d records failed (%v); retrying in %s\n", len(msgs), err, d)
		return nil
	}, func(ctx context.Context) error {
		err := p.txn.write(ctx, msgs)
		if err != nil && (ctx.Err() != nil || errors.Is(err, produce.ErrFenced)) {
			return backoff.Permanent(err)
		}
		return err
	})
}
