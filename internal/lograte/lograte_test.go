package lograte

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestLimiterLogsOncePerIntervalAndCountsTheRest(t *testing.T) {
	var buf bytes.Buffer
	l := New(slog.New(slog.NewTextHandler(&buf, nil)), time.Second)
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }

	if !l.Warn("a", "dead-lettered", "reason", "a") {
		t.Fatal("first line of a key not logged")
	}
	for range 5 {
		if l.Warn("a", "dead-lettered", "reason", "a") {
			t.Fatal("a repeat within the interval was logged")
		}
	}
	if !l.Warn("b", "dead-lettered", "reason", "b") {
		t.Fatal("another key is limited by the first one")
	}
	now = now.Add(time.Second)
	if !l.Warn("a", "dead-lettered", "reason", "a") {
		t.Fatal("a key is not logged again after the interval")
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("got %d lines, want 3:\n%s", len(lines), buf.String())
	}
	if strings.Contains(lines[0], "suppressed") || strings.Contains(lines[1], "suppressed") {
		t.Errorf("a first line reports suppressed occurrences: %q, %q", lines[0], lines[1])
	}
	if !strings.Contains(lines[2], "suppressed=5") || !strings.Contains(lines[2], "suppressed_for=1s") {
		t.Errorf("the line after the interval does not carry the 5 suppressed repeats: %q", lines[2])
	}
}

func TestLimiterBoundsItsKeys(t *testing.T) {
	l := New(slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil)), time.Hour)
	for i := range 10 * maxKeys {
		l.Warn(strings.Repeat("k", i%97)+string(rune(i)), "m")
	}
	if n := len(l.keys); n > maxKeys {
		t.Fatalf("%d keys kept, want at most %d", n, maxKeys)
	}
}
