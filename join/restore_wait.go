// Waiting for a task's state: a notification is joined with a task's
// prices only once the task's market has been read past its time.

package join

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/segmentio/kafka-go"
)

// waitFor blocks until the task has been read past tsMs, or up to the
// partition's end as it was once the wait began. This is what aligns a
// notification with the ticks before it: a tick produced before a
// notification is in the store once waitFor returns nil. While the market
// cannot be read (no leader, broker down), it re-checks every idle and logs
// once that it is still waiting. It gives up after limit with
// errNotReadPast, never by answering early, because a join before the
// market is read could miss a tick; ctx or the task stopping end it early
// (with their error).
//
// No caller waits without a limit: a merged task's market advances in its
// own merge loop, so two merge loops each waiting for the other's market
// without one would wait for ever (see runMerged's lookup retries, which
// go on reading their market).
func (s *stateTask) waitFor(ctx context.Context, tsMs int64, idle, limit time.Duration) error {
	recheck := time.NewTimer(idle)
	defer recheck.Stop()
	expire := time.NewTimer(limit)
	defer expire.Stop()
	end := int64(-1) // the end offset, read once the task is restored
	began := time.Now()
	warned := false
	// With a grace, the market must be read past tsMs + grace, or be
	// found at its end no earlier than that time by the clock.
	grace := s.env.limits.Grace.Milliseconds()
	past := tsMs
	if grace > 0 && tsMs < math.MaxInt64-grace {
		past = tsMs + grace
	}
	var graceWait <-chan time.Time
	for {
		restored := s.isRestored()
		s.pmu.Lock()
		done := restored && (s.lastTsMs > past || (end >= 0 && s.next >= end))
		changed := s.changed
		s.pmu.Unlock()
		if done {
			return nil
		}
		if wait := time.Until(time.UnixMilli(past)); restored && end < 0 && grace > 0 && wait > 0 {
			if graceWait == nil {
				graceWait = time.After(wait)
			}
		} else if restored && end < 0 {
			// Not read past tsMs: wait until the reader reaches the end the
			// log has now, which includes every record produced before the
			// caller's.
			if e, err := listOffset(ctx, s.env.client, s.env.topics.Market, s.p, kafka.LastOffset); err == nil {
				end = e
				continue
			}
			s.env.metrics.FetchErrors.Inc() // retried at the next recheck
		}
		var restoring <-chan struct{}
		if !restored {
			restoring = s.restored
		}
		select {
		case <-changed:
		case <-restoring:
		case <-graceWait:
			graceWait = nil
		case <-s.stopped:
			return errTaskStopped
		case <-expire.C:
			return fmt.Errorf("%w: task %d, notification at %d ms, waited %v", errNotReadPast, s.p, tsMs, time.Since(began).Round(time.Millisecond))
		case <-recheck.C:
			if !warned && restored {
				warned = true
				s.env.log.Warn("a notification waits for the market to be read past its time; it is not joined before (the market partition may have no leader)",
					"task", s.p, "topic", s.env.topics.Market, "notification_ts_ms", tsMs, "waited", time.Since(began).Round(time.Millisecond))
			}
			recheck.Reset(idle)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
