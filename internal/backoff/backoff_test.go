package backoff

import (
	"context"
	"errors"
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

func TestDo(t *testing.T) {
	fast := Policy{Min: time.Microsecond, Max: time.Microsecond}
	errBoom := errors.New("boom")
	errStop := errors.New("stop")
	t.Run("retries until success", func(t *testing.T) {
		calls, seen := 0, []int{}
		err := Do(context.Background(), fast, func(attempt int, err error, next time.Duration) error {
			if !errors.Is(err, errBoom) || next <= 0 {
				t.Errorf("onErr(%d, %v, %v)", attempt, err, next)
			}
			seen = append(seen, attempt)
			return nil
		}, func(context.Context) error {
			calls++
			if calls < 3 {
				return errBoom
			}
			return nil
		})
		if err != nil || calls != 3 || len(seen) != 2 || seen[0] != 0 || seen[1] != 1 {
			t.Fatalf("err %v, calls %d, onErr attempts %v; want nil, 3, [0 1]", err, calls, seen)
		}
	})
	t.Run("permanent stops at once", func(t *testing.T) {
		calls := 0
		err := Do(context.Background(), fast, func(int, error, time.Duration) error {
			t.Error("onErr called for a permanent error")
			return nil
		}, func(context.Context) error { calls++; return Permanent(errBoom) })
		if err != errBoom || calls != 1 {
			t.Fatalf("err %v calls %d; want boom, 1", err, calls)
		}
		if Permanent(nil) != nil {
			t.Fatal("Permanent(nil) != nil")
		}
	})
	t.Run("onErr gives up", func(t *testing.T) {
		calls := 0
		err := Do(context.Background(), fast, func(attempt int, err error, _ time.Duration) error {
			if attempt == 4 {
				return errStop
			}
			return nil
		}, func(context.Context) error { calls++; return errBoom })
		if err != errStop || calls != 5 {
			t.Fatalf("err %v calls %d; want stop, 5", err, calls)
		}
	})
	t.Run("context ends", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		err := Do(ctx, Policy{Min: time.Hour, Max: time.Hour}, nil, func(context.Context) error {
			cancel()
			return errBoom
		})
		if !errors.Is(err, context.Canceled) || !errors.Is(err, errBoom) {
			t.Fatalf("err %v; want both context.Canceled and boom", err)
		}
		if err := Do(ctx, fast, nil, func(context.Context) error { t.Error("fn called after cancel"); return nil }); err != context.Canceled {
			t.Fatalf("err %v; want context.Canceled", err)
		}
	})
}
