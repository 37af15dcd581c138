package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/loadgen"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// TestCopyAll: every record of every input partition reaches the output
// once, with its key and value, in the partition of its key.
func TestCopyAll(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "in", "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addrs := c.ListenAddrs()
	client := &kafka.Client{Addr: kafka.TCP(addrs...), Timeout: 10 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := loadgen.NewWriter(addrs)
	defer w.Close()
	want := map[string]string{}
	var msgs []kafka.Message
	for i := range 3000 {
		k, v := fmt.Sprintf("k%d", i%50), fmt.Sprintf("v%d", i)
		want[v] = k
		msgs = append(msgs, kafka.Message{Topic: "in", Key: []byte(k), Value: []byte(v)})
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	copyCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- copyAll(copyCtx, client, addrs, "in", "out", 20*time.Millisecond) }()
	got := map[string]string{}
	var n int
	for deadline := time.Now().Add(20 * time.Second); n < len(want) && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		n = 0
		for p := range 3 {
			r := &reader{client: client, topic: "out", partition: p, next: -1, maxWait: 10 * time.Millisecond}
			end, err := listOffset(ctx, client, "out", p, kafka.LastOffset)
			if err != nil {
				t.Fatal(err)
			}
			for r.next < end {
				recs, err := r.fetch(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for _, rec := range recs {
					got[string(rec.Value)] = string(rec.Key)
					n++
				}
			}
		}
	}
	stop()
	if err := <-done; err != context.Canceled {
		t.Errorf("copyAll returned %v; want context.Canceled", err)
	}
	if n != len(want) || len(got) != len(want) {
		t.Fatalf("%d records copied, %d distinct; want %d once each", n, len(got), len(want))
	}
	for v, k := range want {
		if got[v] != k {
			t.Fatalf("value %s has key %q; want %q", v, got[v], k)
		}
	}
}
