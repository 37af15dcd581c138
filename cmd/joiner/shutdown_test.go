package main

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A worker that does not stop after its signal is ended: exit 1 and one
// line at the end of the grace, or at once on a second signal; one that
// stops in time is not.
func TestBoundShutdown(t *testing.T) {
	exited := make(chan int, 1)
	exit := func(code int) { exited <- code }

	ctx, cancel := context.WithCancel(context.Background())
	var out syncWriter
	stop := boundShutdown(ctx, 100*time.Millisecond, &out, exit)
	cancel()
	select {
	case code := <-exited:
		if code != 1 || !strings.Contains(out.String(), "did not stop within 100ms") || strings.Count(out.String(), "\n") != 1 {
			t.Errorf("exit %d, stderr %q; want 1 and one line", code, out.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no exit 5s after a 100ms grace")
	}
	stop()

	ctx, cancel = context.WithCancel(context.Background())
	out = syncWriter{}
	stop = boundShutdown(ctx, time.Hour, &out, exit)
	cancel()
	time.Sleep(50 * time.Millisecond) // the handler of the second signal is in place
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-exited:
		if code != 1 || !strings.Contains(out.String(), "second terminated") {
			t.Errorf("exit %d, stderr %q; want 1 naming the second signal", code, out.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no exit on a second SIGTERM")
	}
	stop()

	ctx, cancel = context.WithCancel(context.Background())
	stop = boundShutdown(ctx, 100*time.Millisecond, &out, exit)
	cancel()
	stop() // stopped in time
	select {
	case code := <-exited:
		t.Errorf("exit %d after the worker stopped in time", code)
	case <-time.After(300 * time.Millisecond):
	}
}

// A panic of the main goroutine exits 1 (a runtime failure), not Go's 2.
func TestPanicExits1(t *testing.T) {
	code := -1
	var out syncWriter
	func() {
		defer exitOnPanic(&out, func(c int) { code = c })
		panic("boom")
	}()
	if code != 1 || !strings.HasPrefix(out.String(), "joiner: internal error: boom\n") {
		t.Errorf("exit %d, stderr %q; want 1 and the error", code, out.String())
	}
}
