package join

import (
	"context"
	"fmt"
	"math/bits"
	"slices"
	"sync"

	"github.com/joiner-dev/joiner/record"
	"github.com/segmentio/kafka-go"
)

// encoded is a batch of alerts encoded for the alerts topic: each alert's
// key (its symbol) and JSON value back to back in buf, and how many of
// each join result it holds. The merge encodes every alert as it joins
// it, so an alert is never held as a struct on the heap; the outbox makes
// the messages from the spans and hands the batch back for reuse once
// Kafka has acknowledged it.
type encoded struct {
	buf     []byte
	spans   []alertSpan
	results [len(record.Results)]int // per record.Result.Index
	// conflicts counts the notifications' members renamed in their alerts,
	// per record.AlertMembers index.
	conflicts [len(record.AlertMembers)]int
	// headers are the headers of the alerts that have some, in order of
	// their spans (most records have none: a span stays three ints).
	headers []spanHeaders
}

// alertSpan locates one alert in encoded.buf: key [k, v), value [v, e).
type alertSpan struct{ k, v, e int }

// spanHeaders are the headers of the alert of encoded.spans[i], its
// notification's.
type spanHeaders struct {
	i int
	h []kafka.Header
}

// add encodes a with enc.
func (e *encoded) add(enc *record.AlertEncoder, a *record.Alert) {
	k, v := e.key(a.Symbol)
	e.buf = enc.Append(e.buf, a)
	e.endAlert(k, v, a.Result)
}

// key appends an alert's key, symbol, and returns where it starts and
// where its value will.
func (e *encoded) key(symbol string) (k, v int) {
	k = len(e.buf)
	e.buf = append(e.buf, symbol...)
	return k, len(e.buf)
}

// endAlert records the alert of result whose key starts at k and whose
// value, from v, was just appended.
func (e *encoded) endAlert(k, v int, result record.Result) {
	e.spans = append(e.spans, alertSpan{k, v, len(e.buf)})
	if i := result.Index(); i >= 0 {
		e.results[i]++
	}
}

// addPriced appends the alert of n, notified at nTsMs with headers,
// joined with the price whose alert fields are priceFields, with result
// (see record.AlertEncoder.AppendPriced).
func (e *encoded) addPriced(enc *record.AlertEncoder, n *record.NotificationValue, headers []kafka.Header, nTsMs int64, priceFields []byte, result record.Result) {
	k, v := e.key(n.Symbol)
	e.buf = enc.AppendPriced(e.buf, n, nTsMs, priceFields, result)
	e.endNotified(k, v, n, headers, result)
}

// addJoined appends the alert of n, with headers, joined as a says
// (record.AlertEncoder.AppendJoined).
func (e *encoded) addJoined(enc *record.AlertEncoder, n *record.NotificationValue, headers []kafka.Header, a *record.Alert) {
	k, v := e.key(n.Symbol)
	e.buf = enc.AppendJoined(e.buf, n, a)
	e.endNotified(k, v, n, headers, a.Result)
}

// endNotified is endAlert for the alert of n: it carries n's headers, and
// n's members renamed in it are counted.
func (e *encoded) endNotified(k, v int, n *record.NotificationValue, headers []kafka.Header, result record.Result) {
	e.endAlert(k, v, result)
	if len(headers) > 0 {
		e.headers = append(e.headers, spanHeaders{len(e.spans) - 1, headers})
	}
	for c := n.Conflicts(); c != 0; c &= c - 1 {
		e.conflicts[bits.TrailingZeros8(c)]++
	}
}

// alertOverhead is about what an alert adds to its notification's JSON:
// its key, timestamps, price, result and the worker's name aside.
const alertOverhead = 120

// grow makes room for the alerts of recs (a worker's alerts, whose name is
// workerLen bytes long) at once, instead of the buffers doubling many
// times while a chunk is encoded: most of a new buffer's cost under a
// backlog, before buffers are reused.
func (e *encoded) grow(recs []fetchedRecord, workerLen int) {
	n := 0
	for i := range recs {
		n += 2*len(recs[i].Key) + len(recs[i].Value) + alertOverhead + workerLen
	}
	e.buf = slices.Grow(e.buf, n)
	e.spans = slices.Grow(e.spans, len(recs))
}

// addAll encodes alerts with enc.
func (e *encoded) addAll(enc *record.AlertEncoder, alerts []record.Alert) {
	for i := range alerts {
		e.add(enc, &alerts[i])
	}
}

func (e *encoded) len() int {
	if e == nil {
		return 0
	}
	return len(e.spans)
}

// encodedMark is the length of an encoded batch, to drop what was added
// after it (rollback).
type encodedMark struct {
	buf, spans, headers int
	results             [len(record.Results)]int
	conflicts           [len(record.AlertMembers)]int
}

func (e *encoded) mark() encodedMark {
	return encodedMark{len(e.buf), len(e.spans), len(e.headers), e.results, e.conflicts}
}

func (e *encoded) rollback(m encodedMark) {
	clear(e.headers[m.headers:]) // no references to rolled-back records
	e.buf, e.spans, e.headers, e.results, e.conflicts = e.buf[:m.buf], e.spans[:m.spans], e.headers[:m.headers], m.results, m.conflicts
}

func (e *encoded) reset() {
	clear(e.headers) // no references to the headers of fetched records
	e.buf, e.spans, e.headers, e.results, e.conflicts = e.buf[:0], e.spans[:0], e.headers[:0], [len(record.Results)]int{}, [len(record.AlertMembers)]int{}
}

