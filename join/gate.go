package join

import (
	"context"
	"sync"
)

// gate pauses the processing of notifications during a rebalance. Process
// tasks pass through it around each batch; Rebalancing closes it and waits
// for the batches in flight, so the commit it makes covers everything
// processed and nothing is processed again by a task's next owner. Assigned
// opens it again: the tasks that stay resume at once.
type gate struct {
	mu       sync.Mutex
	closed   bool
	open     chan struct{} // closed while the gate is open
	inflight int
	drained  chan struct{} // closed when inflight reaches 0 while closed
}

func newGate() *gate {
	g := &gate{open: make(chan struct{})}
	close(g.open)
	return g
}

// enter waits until the gate is open, then counts a batch in flight.
func (g *gate) enter(ctx context.Context) error {
	for {
		g.mu.Lock()
		if !g.closed {
			g.inflight++
			g.mu.Unlock()
			return nil
		}
		open := g.open
		g.mu.Unlock()
		select {
		case <-open:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// hold counts one more batch in flight for a caller that has entered: it
// does not wait, even if the gate closed meanwhile. Each hold is ended by
// a leave.
func (g *gate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inflight++
}

// leave ends a batch.
func (g *gate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inflight--
	if g.closed && g.inflight == 0 && g.drained != nil {
		close(g.drained)
		g.drained = nil
	}
}

// close stops new batches and waits for those in flight, or until ctx is
// done. It reports whether they all finished.
func (g *gate) close(ctx context.Context) bool {
	g.mu.Lock()
	if !g.closed {
		g.closed = true
		g.open = make(chan struct{})
	}
	if g.inflight == 0 {
		g.mu.Unlock()
		return true
	}
	if g.drained == nil {
		g.drained = make(chan struct{})
	}
	drained := g.drained
	g.mu.Unlock()
	select {
	case <-drained:
		return true
	case <-ctx.Done():
		return false
	}
}

// reopen lets batches through again.
func (g *gate) reopen() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		g.closed = false
		close(g.open)
	}
}
