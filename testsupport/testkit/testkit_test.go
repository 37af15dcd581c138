package testkit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/demo"
	"github.com/joiner-dev/joiner/loadgen"
	"github.com/segmentio/kafka-go"
)

// The cutter closes every open connection, fails new dials until healed,
// and dials again after heal.
func TestCutter(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	ctx := context.Background()
	c := &cutter{conns: map[net.Conn]struct{}{}}
	conn, err := c.dial(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.cut()
	if _, err := conn.Write([]byte("x")); err == nil {
		t.Error("a connection open at the cut still writes")
	}
	if _, err := c.dial(ctx, "tcp", ln.Addr().String()); !errors.Is(err, errCut) {
		t.Errorf("dial after the cut: %v, want %v", err, errCut)
	}
	c.heal()
	conn, err = c.dial(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("dial after heal: %v", err)
	}
	if _, err := conn.Write([]byte("x")); err != nil {
		t.Errorf("write after heal: %v", err)
	}
	conn.Close()
	if n := len(c.conns); n != 0 {
		t.Errorf("%d connections tracked after the last one closed, want 0", n)
	}
}

// AfterAcked runs its func once the n-th message to its topic is
// acknowledged, not before, and only once.
func TestAfterAcked(t *testing.T) {
	b, err := demo.StartBroker(2)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := loadgen.NewWriter(b.Addrs)
	defer w.Close()
	runs := 0
	wait := AfterAcked(w, b.Topics.Notifications, 5, func() { runs++ })
	write := func(topic string, n int) {
		t.Helper()
		msgs := make([]kafka.Message, n)
		for i := range msgs {
			msgs[i] = kafka.Message{Topic: topic, Key: []byte{byte('a' + i)}, Value: []byte("v")}
		}
		if err := w.WriteMessages(ctx, msgs...); err != nil {
			t.Fatal(err)
		}
	}
	write(b.Topics.Notifications, 4)
	write(b.Topics.Market, 10)
	if wait() {
		t.Fatal("ran after 4 of 5 notifications")
	}
	write(b.Topics.Notifications, 1)
	if !wait() {
		t.Fatal("did not run after 5 notifications")
	}
	write(b.Topics.Notifications, 3)
	if !wait() || runs != 1 {
		t.Errorf("ran %d times, want once", runs)
	}
}

// fakeTB records what FailureLog asks of a test.
type fakeTB struct {
	testing.TB
	cleanups []func()
	failed   bool
	logs     []string
}

func (f *fakeTB) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }
func (f *fakeTB) Failed() bool      { return f.failed }
func (f *fakeTB) Logf(format string, args ...any) {
	f.logs = append(f.logs, fmt.Sprintf(format, args...))
}
func (f *fakeTB) Helper() {}

// FailureLog shows the last lines of the log to a failed test only.
func TestFailureLog(t *testing.T) {
	for _, failed := range []bool{false, true} {
		tb := &fakeTB{TB: t, failed: failed}
		log := FailureLog(tb, 2)
		log.Info("first")
		log.Debug("below info")
		log.Info("second", "task", 3)
		log.Warn("third")
		for _, fn := range tb.cleanups {
			fn()
		}
		got := strings.Join(tb.logs, "\n")
		if !failed {
			if got != "" {
				t.Errorf("a passing test saw %q", got)
			}
			continue
		}
		if !strings.Contains(got, "first 1 log lines are left out") || strings.Contains(got, "msg=first") ||
			!strings.Contains(got, "msg=second task=3") || !strings.Contains(got, "msg=third") || strings.Contains(got, "below info") {
			t.Errorf("a failed test saw %q, want the last two lines at INFO and up", got)
		}
	}
}
