// Package gctune sets the garbage collector's target for joiner's
// processes (joiner and bench/passthrough, the ceiling it is measured
// against, alike).
//
// A worker's heap is mostly short-lived buffers: fetched records and the
// alerts being written. With Go's default target (GOGC=100) a small heap is
// collected often, and on a host with two cores the collector's dedicated
// worker takes one of them for each cycle. With a target of 200, the
// drain of bin/bench measured about a tenth less CPU per notification for
// joiner and the pass-through alike (joiner 2.8–3.2 µs against 3.3–3.5 µs
// on the 300,000-notification drain, in runs alternating with ones under
// GOGC=100:
//
//	bin/bench --brokers HOST:PORT --figures drain --contestants joiner-1w,passthrough
//	GOGC=100 bin/bench --brokers HOST:PORT --figures drain --contestants joiner-1w,passthrough
//
// ), and `joiner demo` with 1,000,000 notifications peaked at 208 MiB
// instead of about 155 MiB.
package gctune

import (
	"os"
	"runtime/debug"
	"sync/atomic"
)

// DefaultPercent is the collector's target used when GOGC is not set:
// the heap may grow by this percentage of the live heap between two
// collections.
const DefaultPercent = 200

// Apply sets the collector's target to DefaultPercent unless the GOGC
// environment variable is set, which then wins (as does GOMEMLIMIT, which
// the runtime applies on its own). It returns the target in effect, or -1
// when GOGC decides.
func Apply() int {
	if _, ok := os.LookupEnv("GOGC"); ok {
		return -1
	}
	debug.SetGCPercent(DefaultPercent)
	applied.Store(true)
	return DefaultPercent
}

// applied is set by Apply when it set the target.
var applied atomic.Bool

// Applied reports whether Apply set the target (GOGC is not set): Tune
// may then move it.
func Applied() bool { return applied.Load() }
