// Package backoff is joiner's one retry delay: exponential with jitter,
// capped, and a sleep that ends with its context. group, join, node and
// loadgen back off with it.
package backoff

import (
	"context"
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
