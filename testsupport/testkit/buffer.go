package testkit

import (
	"bytes"
	"sync"
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
