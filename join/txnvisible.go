package join

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/joiner-dev/joiner/internal/backoff"
)

// txnAwaitVisible is called, under exactly-once, after the transaction
// that committed the final offsets of stopped tasks (commitFinal): it
// waits until the group's committed offsets show them, before the tasks
// are handed over.
//
// EndTxn returns once the coordinator has logged the commit; the markers
// that make the transaction's offsets the group's committed ones are
// written after it. A next owner that read the offsets meanwhile would
// get those of the transaction before and write again, in its own
// transaction, what this one committed. Kafka's Java consumer closes the
// gap with OffsetFetch's require_stable (v7, KIP-447), which kafka-go's
// OffsetFetch (v5) cannot send; the previous owner's wait closes it as
// well, since the group hands a task over only once its previous owner
// released it. It gives up (with a warning) after the transaction
// timeout: the coordinator then has aborted or completed the transaction
// long before.
func (w *Processor) txnAwaitVisible(ctx context.Context, offsets map[string]map[int]int64) {
	c := w.eos.c
	if c == nil || w.member == nil || len(offsets) == 0 {
		return
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, c.cfg.TransactionTimeout)
	defer cancel()
	var pending map[string][]int
	fetches := 0
	err := backoff.Do(ctx, visiblePolicy, nil, func(ctx context.Context) (err error) {
		fetches++
		pending, err = w.invisibleOffsets(ctx, offsets)
		if err == nil && len(pending) > 0 {
			err = errors.New("the group shows older committed offsets")
		}
		return err
	})
	if err != nil {
		w.log.Warn("exactly-once: the committed offsets of the tasks handed over are not visible in the group yet; their next owners may write again some alerts that are already committed",
			"waited", time.Since(start), "pending", pending, "err", err)
		return
	}
	if fetches > 1 {
		w.log.Debug("exactly-once: the handed-over tasks' committed offsets are visible", "waited", time.Since(start), "fetches", fetches)
	}
}

// visiblePolicy: the markers of a transaction usually follow its EndTxn
// within milliseconds.
var visiblePolicy = backoff.Policy{Min: 2 * time.Millisecond, Max: 50 * time.Millisecond}

// invisibleOffsets returns the partitions of offsets whose committed
// offset in the group is still below the one in offsets.
func (w *Processor) invisibleOffsets(ctx context.Context, offsets map[string]map[int]int64) (map[string][]int, error) {
	pending := map[string][]int{}
	for topic, want := range offsets {
		ps := make([]int, 0, len(want))
		for p := range want {
			ps = append(ps, p)
		}
		slices.Sort(ps)
		got, err := w.member.FetchOffsets(ctx, topic, ps)
		if err != nil {
			return nil, err
		}
		for _, p := range ps {
			if o, ok := got[p]; !ok || o < want[p] {
				pending[topic] = append(pending[topic], p)
			}
		}
	}
	if len(pending) == 0 {
		return nil, nil
	}
	return pending, nil
}
