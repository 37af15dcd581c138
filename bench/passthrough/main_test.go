package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/fetch"
	"github.com/joiner-dev/joiner/loadgen"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// TestCopyAll: every record of every input partition reaches the output
// once, with its key and value (followed by --pad-bytes spaces), in the
// partition of its key.
func TestCopyAll(t *testing.T) {
	for _, pad := range []int{0, 7} {
		t.Run(fmt.Sprintf("pad=%d", pad), func(t *testing.T) { testCopyAll(t, pad) })
	}
}

func testCopyAll(t *testing.T, pad int) {
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
	go func() { done <- copyAll(copyCtx, client, addrs, "in", "out", 20*time.Millisecond, pad) }()
	got := map[string]string{}
	var n int
	for deadline := time.Now().Add(20 * time.Second); n < len(want) && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		n = 0
		for p := range 3 {
			r := fetch.NewReader(client, "out", p, -1, 10*time.Millisecond, nil)
			end, err := listOffset(ctx, client, "out", p, kafka.LastOffset)
			if err != nil {
				t.Fatal(err)
			}
			for r.Next < end {
				recs, err := r.Fetch(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for _, rec := range recs {
					v, ok := strings.CutSuffix(string(rec.Value), strings.Repeat(" ", pad))
					if !ok || strings.HasSuffix(v, " ") {
						t.Fatalf("value %q: want the input value followed by exactly %d spaces", rec.Value, pad)
					}
					got[v] = string(rec.Key)
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

// TestPadValues: each value becomes itself followed by the padding, exactly
// once, in its own bytes (no value overwrites another), also when the
// buffer is reused for a larger batch.
func TestPadValues(t *testing.T) {
	var buf []byte
	for _, tt := range []struct {
		values []string
		pad    int
	}{
		{[]string{`{"id":"a"}`}, 1},
		{[]string{`{"id":"a"}`, ``, `{"id":"bc","symbol":"S1"}`}, 5},
		{[]string{`x`, `yy`, `zzz`, `{"id":"n-BBCA-0","symbol":"BBCA"}`, `w`}, 112},
		{[]string{`small`}, 3}, // reuses the larger buffer
	} {
		msgs := make([]kafka.Message, len(tt.values))
		for i, v := range tt.values {
			msgs[i] = kafka.Message{Key: []byte("k"), Value: []byte(v)}
		}
		spaces := bytes.Repeat([]byte{' '}, tt.pad)
		buf = padValues(buf, msgs, spaces)
		for i, v := range tt.values {
			want := v + strings.Repeat(" ", tt.pad)
			if string(msgs[i].Value) != want {
				t.Errorf("pad %d: value %d = %q; want %q", tt.pad, i, msgs[i].Value, want)
			}
			if cap(msgs[i].Value) != len(msgs[i].Value) {
				t.Errorf("pad %d: value %d has room to grow into the next one (cap %d, len %d)", tt.pad, i, cap(msgs[i].Value), len(msgs[i].Value))
			}
		}
	}
	// Reused without allocating once large enough.
	msgs := []kafka.Message{{Value: []byte("abc")}, {Value: []byte("de")}}
	vals := [][]byte{msgs[0].Value, msgs[1].Value}
	spaces := []byte("  ")
	if n := testing.AllocsPerRun(100, func() {
		msgs[0].Value, msgs[1].Value = vals[0], vals[1]
		buf = padValues(buf, msgs, spaces)
	}); n != 0 {
		t.Errorf("padValues allocates %v times per batch with a large enough buffer; want 0", n)
	}
}
