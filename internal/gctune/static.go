package gctune

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// The target over a heap that is mostly held, not churned.
//
// A worker of many tasks holds a heap that no notification changes: each
// open task store's Pebble DB keeps its WAL writer, commit pipeline and
// MANIFEST writer (about a quarter MiB per store) whether ticks arrive or
// not. Under a fixed target of DefaultPercent the collector lets the heap
// grow by twice that too before it collects, and the pages the buffers of
// the fetches fill in that room stay resident: a worker of 1,024 idle
// tasks had a live heap of ~300 MB, a target of ~900 MB and an RSS of
// ~845 MB (issue 22's width test). The room only needs to be in
// proportion to the heap that is allocated and dropped, so Tune gives
// DefaultPercent of the live heap less the held part:
//
//	percent = DefaultPercent × (live − held) / live, at least MinPercent
//
// A worker of six tasks holds ~1.5 MiB of a live heap of tens of MiB: its
// target stays within a few percent of DefaultPercent. One of 1,024 idle
// tasks gets MinPercent: a target of 1.25 × live.

//
// The live heap Tune reads is the last collection's. When stores close (a
// rebalance moved tasks away), the held heap drops at once but the live
// heap read still holds the closed stores until the next collection,
// which an idle worker may not reach for minutes: the target computed
// from both would rise, and the freed stores' pages stay resident (a
// worker that gave 1,024 of its 2,048 tasks away kept 751 KiB of RSS per
// remaining task). So when the held heap is more than releaseDrop below
// its peak since the last such collection, however slowly the stores
// closed, Tune collects and returns the freed memory to the OS
// (debug.FreeOSMemory) before it reads the live heap.

// releaseDrop is the drop of the held heap after which Tune collects.
const releaseDrop = 16 << 20

// MinPercent is the lowest target Tune sets.
const MinPercent = 25

// tuneEvery is how often Tune reads the live heap.
const tuneEvery = time.Second

// PercentFor is the target Tune sets for a live heap of live bytes of
// which held are held (not churned).
func PercentFor(live, held int64) int {
	if live <= 0 || held <= 0 {
		return DefaultPercent
	}
	p := int(DefaultPercent * max(live-held, 0) / live)
	return min(max(p, MinPercent), DefaultPercent)
}

// Tune sets the collector's target to PercentFor(the live heap, held())
// every second until ctx is done, when it sets DefaultPercent again. Run
// it only after Apply returned DefaultPercent (GOGC not set).
func Tune(ctx context.Context, held func() int64) {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	t := time.NewTicker(tuneEvery)
	defer t.Stop()
	cur := DefaultPercent
	defer func() { debug.SetGCPercent(DefaultPercent) }()
	var peak int64 // the most held since the last release
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h := held()
		if peak-h > releaseDrop {
			debug.FreeOSMemory()
			peak = h
		}
		peak = max(peak, h)
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 {
			continue
		}
		p := PercentFor(int64(sample[0].Value.Uint64()), h)
		if p != cur && (p-cur > 5 || cur-p > 5 || p == MinPercent || p == DefaultPercent) {
			debug.SetGCPercent(p)
			cur = p
		}
	}
}
