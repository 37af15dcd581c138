package statestore

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/joiner-dev/joiner/internal/lograte"
)

// pebbleLogger routes Pebble's own log lines to slog: informational lines
// at Debug, errors at Error, rate-limited (one line per task and format per
// interval, with the count suppressed: Pebble repeats an error as often as
// it retries, which on a full disk is without pause). Fatalf logs at
// Error, records the fault (a marker in the task dir; see corrupt.go and
// diskfull.go), which by default exits, and panics if that returned, since
// Pebble expects it not to return.
type pebbleLogger struct {
	l     *slog.Logger
	rl    *lograte.Limiter
	task  int
	fatal func(msg string) // records the fault; by default it exits
}

func (p pebbleLogger) Infof(format string, args ...any) {
	if p.l.Enabled(context.Background(), slog.LevelDebug) {
		p.l.Debug("pebble: " + fmt.Sprintf(format, args...))
	}
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	msg := "pebble: " + fmt.Sprintf(format, args...)
	if p.rl == nil {
		p.l.Error(msg)
		return
	}
	p.rl.Error(rateKey(p.task, format), msg, "task", p.task)
}

func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := "pebble: " + fmt.Sprintf(format, args...)
	p.l.Error(msg)
	if p.fatal != nil {
		p.fatal(msg)
	}
	panic(msg)
}
