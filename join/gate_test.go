package join

import (
	"context"
	"testing"
	"time"
)

func TestGate(t *testing.T) {
	g := newGate()
	ctx := context.Background()
	if err := g.enter(ctx); err != nil {
		t.Fatal(err)
	}
	// close waits for the batch in flight.
	closed := make(chan bool)
	go func() { closed <- g.close(ctx) }()
	select {
	case <-closed:
		t.Fatal("close returned with a batch in flight")
	case <-time.After(50 * time.Millisecond):
	}
	g.leave()
	if !<-closed {
		t.Fatal("close reported batches in flight after they left")
	}
	// While closed, enter blocks until reopen.
	entered := make(chan error)
	go func() { entered <- g.enter(ctx) }()
	select {
	case <-entered:
		t.Fatal("enter passed a closed gate")
	case <-time.After(50 * time.Millisecond):
	}
	g.reopen()
	if err := <-entered; err != nil {
		t.Fatal(err)
	}
	g.leave()
	// close is bounded by its context, and enter by its own.
	if err := g.enter(ctx); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if g.close(short) {
		t.Error("close reported drained with a batch still in flight")
	}
	if err := g.enter(short); err == nil {
		t.Error("enter passed a closed gate after its context ended")
	}
	g.leave()
	g.reopen()
}
