package backoff

import (
	"context"
	"testing"
	"testing/quick"
	"time"
)

func TestNominal(t *testing.T) {
	p := Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	for _, tc := range []struct {
		n    int
		want time.Duration
	}{
		{-1, 100 * time.Millisecond},
		{0, 100 * time.Millisecond},
		{1, 200 * time.Millisecond},
		{5, 3200 * time.Millisecond},
		{6, 5 * time.Second},
		{1000, 5 * time.Second},
	} {
		if got := p.Nominal(tc.n); got != tc.want {
			t.Errorf("Nominal(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
}

// TestDelayInRange: every delay is within [d/2, d] of the nominal one.
func TestDelayInRange(t *testing.T) {
	f := func(minMs, maxMs uint16, n uint8) bool {
		p := Policy{Min: time.Duration(minMs%1000+1) * time.Millisecond, Max: time.Duration(maxMs) * time.Millisecond}
		p.Max = max(p.Max, p.Min)
		d, nom := p.Delay(int(n)), p.Nominal(int(n))
		return d >= nom/2 && d <= nom && nom <= p.Max && nom >= p.Min
	}
	if err := quick.Check(f, nil); err != nil {
		t.Fatal(err)
	}
}

// TestDelayJittered: two hundred delays for the same attempt are not all
// equal (clients failing together spread out).
func TestDelayJittered(t *testing.T) {
	seen := map[time.Duration]bool{}
	for range 200 {
		seen[Default.Delay(3)] = true
	}
	if len(seen) < 10 {
		t.Fatalf("200 delays took only %d values", len(seen))
	}
}

func TestRetry(t *testing.T) {
	r := Retry{Policy: Policy{Min: time.Millisecond, Max: time.Hour}}
	for i := range 5 {
		if d := r.Next(); d > time.Millisecond<<i || d < time.Millisecond<<i/2 {
			t.Fatalf("attempt %d: %v", i, d)
		}
	}
	r.Reset()
	if d := r.Next(); d > time.Millisecond {
		t.Fatalf("after Reset: %v", d)
	}
}

func TestSleep(t *testing.T) {
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := Sleep(ctx, time.Hour); err != context.Canceled {
		t.Fatalf("Sleep on a cancelled context = %v", err)
	}
	if time.Since(start) > time.Second {
		t.Fatal("Sleep did not end with its context")
	}
	if err := Sleep(ctx, 0); err != context.Canceled {
		t.Fatalf("Sleep(0) on a cancelled context = %v", err)
	}
}
