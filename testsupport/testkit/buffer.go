package testkit

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// LogBuffer is a bytes.Buffer safe for concurrent writers: a log sink
// shared by workers' goroutines, read by the test.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// FailureLog returns a logger (INFO and up) whose lines t sees only if it
// fails: the last max of them, logged when t's cleanups run (after those
// registered later, such as stopping the workers). A test that passes stays
// quiet; one that fails in CI shows what its workers did.
func FailureLog(t testing.TB, max int) *slog.Logger {
	var buf LogBuffer
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
		if len(lines) > max {
			t.Logf("(the workers' first %d log lines are left out)", len(lines)-max)
			lines = lines[len(lines)-max:]
		}
		t.Logf("the workers' log, as the test failed:\n%s", strings.Join(lines, "\n"))
	})
	return slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
}
