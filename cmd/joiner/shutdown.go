package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// shutdownGrace is how long `joiner run` may take to stop after SIGTERM:
// a clean leave is bounded by the rebalance timeout, and closing the HTTP
// server and the stores by 5 s each.
func shutdownGrace(rebalanceTimeout time.Duration) time.Duration {
	return max(rebalanceTimeout, 15*time.Second) + 15*time.Second
}

// boundShutdown makes a stop by signal end the process whatever hangs (a
// task store whose disk is full can keep Pebble waiting for ever): once
// ctx is done, the worker has grace to stop; at its end, or at a second
// SIGTERM or SIGINT, one line is printed and the process exits 1. Call the
// returned func when the worker has stopped.
func boundShutdown(ctx context.Context, grace time.Duration, stderr io.Writer, exit func(int)) (stop func()) {
	done := make(chan struct{})
	sig := make(chan os.Signal, 1)
	go func() {
		select {
		case <-done:
			return
		case <-ctx.Done():
		}
		// Only now: the signal that cancelled ctx is not the second one.
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(sig)
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-done:
			return
		case <-t.C:
			fmt.Fprintf(stderr, "joiner run: the worker did not stop within %s of the signal (a task store stuck on its disk?); exiting 1\n", grace)
		case s := <-sig:
			fmt.Fprintf(stderr, "joiner run: second %s while stopping; exiting 1\n", s)
		}
		exit(1)
	}()
	return func() { close(done) }
}
