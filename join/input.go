package join

import (
	"context"
	"time"

	"github.com/joiner-dev/joiner/fetch"
	"github.com/segmentio/kafka-go"
)

// Fetcher reads the input topics: a *kafka.Client, a *fetch.Mux, or a
// fake in tests.
type Fetcher = fetch.Client

// Writer writes alerts and dead letters, each message naming its topic:
// produce.Producer (what node gives it), a *kafka.Writer (with an empty
// Topic), or a fake in tests.
type Writer interface {
	WriteMessages(ctx context.Context, msgs ...kafka.Message) error
}

// fetchedRecord is one fetched record, copied out of kafka-go's response
// buffers (the read path is package fetch, shared with bench/passthrough).
type fetchedRecord = fetch.Record

// partitionReader reads one topic-partition in order (package fetch's
// Reader, shared with bench/passthrough). It is owned by one goroutine and
// is not safe for concurrent use.
type partitionReader = fetch.Reader

// newPartitionReader returns a reader of topic-partition from offset next
// whose offset resets are only logged; a task's readers come from
// Processor.reader, which counts them.
func newPartitionReader(c Fetcher, topic string, partition int, next int64, maxWait time.Duration) *partitionReader {
	return fetch.NewReader(c, topic, partition, next, maxWait, nil)
}

// reader returns a task's reader of topic-partition from offset next, its
// offset resets counted and logged (input_offsetreset.go).
func (w *taskEnv) reader(topic string, partition int, next int64) *partitionReader {
	return fetch.NewReader(w.client, topic, partition, next, w.limits.FetchMaxWait, w.offsetReset)
}

// readerAt returns a reader of r's partition, as r reads it, from offset
// next.
func readerAt(r *partitionReader, next int64) *partitionReader {
	return fetch.NewReader(r.Client, r.Topic, r.Partition, next, r.MaxWait, r.OnReset)
}

func listOffset(ctx context.Context, c Fetcher, topic string, partition int, which int64) (int64, error) {
	return fetch.ListOffset(ctx, c, topic, partition, which)
}
