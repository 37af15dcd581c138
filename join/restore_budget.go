package join

import (
	"context"
	"sync"
)

// restoreBudgetTicks is the worker-wide budget of the ticks that bulk
// restores hold in memory at once (about 40 bytes each, restore_load.go):
// 4M ticks, ~160 MiB. A bulk restore takes its share, at most one chunk
// (restoreLoadMaxTicks) and at most the whole budget, before it makes its
// Loader and gives it back when it ends; the restores of a rebalance that
// hands a worker a thousand tasks then hold at most this much, whatever
// the task count, and the others wait their turn.
const restoreBudgetTicks = 4 << 20

// tickBudget is a weighted semaphore of ticks, its waiters served in
// order.
type tickBudget struct {
	mu    sync.Mutex
	total int64
	free  int64
	wait  []*budgetWaiter
}

type budgetWaiter struct {
	n     int64
	ready chan struct{}
}

func newTickBudget(total int64) *tickBudget { return &tickBudget{total: total, free: total} }

// acquire takes n ticks (at most the total) from b, waiting until they
// are free or ctx is done; it returns what it took, to give to release.
func (b *tickBudget) acquire(ctx context.Context, n int64) (int64, error) {
	n = max(min(n, b.total), 0)
	b.mu.Lock()
	if len(b.wait) == 0 && b.free >= n {
		b.free -= n
		b.mu.Unlock()
		return n, nil
	}
	w := &budgetWaiter{n: n, ready: make(chan struct{})}
	b.wait = append(b.wait, w)
	b.mu.Unlock()
	select {
	case <-w.ready:
		return n, nil
	case <-ctx.Done():
		b.mu.Lock()
		defer b.mu.Unlock()
		select {
		case <-w.ready: // granted meanwhile: give it back
			b.free += n
			b.grant()
		default:
			for i, x := range b.wait {
				if x == w {
					b.wait = append(b.wait[:i], b.wait[i+1:]...)
					break
				}
			}
			b.grant() // the next may fit now that w no longer heads the queue
		}
		return 0, ctx.Err()
	}
}

// release gives back n ticks taken by acquire.
func (b *tickBudget) release(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.free += n
	b.grant()
}

// grant wakes the waiters, in order, whose ticks are free; b.mu is held.
func (b *tickBudget) grant() {
	for len(b.wait) > 0 && b.wait[0].n <= b.free {
		w := b.wait[0]
		b.wait = b.wait[1:]
		b.free -= w.n
		close(w.ready)
	}
}
