// Package backoff is joiner's one retry delay: exponential with jitter,
// capped, and a sleep that ends with its context. group, join, node,
// produce, fetch and loadgen back off with it.
package backoff

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// Policy is an exponential backoff: before retry n (from 0) the nominal
// delay is Min doubled n times, capped at Max, and the delay waited is
// uniform in [d/2, d] for that nominal d, so that clients failing together
// do not retry together.
type Policy struct {
	Min, Max time.Duration
}

// Default is the policy of every retry that has no reason for another one:
// 100ms doubling to 5s.
var Default = Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second}

// Nominal returns the delay before retry n without jitter.
func (p Policy) Nominal(n int) time.Duration {
	n = max(n, 0)
	d := p.Min
	for i := 0; i < n && d < p.Max; i++ {
		d *= 2
	}
	return max(min(d, p.Max), 0)
}

// Delay returns the jittered delay before retry n (from 0): uniform in
// [d/2, d] for d = Nominal(n).
func (p Policy) Delay(n int) time.Duration {
	d := p.Nominal(n)
	if d <= 0 {
		return 0
	}
	return d/2 + rand.N(d/2+1)
}

// Retry counts the attempts of one retry loop.
type Retry struct {
	Policy Policy
	n      int
}

// Next returns the delay before the next attempt and counts it.
func (r *Retry) Next() time.Duration {
	d := r.Policy.Delay(r.n)
	r.n++
	return d
}

// Reset starts over from the shortest delay, after a success.
func (r *Retry) Reset() { r.n = 0 }

// Sleep waits d, or until ctx is done and returns its error.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// permanent marks an error that Do returns at once instead of retrying.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// Permanent wraps err so that Do stops and returns err (unwrapped) instead
// of retrying: an error no retry can fix, such as a bad configuration.
// Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanent{err}
}

// Do calls fn until it returns nil, returns an error made with Permanent,
// or ctx ends, sleeping p.Delay between attempts. It is the one retry loop
// of the project: a hand-written loop says why it is not this one.
//
// After a failed attempt, onErr (when not nil) is called with the attempt
// number (0 for the first), the error and the delay before the next
// attempt; it logs or counts, and a non-nil error from it stops Do with
// that error (to give up after some attempts, say). onErr is not called
// for a Permanent error.
//
// Do returns nil once fn succeeds; the Permanent error's cause; onErr's
// error; or, when ctx ends first, ctx.Err() wrapped with the last
// attempt's error, so errors.Is finds both.
func Do(ctx context.Context, p Policy, onErr func(attempt int, err error, next time.Duration) error, fn func(ctx context.Context) error) error {
	var last error
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return withLast(err, last)
		}
		err := fn(ctx)
		if err == nil {
			return nil
		}
		if pe, ok := err.(permanent); ok {
			return pe.err
		}
		last = err
		d := p.Delay(attempt)
		if onErr != nil {
			if stop := onErr(attempt, err, d); stop != nil {
				return stop
			}
		}
		if err := Sleep(ctx, d); err != nil {
			return withLast(err, last)
		}
	}
}

func withLast(ctxErr, last error) error {
	if last == nil {
		return ctxErr
	}
	return fmt.Errorf("%w (last attempt: %w)", ctxErr, last)
}
