// Package lograte is joiner's one way to log an event that can repeat
// thousands of times a second (a dead letter, a late tick, a disk error):
// the first occurrence of each key is logged at once, later ones within
// the interval are only counted, and the next line for that key carries
// how many were suppressed. Every record is still counted by a metric and
// (for dead letters) routed to its topic; the log only summarises.
package lograte

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// DefaultInterval is how often one key is logged at most.
const DefaultInterval = 10 * time.Second

// Limiter logs at most one line per key per interval. The zero value is
// not usable; build one with New. Safe for concurrent use.
type Limiter struct {
	log      *slog.Logger
	interval time.Duration
	now      func() time.Time

	mu   sync.Mutex
	keys map[string]*entry
}

type entry struct {
	last       time.Time // when the key was last logged
	suppressed int64     // occurrences since then, not logged
}

// New returns a Limiter logging through log (nil: slog.Default()) at most
// once per interval per key (interval <= 0: DefaultInterval).
func New(log *slog.Logger, interval time.Duration) *Limiter {
	if log == nil {
		log = slog.Default()
	}
	if interval <= 0 {
		interval = DefaultInterval
	}
	return &Limiter{log: log, interval: interval, now: time.Now, keys: make(map[string]*entry)}
}

// Log logs msg with args at level unless key was logged less than the
// interval ago, in which case it only counts it. A logged line for a key
// that had suppressed occurrences carries "suppressed" (how many) and
// "suppressed_for" (since the previous line). It reports whether it logged.
func (l *Limiter) Log(ctx context.Context, level slog.Level, key, msg string, args ...any) bool {
	now := l.now()
	l.mu.Lock()
	e, ok := l.keys[key]
	if !ok {
		if len(l.keys) >= maxKeys {
			l.evict(now)
		}
		e = &entry{}
		l.keys[key] = e
	}
	if ok && now.Sub(e.last) < l.interval {
		e.suppressed++
		l.mu.Unlock()
		return false
	}
	suppressed, since := e.suppressed, now.Sub(e.last)
	e.last, e.suppressed = now, 0
	l.mu.Unlock()
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed, "suppressed_for", since.Round(time.Millisecond))
	}
	l.log.Log(ctx, level, msg, args...)
	return true
}

// Warn is Log at slog.LevelWarn with a background context.
func (l *Limiter) Warn(key, msg string, args ...any) bool {
	return l.Log(context.Background(), slog.LevelWarn, key, msg, args...)
}

// Error is Log at slog.LevelError with a background context.
func (l *Limiter) Error(key, msg string, args ...any) bool {
	return l.Log(context.Background(), slog.LevelError, key, msg, args...)
}

// maxKeys bounds the keys remembered, so keys built from untrusted input
// cannot grow the map without bound.
const maxKeys = 1024

// evict drops the keys whose interval has passed, or all of them if none
// has (their suppressed counts are then not reported). Called with l.mu held.
func (l *Limiter) evict(now time.Time) {
	for k, e := range l.keys {
		if now.Sub(e.last) >= l.interval {
			delete(l.keys, k)
		}
	}
	if len(l.keys) >= maxKeys {
		clear(l.keys)
	}
}
