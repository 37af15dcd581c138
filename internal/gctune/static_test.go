package gctune

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"
)

func TestPercentFor(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, held int64
		want       int
	}{
		{0, 0, DefaultPercent},
		{40 * mib, 0, DefaultPercent},
		{40 * mib, 6 * 300 << 10, 191},     // six tasks: within a few percent
		{300 * mib, 299 * mib, MinPercent}, // 1,024 idle tasks
		{300 * mib, 400 * mib, MinPercent}, // held above live (estimated)
		{400 * mib, 300 * mib, 50},         // 1,024 tasks and 100 MiB churned
		{1000 * mib, 100 * mib, 180},
	} {
		if got := PercentFor(c.live, c.held); got != c.want {
			t.Errorf("PercentFor(%d MiB, %d MiB) = %d, want %d", c.live/mib, c.held/mib, got, c.want)
		}
	}
}

// TestTuneSetsAndRestores: Tune sets the target for the held heap, and
// DefaultPercent again when it stops.
func TestTuneSetsAndRestores(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(DefaultPercent))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); Tune(ctx, func() int64 { return 1 << 40 }) }()
	runtime.GC() // a live heap to read
	deadline := time.Now().Add(5 * time.Second)
	for gogc() != MinPercent {
		if time.Now().After(deadline) {
			t.Fatalf("the target is %d after 5s, want %d", gogc(), MinPercent)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	<-done
	if p := gogc(); p != DefaultPercent {
		t.Errorf("after Tune returned the target is %d, want %d", p, DefaultPercent)
	}
}

// gogc is the collector's target in effect.
func gogc() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

// TestTuneCollectsWhenStoresClose: a drop of the held heap by more than
// releaseDrop (stores closed) makes Tune collect once, so that the live
// heap it reads no longer holds them.
func TestTuneCollectsWhenStoresClose(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(DefaultPercent))
	var held atomic.Int64
	held.Store(1 << 30)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); Tune(ctx, held.Load) }()
	defer func() { cancel(); <-done }()
	time.Sleep(1500 * time.Millisecond) // a tick at the first held heap
	before := forcedGCs()
	held.Store(1<<30 - releaseDrop/2) // a small drop: no collection
	time.Sleep(1500 * time.Millisecond)
	if n := forcedGCs() - before; n != 0 {
		t.Fatalf("%d forced collections after a drop of %d bytes, want none", n, releaseDrop/2)
	}
	held.Store(1 << 20)
	deadline := time.Now().Add(5 * time.Second)
	for forcedGCs() == before {
		if time.Now().After(deadline) {
			t.Fatal("no forced collection 5s after the held heap dropped by ~1 GiB")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func forcedGCs() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/forced:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
