package join

import (
	"context"
	"testing"
	"time"
)

// TestBulkRestoreWaitsForTheBudget: a bulk restore does not start while
// the worker's restore budget is held by others, and completes once it is
// given back (its share capped at the whole budget, so a restore larger
// than the budget still runs).
func TestBulkRestoreWaitsForTheBudget(t *testing.T) {
	rig := newRestoreRig(t, func(f *fakeFetcher) Fetcher { return chunkFetcher{f, 3} })
	restoreMode(t, rig.st.env, "load")
	rig.st.env.restoreBudget = newTickBudget(10)
	for off := range int64(40) {
		rig.f.produce("market", 0, 1000+off, "A", tickJSON("A", float64(off)))
	}
	others, err := rig.st.env.restoreBudget.acquire(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan bool, 1)
	go func() {
		r := newPartitionReader(rig.st.env.client, "market", 0, 0, time.Millisecond)
		_, ok := rig.st.restore(context.Background(), r, 40, 0, rig.st.env.log)
		done <- ok
	}()
	select {
	case <-done:
		t.Fatal("the restore ran while the budget was held by others")
	case <-time.After(200 * time.Millisecond):
	}
	if off := rig.st.appliedOffset(); off != -1 {
		t.Fatalf("applied offset %d while waiting for the budget; want -1", off)
	}
	rig.st.env.restoreBudget.release(others)
	select {
	case ok := <-done:
		if !ok || rig.st.appliedOffset() != 39 {
			t.Fatalf("restore: ok %v, applied offset %d; want true and 39", ok, rig.st.appliedOffset())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the restore did not run once the budget was free")
	}
	if b := rig.st.env.restoreBudget; b.free != b.total {
		t.Fatalf("%d of %d ticks free after the restore; want all", b.free, b.total)
	}
}

// TestTickBudgetCancel: a waiter whose context ends leaves the queue, and
// the one behind it gets the ticks.
func TestTickBudgetCancel(t *testing.T) {
	b := newTickBudget(10)
	held, _ := b.acquire(context.Background(), 8)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := b.acquire(ctx, 5); errc <- err }()
	for {
		b.mu.Lock()
		n := len(b.wait)
		b.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	got := make(chan int64, 1)
	go func() { n, _ := b.acquire(context.Background(), 2); got <- n }()
	select {
	case <-got:
		t.Fatal("a waiter went ahead of the queue")
	case <-time.After(50 * time.Millisecond):
	}
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("a cancelled acquire returned no error")
	}
	select {
	case n := <-got:
		if n != 2 {
			t.Fatalf("took %d; want 2", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter behind a cancelled one never got its ticks")
	}
	b.release(held)
	b.release(2)
	if b.free != 10 {
		t.Fatalf("%d free; want 10", b.free)
	}
}
