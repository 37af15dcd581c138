package testkit

import (
	"context"
	"sync"
	"time"

	"github.com/joiner-dev/joiner/demo"
	"github.com/segmentio/kafka-go"
)

// TopicReader reads every partition of a topic from its start; it is the
// reader `joiner demo` reads alerts with.
type TopicReader = demo.TopicReader

// NewTopicReader reads topic, which has partitions partitions.
func NewTopicReader(c *kafka.Client, topic string, partitions int) *TopicReader {
	return demo.NewTopicReader(c, topic, partitions)
}

// Alerts counts the alerts read per notification id.
type Alerts = demo.Alerts

// CollectAlerts reads b's alerts topic from its start until done reports
// true for what was read or ctx ends.
func CollectAlerts(ctx context.Context, b *demo.Broker, done func(*Alerts) bool) (*Alerts, error) {
	a := demo.NewAlerts()
	return a, b.CollectAlertsInto(ctx, a, false, done)
}

// DeadLetter is one record of the dead-letter topic.
type DeadLetter struct {
	Reason string
	Source string
	Value  string
}

// CollectDeadLetters reads b's dead-letter topic from its start until done
// reports true for what was read or ctx ends.
func CollectDeadLetters(ctx context.Context, b *demo.Broker, done func([]DeadLetter) bool) ([]DeadLetter, error) {
	var out []DeadLetter
	err := Collect(ctx, NewTopicReader(b.Client, b.Topics.DeadLetter, b.Partitions), func(rec kafka.Record, value []byte) {
		d := DeadLetter{Value: string(value)}
		for _, h := range rec.Headers {
			switch h.Key {
			case "joiner-dead-letter-reason":
				d.Reason = string(h.Value)
			case "joiner-source":
				d.Source = string(h.Value)
			}
		}
		out = append(out, d)
	}, func() bool { return done(out) })
	return out, err
}

// Collect polls r, calling each for every record, until done reports true
// or ctx ends.
func Collect(ctx context.Context, r *TopicReader, each func(kafka.Record, []byte), done func() bool) error {
	for !done() {
		n, err := r.Poll(ctx, each)
		if err != nil {
			return err
		}
		if n == 0 {
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

// AfterAcked makes w run f once, in a goroutine of its own, as soon as
// Kafka has acknowledged n messages of w to topic; it replaces w's
// Completion. The returned wait blocks until f has returned, if it was
// started, and reports whether it was. Tests use it to disturb workers
// while load flows, after a known amount of it rather than after a sleep.
func AfterAcked(w *kafka.Writer, topic string, n int, f func()) (wait func() bool) {
	var (
		mu      sync.Mutex
		acked   int
		started bool
		done    = make(chan struct{})
	)
	w.Completion = func(msgs []kafka.Message, err error) {
		if err != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			if m.Topic == topic {
				acked++
			}
		}
		if !started && acked >= n {
			started = true
			go func() {
				defer close(done)
				f()
			}()
		}
	}
	return func() bool {
		mu.Lock()
		s := started
		mu.Unlock()
		if s {
			<-done
		}
		return s
	}
}
