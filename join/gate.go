package join

import (
	"context"
	"sync"
)

// gate pauses the processing of one task's notifications. Each process task
// has its own and passes through it around each batch (a chunk handed to
// the outbox stays in flight until it is acknowledged). When a rebalance
// revokes the task, Assigned closes its gate and waits for the batches in
// flight, then stops the task and commits its offsets: the commit covers
// everything it processed and its next owner processes nothing again. The
// tasks that stay never pass a closed gate; at shutdown every gate closes.
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

// isShut reports whether the gate is closed (the task is paused).
func (g *gate) isShut() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

// shut stops new batches without waiting for those in flight.
func (g *gate) shut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		g.closed = true
		g.open = make(chan struct{})
	}
}

// close stops new batches and waits for those in flight, or until ctx is
// done. It reports whether they all finished.
func (g *gate) close(ctx context.Context) bool {
	g.shut()
	g.mu.Lock()
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
