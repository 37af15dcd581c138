package join

import (
	"context"
	"fmt"
	"sync"

	"github.com/joiner-dev/joiner/record"
	"github.com/segmentio/kafka-go"
)

// writeOut writes alerts and dead letters and waits for Kafka to
// acknowledge them, retrying until it does or ctx is done.
func (w *Processor) writeOut(ctx context.Context, alerts []record.Alert, dead []deadLetter) error {
	return w.writeOutWith(ctx, nil, alerts, dead)
}

// outScratch is the message slice and value buffer of one writer (the
// outbox), reused from write to write: kafka-go does not hold a message
// once WriteMessages has returned.
type outScratch struct {
	msgs []kafka.Message
	buf  []byte
}

// writeOutWith is writeOut building the messages in s (nil: fresh ones).
func (w *Processor) writeOutWith(ctx context.Context, s *outScratch, alerts []record.Alert, dead []deadLetter) error {
	if s == nil {
		s = &outScratch{}
	}
	msgs, buf := record.AppendAlertMessagesTo(s.msgs[:0], s.buf, w.cfg.Topics.Alerts, alerts)
	defer func() {
		clear(msgs) // no stale references to alerts and dead letters
		s.msgs, s.buf = msgs[:0], buf
	}()
	for _, d := range dead {
		msgs = append(msgs, kafka.Message{
			Topic: w.cfg.Topics.DeadLetter,
			Key:   d.rec.Key,
			Value: d.rec.Value,
			Time:  d.rec.Time,
			Headers: []kafka.Header{
				{Key: "joiner-dead-letter-reason", Value: []byte(d.reason)},
				{Key: "joiner-dead-letter-error", Value: []byte(d.err)},
				{Key: "joiner-source", Value: fmt.Appendf(nil, "%s/%d/%d", d.topic, d.partition, d.rec.Offset)},
			},
		})
	}
	if len(msgs) == 0 {
		return nil
	}
	for attempt := 0; ; attempt++ {
		err := w.cfg.Writer.WriteMessages(ctx, msgs...)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		w.metrics.ProduceErrors.Inc()
		w.log.Warn("writing alerts failed; retrying the batch", "alerts", len(alerts), "dead_letters", len(dead), "err", err)
		if err := sleep(ctx, backoff(attempt)); err != nil {
			return err
		}
	}
	for _, d := range dead {
		w.metrics.DeadLetters.WithLabelValues(d.reason).Inc()
		w.log.Warn("dead-lettered a malformed record", "topic", d.topic, "partition", d.partition, "offset", d.rec.Offset, "reason", d.reason, "err", d.err)
	}
	return nil
}

// flush writes alerts and dead letters, waits for Kafka to acknowledge
// them, and counts the joins. It writes only while the membership is
// active (see Membership.Active): a member paused past its session waits
// here until its next heartbeat says whether it still holds the task (the
// task's context ends when it does not).
func (t *processTask) flush(ctx context.Context, alerts []record.Alert, dead []deadLetter) error {
	return t.flushWith(ctx, nil, alerts, dead)
}

// flushWith is flush building the messages in s (nil: fresh ones).
func (t *processTask) flushWith(ctx context.Context, s *outScratch, alerts []record.Alert, dead []deadLetter) error {
	w := t.w
	if err := w.waitActive(ctx); err != nil {
		return err
	}
	if err := w.writeOutWith(ctx, s, alerts, dead); err != nil {
		return err
	}
	// Counted per result, one counter update per result and chunk.
	var local, remote, late, miss int
	for i := range alerts {
		switch alerts[i].Result {
		case record.ResultLocal:
			local++
		case record.ResultRemote:
			remote++
		case record.ResultLate:
			late++
		case record.ResultMiss:
			miss++
		default:
			w.countJoin(alerts[i].Result)
		}
	}
	for _, c := range []struct {
		r record.Result
		n int
	}{{record.ResultLocal, local}, {record.ResultRemote, remote}, {record.ResultLate, late}, {record.ResultMiss, miss}} {
		if c.n > 0 {
			w.metrics.Joins.WithLabelValues(string(c.r)).Add(float64(c.n))
		}
	}
	w.metrics.Alerts.Add(float64(len(alerts)))
	return nil
}

// deadLetter is a malformed input record on its way to the dead-letter
// topic.
type deadLetter struct {
	topic     string
	partition int
	rec       fetchedRecord
	reason    string
	err       string
}

func newDeadLetter(topic string, p int, rec fetchedRecord, err error) deadLetter {
	return deadLetter{topic: topic, partition: p, rec: rec, reason: record.ReasonOf(err), err: err.Error()}
}

// chunk is the output of one joined chunk of notifications: its alerts and
// dead letters, and the offset after its last notification with the
// newest timestamp in it, acknowledged once they are written.
type chunk struct {
	alerts []record.Alert
	dead   []deadLetter
	next   int64
	ts     int64
}

// outboxDepth is how many joined chunks may wait for the writer: the merge
// joins ahead while the oldest is written, and blocks past that.
const outboxDepth = 4

// startOutbox starts the task's writer goroutine (owned by wg, stopped by
// ctx): it writes the chunks in order, waits for each acknowledgement,
// then advances the task's acknowledged offset and releases the chunk's
// hold on the rebalance gate. Chunks not written when ctx ends are
// dropped unacknowledged: they are read again by whoever processes the
// task next.
func (t *processTask) startOutbox(ctx context.Context, wg *sync.WaitGroup) chan<- chunk {
	ch := make(chan chunk, outboxDepth)
	wg.Add(1)
	go func() {
		var scratch outScratch
		defer wg.Done()
		defer func() {
			for {
				select {
				case <-ch:
					t.gate.leave()
				default:
					return
				}
			}
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case c := <-ch:
				// Chunks that queued up while the last write was in
				// flight go out in the same write: under load the writes
				// grow instead of the queue.
				held := 1
			more:
				for held < outboxDepth {
					select {
					case d := <-ch:
						held++
						c.alerts = append(c.alerts, d.alerts...)
						c.dead = append(c.dead, d.dead...)
						c.next, c.ts = d.next, max(c.ts, d.ts)
					default:
						break more
					}
				}
				err := t.flushWith(ctx, &scratch, c.alerts, c.dead)
				if err == nil {
					t.ack(c.next, c.ts)
				}
				for range held {
					t.gate.leave()
				}
				if err != nil {
					return
				}
			}
		}
	}()
	return ch
}
