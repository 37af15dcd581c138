package statestore

import (
	"context"
	"fmt"
	"log/slog"
)

// pebbleLogger routes Pebble's own log lines to slog: informational lines
// at Debug, errors at Error. Fatalf logs at Error, records the fault (a
// corruption marker in the task dir; see corrupt.go), which by default
// exits, and panics if that returned, since Pebble expects it not to
// return.
type pebbleLogger struct {
	l     *slog.Logger
	fatal func(msg string) // records the fault; by default it exits
}

func (p pebbleLogger) Infof(format string, args ...any) {
	if p.l.Enabled(context.Background(), slog.LevelDebug) {
		p.l.Debug("pebble: " + fmt.Sprintf(format, args...))
	}
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error("pebble: " + fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := "pebble: " + fmt.Sprintf(format, args...)
	p.l.Error(msg)
	if p.fatal != nil {
		p.fatal(msg)
	}
	panic(msg)
}
