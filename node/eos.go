package node

import (
	"context"
	"fmt"
	"time"

	"github.com/joiner-dev/joiner/join"
	"github.com/joiner-dev/joiner/produce"
	"github.com/segmentio/kafka-go"
)

// eosWiring is what Config.ExactlyOnce changes in the worker: the
// commit interval's default and the transactional producer. (The input
// client, n.fetcher, is a read_committed Mux under exactly-once: see
// New.)
type eosWiring struct {
	client         join.Fetcher
	commitInterval time.Duration
	cfg            *join.ExactlyOnce // nil: at-least-once
}

// exactlyOnce makes the transactional producer under Config.ExactlyOnce
// (its InitProducerID fences the worker's previous incarnation). The
// tasks fetch through the Mux, n.fetcher, in both modes: under
// exactly-once it is fetch.NewCommittedMux's, read_committed (aborted
// transactions and control records dropped), one multi-partition request
// per broker as under at-least-once.
func (n *Node) exactlyOnce(ctx context.Context, maxBytes map[string]int) (eosWiring, error) {
	cfg := n.cfg
	w := eosWiring{client: n.fetcher, commitInterval: cfg.CommitInterval}
	if !cfg.ExactlyOnce {
		return w, nil
	}
	if w.commitInterval <= 0 {
		w.commitInterval = join.DefaultExactlyOnceCommitInterval
	}
	id := join.TransactionalID(cfg.Group, cfg.InstanceID)
	timeout := cfg.TransactionTimeout
	if timeout <= 0 {
		timeout = join.DefaultTransactionTimeout
	}
	newProducer := func(ctx context.Context) (join.Transactional, error) {
		p, err := produce.New(produce.Config{Addr: kafka.TCP(cfg.Brokers...), Transport: cfg.Transport, TopicMaxBytes: maxBytes,
			TransactionalID: id, TransactionTimeout: timeout})
		if err != nil {
			return nil, err
		}
		if err := p.InitProducerID(ctx); err != nil {
			return nil, fmt.Errorf("exactly-once: initializing the transactional producer %q: %w (the brokers must support transactions: transaction.state.log.replication.factor and min.insync.replicas at most the broker count)", id, err)
		}
		return p, nil
	}
	p, err := newProducer(ctx)
	if err != nil {
		return w, err
	}
	n.log.Info("exactly-once processing: one transaction per commit, inputs read read_committed", "transactional_id", id,
		"commit_interval", w.commitInterval, "transaction_timeout", timeout)
	w.cfg = &join.ExactlyOnce{Producer: p, NewProducer: newProducer, Group: cfg.Group, TransactionTimeout: timeout}
	return w, nil
}

// enable turns exactly-once on in worker, under Config.ExactlyOnce.
func (w eosWiring) enable(worker *join.Processor) error {
	if w.cfg == nil {
		return nil
	}
	return worker.EnableExactlyOnce(*w.cfg)
}