// writeOut writes alerts and dead letters and waits for Kafka to
// acknowledge them, retrying until it does or ctx is done.
func (w *Processor) writeOut(ctx context.Context, alerts []record.Alert, dead []deadLetter) error {
	var e encoded
	e.addAll(w.alerts, alerts)
	return w.writeOutWith(ctx, nil, []*encoded{&e}, dead)
}

// outScratch is the message slice of one writer (the outbox), reused from
// write to write: kafka-go does not hold a message once WriteMessages has
// returned.
type outScratch struct {
	msgs []kafka.Message
}

// writeOutWith is writeOut of encoded batches, building the messages in s
// (nil: fresh ones).
func (w *Processor) writeOutWith(ctx context.Context, s *outScratch, batches []*encoded, dead []deadLetter) error {
	if s == nil {
		s = &outScratch{}
	}
	msgs := s.msgs[:0]
	defer func() {
		clear(msgs) // no stale references to batches and dead letters
		s.msgs = msgs[:0]
	}()
	topic := w.cfg.Topics.Alerts
	for _, e := range batches {
		msgs = slices.Grow(msgs, len(e.spans))
		h := e.headers
		for i, sp := range e.spans {
			m := kafka.Message{Topic: topic, Key: e.buf[sp.k:sp.v:sp.v], Value: e.buf[sp.v:sp.e:sp.e]}
			if len(h) > 0 && h[0].i == i {
				m.Headers, h = h[0].h, h[1:]
			}
			msgs = append(msgs, m)
		}
	}
	alerts := len(msgs)
	for _, d := range dead {
		msgs = append(msgs, kafka.Message{
			Topic: w.cfg.Topics.DeadLetter,
			Key:   d.rec.Key,
			Value: d.rec.Value,
			Time:  d.rec.Time,
			// The record's own headers, in order, then the reasons.
			Headers: append(slices.Clip(d.rec.Headers),
				kafka.Header{Key: "joiner-dead-letter-reason", Value: []byte(d.reason)},
				kafka.Header{Key: "joiner-dead-letter-error", Value: []byte(d.err)},
				kafka.Header{Key: "joiner-source", Value: fmt.Appendf(nil, "%s/%d/%d", d.topic, d.partition, d.rec.Offset)},
			),
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
		w.log.Warn("writing alerts failed; retrying the batch", "alerts", alerts, "dead_letters", len(dead), "err", err)
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

// flush writes encoded alerts and dead letters, waits for Kafka to
// acknowledge them, and counts the joins. It writes only while the
// membership is active (see Membership.Active): a member paused past its
// session waits here until its next heartbeat says whether it still holds
// the task (the task's context ends when it does not).
func (t *processTask) flush(ctx context.Context, s *outScratch, batches []*encoded, dead []deadLetter) error {
	w := t.w
	if err := w.waitActive(ctx); err != nil {
		return err
	}
	if err := w.writeOutWith(ctx, s, batches, dead); err != nil {
		return err
	}
	// Counted per result, one counter update per result and write.
	var (
		counts    [len(record.Results)]int
		conflicts [len(record.AlertMembers)]int
	)
	alerts := 0
	for _, e := range batches {
		for i, n := range e.results {
			counts[i] += n
		}
		for i, n := range e.conflicts {
			conflicts[i] += n
		}
		alerts += len(e.spans)
	}
	for i, n := range counts {
		if n > 0 {
			w.metrics.Joins.WithLabelValues(string(record.Results[i])).Add(float64(n))
		}
	}
	for i, n := range conflicts {
		if n > 0 {
			w.metrics.FieldConflicts.WithLabelValues(record.AlertMembers[i]).Add(float64(n))
		}
	}
	w.metrics.Alerts.Add(float64(alerts))
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

// chunk is the output of one joined chunk of notifications: its encoded
// alerts and dead letters, and the offset after its last notification with
// the newest timestamp in it, acknowledged once they are written.
type chunk struct {
	alerts *encoded
	dead   []deadLetter
	next   int64
	ts     int64
}

// outboxDepth is how many joined chunks may wait for the writer: the merge
// joins ahead while the oldest is written, and blocks past that.
const outboxDepth = 4

// startOutbox starts the task's writer goroutine (owned by wg, stopped by
// ctx): it writes the chunks in order, waits for each acknowledgement,
// then advances the task's acknowledged offset, releases the chunk's hold
// on the rebalance gate and hands its encoded batch back to free for
// reuse. Chunks not written when ctx ends are dropped unacknowledged: they
// are read again by whoever processes the task next.
func (t *processTask) startOutbox(ctx context.Context, wg *sync.WaitGroup, free chan<- *encoded) chan<- chunk {
	ch := make(chan chunk, outboxDepth)
	wg.Add(1)
	go func() {
		var (
			scratch outScratch
			batches []*encoded
			dead    []deadLetter
		)
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
				batches, dead = append(batches[:0], c.alerts), append(dead[:0], c.dead...)
			more:
				for len(batches) < outboxDepth {
					select {
					case d := <-ch:
						batches, dead = append(batches, d.alerts), append(dead, d.dead...)
						c.next, c.ts = d.next, max(c.ts, d.ts)
					default:
						break more
					}
				}
				err := t.flush(ctx, &scratch, batches, dead)
				if err == nil {
					t.ack(c.next, c.ts)
				}
				for _, e := range batches {
					t.gate.leave()
					e.reset()
					select {
					case free <- e:
					default:
					}
				}
				clear(batches)
				clear(dead)
				if err != nil {
					return
				}
			}
		}
	}()
	return ch
}
