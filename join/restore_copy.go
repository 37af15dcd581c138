// Dead-lettering a promoted copy's skipped ticks: a standby applies the
// malformed ticks of its task without dead-lettering them (the active
// owner does); once it becomes the active task, it routes the ones the
// group had not committed past.

package join

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/joiner-dev/joiner/internal/backoff"
)

// deadLetterCopied dead-letters the malformed records of market-p in
// [from, to), which a standby copy applied without routing them, and
// reports false when ctx ended first. Ticks are not applied again: the
// store holds them. Records routed by the previous owner too are written
// twice (at least once).
func (s *stateTask) deadLetterCopied(ctx context.Context, from, to int64, log *slog.Logger) bool {
	w := s.env
	r := w.reader(w.topics.Market, s.p, from)
	routed := 0
	for r.Next < to {
		// One round: a fetch and its dead letters, retried until it
		// succeeds; each round's retries start from the shortest delay.
		err := backoff.Do(ctx, backoff.Default, func(_ int, err error, _ time.Duration) error {
			log.Warn("dead-lettering the malformed ticks a standby copy skipped; retrying", "from_offset", r.Next, "to_offset", to, "err", err)
			return nil
		}, func(ctx context.Context) error {
			recs, err := r.Fetch(ctx)
			if err == nil {
				recs = slices.DeleteFunc(recs, func(rec fetchedRecord) bool { return rec.Offset >= to })
				var d decodedBatch
				if s.decodeInto(&d, recs, from); len(d.dead) > 0 {
					if err = w.writeOut(ctx, nil, d.dead); err == nil {
						routed += len(d.dead)
					}
				}
			}
			if ctx.Err() != nil {
				return backoff.Permanent(ctx.Err())
			}
			if err != nil && len(recs) > 0 {
				// Nothing is skipped: the reader goes back to the first
				// record of the failed round.
				r.Next = recs[0].Offset
			}
			return err
		})
		if err != nil {
			return false
		}
	}
	s.rc.dead.Add(int64(routed))
	if routed > 0 {
		log.Info("dead-lettered the malformed ticks its standby copy had skipped", "records", routed, "from_offset", from, "to_offset", to)
	}
	return true
}
