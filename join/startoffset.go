package join

import (
	"context"
	"fmt"

	"github.com/segmentio/kafka-go"
)

// Start positions of Config.StartOffset: where a notifications partition
// with no committed offset starts.
const (
	StartEarliest = "earliest"
	StartLatest   = "latest"
)

// uncommittedStart is where topic-p starts when the group has no committed
// offset for it: -1 (the partition's first offset) for the market topic and
// for StartEarliest, the partition's end for notifications with
// StartLatest. It retries the end-offset lookup until ctx is done.
func (w *Worker) uncommittedStart(ctx context.Context, topic string, p int) (int64, error) {
	if topic != w.cfg.Topics.Notifications || w.cfg.StartOffset != StartLatest {
		return -1, nil
	}
	for attempt := 0; ; attempt++ {
		end, err := listOffset(ctx, w.cfg.Client, topic, p, kafka.LastOffset)
		if err == nil {
			w.log.Info("no committed offset; starting at the end (--start-offset latest)", "topic", topic, "partition", p, "offset", end)
			return end, nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		w.metrics.FetchErrors.Inc()
		w.log.Warn("cannot read the end offset for --start-offset latest; retrying", "topic", topic, "partition", p, "err", err)
		if err := sleep(ctx, backoff(attempt)); err != nil {
			return 0, err
		}
	}
}

func validStartOffset(s string) error {
	switch s {
	case "", StartEarliest, StartLatest:
		return nil
	}
	return fmt.Errorf("join: Config.StartOffset %q: want %q or %q", s, StartEarliest, StartLatest)
}
