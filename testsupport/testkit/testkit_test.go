package testkit

import (
	"context"
	"errors"
	"io"
	"net"
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
