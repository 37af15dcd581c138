package loadgen

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/joiner-dev/joiner/internal/backoff"
	"github.com/segmentio/kafka-go"

	"github.com/joiner-dev/joiner/internal/fielderr"
)

// DefaultRetryTimeout is how long a run keeps retrying failed writes.
const DefaultRetryTimeout = 2 * time.Minute

// write sends msgs, retrying the ones that failed (and only those) with
// backoff until they are all acknowledged, ctx is done, or writes have
// failed without progress for retryTimeout. Every record retried counts in
// p.retried. The error it gives up with lists each distinct cause once,
// with a count.
func (p *producer) write(ctx context.Context, msgs []kafka.Message) error {
	var (
		failingSince time.Time
		failed       []kafka.Message // the last attempt's, of len(sent)
		sent         int
		causes       []string
	)
	errs := map[string]int{}
	return backoff.Do(ctx, backoff.Default, func(_ int, _ error, d time.Duration) error {
		if time.Since(failingSince) >= p.retryTimeout {
			return fielderr.Errorf("gave up on %d records after writes failed for %s ({RetryTimeout}): %s",
				len(failed), p.retryTimeout, summarize(errs))
		}
		p.retried += len(failed)
		fmt.Fprintf(p.out, "loadgen: %d of %d records not acknowledged (%s); retrying in %s\n",
			len(failed), sent, summarize(countOf(causes)), d)
		msgs = failed
		return nil
	}, func(ctx context.Context) error {
		err := p.w.WriteMessages(ctx, msgs...)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return backoff.Permanent(ctx.Err())
		}
		failed, causes = splitWriteError(err, msgs)
		sent = len(msgs)
		for _, c := range causes {
			errs[c]++
		}
		if len(failed) < len(msgs) || failingSince.IsZero() {
			failingSince = time.Now() // progress (or the first failure) restarts the clock
		}
		return err
	})
}

// splitWriteError returns the messages of msgs that err says failed, and
// one cause per failed message. A kafka.WriteErrors names each message; any
// other error fails them all.
func splitWriteError(err error, msgs []kafka.Message) ([]kafka.Message, []string) {
	var we kafka.WriteErrors
	if errors.As(err, &we) && len(we) == len(msgs) {
		var failed []kafka.Message
		var causes []string
		for i, e := range we {
			if e != nil {
				failed = append(failed, msgs[i])
				causes = append(causes, e.Error())
			}
		}
		if len(failed) > 0 {
			return failed, causes
		}
	}
	causes := make([]string, len(msgs))
	for i := range causes {
		causes[i] = err.Error()
	}
	return msgs, causes
}

func countOf(causes []string) map[string]int {
	m := map[string]int{}
	for _, c := range causes {
		m[c]++
	}
	return m
}

// summarize prints each distinct error once with its count, the most
// frequent first: "50× [7] Request Timed Out: ...; 2× EOF".
func summarize(errs map[string]int) string {
	keys := make([]string, 0, len(errs))
	for k := range errs {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if errs[a] != errs[b] {
			return errs[b] - errs[a]
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d× %s", errs[k], k)
	}
	return strings.Join(parts, "; ")
}
