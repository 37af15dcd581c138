package join

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/joiner-dev/joiner/internal/backoff"
	"github.com/joiner-dev/joiner/produce"
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
	// src is the offset of the notification whose alert is added next
	// (alertSpan.off), set by the caller.
	src int64
	// notified encodes the alerts' notification times (addPriced).
	notified record.NotifiedAt
}

// alertSpan locates one alert in encoded.buf: key [k, v), value [v, e);
// off is the offset of its notification (-1: unknown).
type alertSpan struct {
	k, v, e int
	off     int64
}

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
	e.spans = append(e.spans, alertSpan{k, v, len(e.buf), e.src})
	if i := result.Index(); i >= 0 {
		e.results[i]++
	}
}

// addPriced appends the alert of n, notified at nTsMs with headers,
// joined with the price whose alert fields are priceFields, with result
// (see record.AlertEncoder.AppendPriced).
func (e *encoded) addPriced(enc *record.AlertEncoder, n *record.NotificationValue, headers []kafka.Header, nTsMs int64, priceFields []byte, result record.Result) {
	k, v := e.key(n.Symbol)
	e.buf = enc.AppendPricedAt(e.buf, n, e.notified.Field(nTsMs), priceFields, result)
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

// addAll encodes alerts with enc, of notifications whose offsets are not
// known.
func (e *encoded) addAll(enc *record.AlertEncoder, alerts []record.Alert) {
	e.src = -1
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
func (w *taskEnv) writeOut(ctx context.Context, alerts []record.Alert, dead []deadLetter) error {
	var e encoded
	e.addAll(w.alerts, alerts)
	_, err := w.writeOutWith(ctx, nil, -1, []*encoded{&e}, dead)
	return err
}

// outScratch is the message slice of one writer (the outbox), reused from
// write to write: kafka-go does not hold a message once WriteMessages has
// returned; notes are what writeOutWith knows of each message (none while
// every message is an alert that fits: the usual write).
type outScratch struct {
	msgs  []kafka.Message
	notes []outNote
	// onErr, when set, hears of each failed write (a task's last error).
	onErr func(error)
}

// outNote is what writeOutWith knows of one message it writes: for a
// dead letter (an alert refused becomes one), its reason, source and
// error, and whether it was truncated (cut: the value bytes it kept) or
// refused even so (dropped).
type outNote struct {
	reason, topic, source, err string
	truncated, dropped         bool
	cut                        int
}

// The headers of a dead letter: why it is one, the error, and the record
// it holds (topic/partition/offset). A dead letter too large for its
// topic's max.message.bytes keeps a prefix of its value, the value's
// original size and SHA-256 (hex), and, when its key was cut too, the
// key's original size.
const (
	headerReason       = "joiner-dead-letter-reason"
	headerError        = "joiner-dead-letter-error"
	headerSource       = "joiner-source"
	headerOriginalSize = "joiner-dead-letter-original-size"
	headerSHA256       = "joiner-dead-letter-original-sha256"
	headerKeySize      = "joiner-dead-letter-original-key-size"
)

// DefaultMaxMessageBytes is the max.message.bytes taken for an output
// topic that Config.MaxMessageBytes does not name: 1 MiB, about Kafka's
// default (1,048,588).
const DefaultMaxMessageBytes = 1 << 20

// maxMessageBytes is topic's max.message.bytes (Config.MaxMessageBytes).
func (w *taskEnv) maxMessageBytes(topic string) int {
	if n := w.maxBytes[topic]; n > 0 {
		return n
	}
	return DefaultMaxMessageBytes
}

// minTruncated is the fewest value bytes a truncated dead letter keeps:
// a topic that refuses less refuses the dead letter (it is dropped and
// counted).
const minTruncated = 256

// writeOutWith is writeOut of encoded batches of task's alerts (-1: none),
// building the messages in s (nil: fresh ones). It returns how many of
// the alerts were dead-lettered instead (alertTooLarge, or refused by the
// broker).
//
// No message stalls the write: one larger than its topic's
// max.message.bytes, or one the broker refuses on its own (too large, or
// invalid: produce.RejectedError), is never retried as is. An alert
// becomes a dead letter (record.ReasonAlertTooLarge or
// record.ReasonAlertRejected) holding the alert; a dead letter too large
// is truncated (joiner_dead_letters_truncated_total), to half its size
// again each time the broker still refuses it; one that cannot be
// truncated to fit, or that the broker refuses for another reason, is
// dropped (joiner_dead_letters_dropped_total and an ERROR). Other errors
// are retried with backoff until ctx is done; an error no retry fixes
// (produce.ConfigError: authorization, a missing topic) also makes
// /readyz fail and logs an ERROR until a write succeeds.
func (w *taskEnv) writeOutWith(ctx context.Context, s *outScratch, task int, batches []*encoded, dead []deadLetter) (int, error) {
	if s == nil {
		s = &outScratch{}
	}
	o := outWrite{w: w, msgs: s.msgs[:0], notes: s.notes[:0], task: task, dead: len(dead), onErr: s.onErr}
	defer func() {
		clear(o.msgs) // no stale references to batches and dead letters
		clear(o.notes)
		s.msgs, s.notes = o.msgs[:0], o.notes[:0]
	}()
	o.addAlerts(batches)
	o.addDeadLetters(dead)
	if len(o.msgs) == 0 {
		return 0, nil
	}
	defer func() {
		if o.blocked {
			w.unblockOutput()
		}
	}()
	if err := o.send(ctx, batches, o.refuseTooLarge(batches)); err != nil {
		return 0, err
	}
	return o.report(), nil
}

// outWrite is one writeOutWith: its messages, the alerts first, and what
// it knows of them. (Its methods are handed the batches of alerts rather
// than holding them: held, they would escape to the heap.)
type outWrite struct {
	w     *taskEnv
	msgs  []kafka.Message
	notes []outNote // none, or one per message once one needs it
	// alerts is how many of msgs are alerts, those of the batches, of
	// task; dead how many dead letters were given.
	alerts, dead int
	task         int
	onErr        func(error)
	// blocked: this write counts in w.outBlocked.
	blocked bool
}

// addAlerts adds the alerts of batches to o.msgs.
func (o *outWrite) addAlerts(batches []*encoded) {
	topic := o.w.topics.Alerts
	for _, e := range batches {
		o.msgs = slices.Grow(o.msgs, len(e.spans))
		h := e.headers
		for i, sp := range e.spans {
			m := kafka.Message{Topic: topic, Key: e.buf[sp.k:sp.v:sp.v], Value: e.buf[sp.v:sp.e:sp.e]}
			if len(h) > 0 && h[0].i == i {
				m.Headers, h = h[0].h, h[1:]
			}
			o.msgs = append(o.msgs, m)
		}
	}
	o.alerts = len(o.msgs)
}

// addDeadLetters adds dead to o.msgs, each with its note.
func (o *outWrite) addDeadLetters(dead []deadLetter) {
	if len(dead) > 0 {
		o.notes = slices.Grow(o.notes, len(o.msgs)+len(dead))[:len(o.msgs)]
	}
	for _, d := range dead {
		source := fmt.Sprintf("%s/%d/%d", d.topic, d.partition, d.rec.Offset)
		o.msgs = append(o.msgs, kafka.Message{
			Topic: o.w.topics.DeadLetter,
			Key:   d.rec.Key,
			Value: d.rec.Value,
			Time:  d.rec.Time,
			// The record's own headers, in order, then the reasons.
			Headers: append(slices.Clip(d.rec.Headers),
				kafka.Header{Key: headerReason, Value: []byte(d.reason)},
				kafka.Header{Key: headerError, Value: []byte(d.err)},
				kafka.Header{Key: headerSource, Value: []byte(source)},
			),
		})
		o.notes = append(o.notes, outNote{reason: d.reason, topic: d.topic, source: source, err: d.err})
	}
}

// needNotes gives every message its note, once one needs it.
func (o *outWrite) needNotes() {
	if len(o.notes) < len(o.msgs) {
		o.notes = slices.Grow(o.notes, len(o.msgs))[:len(o.msgs)]
	}
}

// refuseTooLarge changes the messages larger than their topic's
// max.message.bytes (refuse) before anything is sent. It returns the
// indexes of the messages to send when some are dropped, else nil (all).
func (o *outWrite) refuseTooLarge(batches []*encoded) []int {
	alertLimit, deadLimit := o.w.maxMessageBytes(o.w.topics.Alerts), o.w.maxMessageBytes(o.w.topics.DeadLetter)
	dropped := false
	for i := range o.msgs {
		limit := alertLimit
		if i >= o.alerts {
			limit = deadLimit
		}
		if produce.RecordBatchBytes(&o.msgs[i]) > limit {
			o.needNotes()
			dropped = !o.w.refuse(o.msgs, o.notes, i, o.alerts, o.task, batches, nil) || dropped
		}
	}
	if !dropped {
		return nil
	}
	at := []int{}
	for i := range o.notes {
		if !o.notes[i].dropped {
			at = append(at, i)
		}
	}
	return at
}

// send writes the messages (at: those at these indexes; nil: all) and
// waits for Kafka to acknowledge them. The ones the broker refuses are
// sent again changed (refuse), or not at all, at once; other failures
// are retried with backoff until ctx is done.
func (o *outWrite) send(ctx context.Context, batches []*encoded, at []int) error {
	send := o.msgs
	if at != nil {
		send = nil
		if len(at) == 0 {
			return nil // every message was dropped
		}
	}
	return backoff.Do(ctx, backoff.Default, func(_ int, err error, _ time.Duration) error {
		o.failed(err)
		return nil
	}, func(ctx context.Context) error {
		for len(send) > 0 || len(at) > 0 {
			if at != nil {
				send = send[:0]
				for _, i := range at {
					send = append(send, o.msgs[i])
				}
			}
			err := o.w.writer.WriteMessages(ctx, send...)
			if err == nil {
				return nil
			}
			if ctx.Err() != nil {
				return backoff.Permanent(ctx.Err())
			}
			var rej *produce.RejectedError
			if !errors.As(err, &rej) {
				if o.w.txnFailed(err) { // exactly-once: not retried, the transaction aborts (txn.go)
					return backoff.Permanent(err)
				}
				return err
			}
			// Every other message was written: send the refused ones
			// again, changed, or not at all.
			var again []int
			o.needNotes()
			for _, r := range rej.Rejected {
				i := r.Index
				if at != nil {
					i = at[i]
				}
				if o.w.refuse(o.msgs, o.notes, i, o.alerts, o.task, batches, r.Err) {
					again = append(again, i)
				}
			}
			if len(again) == 0 {
				return nil
			}
			if at == nil {
				send = nil // msgs itself: not to be overwritten
			}
			at = again
		}
		return nil
	})
}

// failed counts and logs a failed write, to be retried.
func (o *outWrite) failed(err error) {
	w := o.w
	w.metrics.ProduceErrors.Inc()
	if o.onErr != nil {
		o.onErr(fmt.Errorf("writing %d alerts and %d dead letters: %w", o.alerts, o.dead, err))
	}
	if produce.ConfigError(err) {
		w.blockOutput(err, !o.blocked)
		o.blocked = true
		w.outLog.Error("output:config", "writing alerts or dead letters fails with an error no retry fixes; this task holds until the cluster or the worker's configuration is fixed (/readyz fails meanwhile)",
			"alerts", o.alerts, "dead_letters", o.dead, "err", err)
	} else {
		w.log.Warn("writing alerts failed; retrying the batch", "alerts", o.alerts, "dead_letters", o.dead, "err", err)
	}
}

// report counts and logs the dead letters written and dropped, and
// returns how many alerts were dead-lettered instead.
func (o *outWrite) report() int {
	w := o.w
	rerouted := 0
	for i := range o.notes {
		n := &o.notes[i]
		if i < o.alerts && n.reason == "" {
			continue // an alert
		}
		if i < o.alerts {
			rerouted++
		}
		if n.dropped {
			w.metrics.DeadLettersDropped.WithLabelValues(n.reason).Inc()
			w.outLog.Error("dropped/"+n.reason, "the dead-letter topic refused a dead letter even truncated; it is dropped (counted in joiner_dead_letters_dropped_total)",
				"source", n.source, "reason", n.reason, "err", n.err)
			continue
		}
		w.metrics.DeadLetters.WithLabelValues(n.reason).Inc()
		if n.truncated {
			w.metrics.DeadLettersTruncated.WithLabelValues(n.reason).Inc()
		}
		w.outLog.Warn(n.reason+"/"+n.topic, "dead-lettered records (one line per reason and topic per interval, with the count suppressed since the last; joiner_dead_letters_total counts each)",
			"topic", n.topic, "source", n.source, "reason", n.reason, "err", n.err, "truncated", n.truncated)
	}
	return rerouted
}

// refuse changes message i of msgs, which its topic cannot take (cause,
// from the broker; nil: larger than its max.message.bytes), into what is
// written instead, and reports whether there is one (else it is dropped).
// The first alerts of msgs are the alerts of batches, of task.
func (w *taskEnv) refuse(msgs []kafka.Message, notes []outNote, i, alerts, task int, batches []*encoded, cause error) bool {
	m, n := &msgs[i], &notes[i]
	tooLarge := cause == nil || errors.Is(cause, kafka.MessageSizeTooLarge) || errors.Is(cause, kafka.RecordListTooLarge)
	if i < alerts && n.reason == "" {
		// An alert: dead-letter it, with the notification it is of.
		n.reason, n.topic = record.ReasonAlertTooLarge, w.topics.Notifications
		if cause == nil {
			n.err = fmt.Sprintf("the alert of %d bytes is larger than the max.message.bytes of %s (%d)", len(m.Value), m.Topic, w.maxMessageBytes(m.Topic))
		} else {
			n.err = fmt.Sprintf("%s refused the alert of %d bytes: %v", m.Topic, len(m.Value), cause)
			if !tooLarge {
				n.reason = record.ReasonAlertRejected
			}
		}
		n.source = fmt.Sprintf("%s/%d/%d", n.topic, task, alertOffset(batches, i))
		*m = kafka.Message{
			Topic: w.topics.DeadLetter,
			Key:   m.Key,
			Value: m.Value,
			// The alert's headers (its notification's), then the reasons.
			Headers: append(slices.Clip(m.Headers),
				kafka.Header{Key: headerReason, Value: []byte(n.reason)},
				kafka.Header{Key: headerError, Value: []byte(n.err)},
				kafka.Header{Key: headerSource, Value: []byte(n.source)},
			),
		}
		if produce.RecordBatchBytes(m) <= w.maxMessageBytes(m.Topic) {
			return true
		}
		cause, tooLarge = nil, true
	}
	if !tooLarge {
		n.dropped, n.err = true, fmt.Sprintf("%s; then %s refused it: %v", n.err, m.Topic, cause)
		return false
	}
	if !truncate(m, n, w.maxMessageBytes(m.Topic), cause != nil) {
		n.dropped = true
		if cause != nil {
			n.err = fmt.Sprintf("%s; then %s refused it truncated: %v", n.err, m.Topic, cause)
		}
		return false
	}
	return true
}

// truncate cuts dead letter m to fit limit, or, when the broker refused
// it already truncated (again), to half the value it kept, and records
// the original value's size and SHA-256 in its headers the first time. It
// reports false when even minTruncated bytes of value do not fit.
func truncate(m *kafka.Message, n *outNote, limit int, again bool) bool {
	if !n.truncated {
		sum := sha256.Sum256(m.Value)
		m.Headers = append(slices.Clip(m.Headers),
			kafka.Header{Key: headerOriginalSize, Value: strconv.AppendInt(nil, int64(len(m.Value)), 10)},
			kafka.Header{Key: headerSHA256, Value: hex.AppendEncode(nil, sum[:])})
		n.truncated, n.cut = true, len(m.Value)
	}
	value := m.Value
	m.Value = nil
	if len(m.Key) > minTruncated && produce.RecordBatchBytes(m)+minTruncated > limit {
		// The key alone leaves no room: keep a prefix of it too.
		m.Headers = append(m.Headers, kafka.Header{Key: headerKeySize, Value: strconv.AppendInt(nil, int64(len(m.Key)), 10)})
		m.Key = m.Key[:minTruncated:minTruncated]
	}
	room := min(limit-produce.RecordBatchBytes(m), n.cut)
	if again {
		room = min(room, n.cut/2)
	}
	if room < minTruncated {
		m.Value = value
		return false
	}
	m.Value, n.cut = value[:room:room], room
	return true
}

// alertOffset is the offset of the notification of the i-th alert of
// batches (-1 when it is not known).
func alertOffset(batches []*encoded, i int) int64 {
	for _, e := range batches {
		if i < len(e.spans) {
			return e.spans[i].off
		}
		i -= len(e.spans)
	}
	return -1
}

// blockOutput records err, an error no retry fixes that a write fails
// with, for /readyz and joiner_output_blocked; first: the write was not
// blocked before. Each write blocked counts until it ends
// (unblockOutput), so one task's write that succeeds does not hide
// another's that cannot.
func (w *taskEnv) blockOutput(err error, first bool) {
	why := "writing alerts or dead letters fails: " + err.Error()
	w.outMu.Lock()
	defer w.outMu.Unlock()
	w.outFault = why
	if first {
		w.outBlocked++
	}
	w.metrics.OutputBlocked.Set(1)
}

// unblockOutput ends a blocked write (blockOutput).
func (w *taskEnv) unblockOutput() {
	w.outMu.Lock()
	defer w.outMu.Unlock()
	if w.outBlocked--; w.outBlocked == 0 {
		w.outFault = ""
		w.metrics.OutputBlocked.Set(0)
	}
}

// outputFault is why writes are blocked, "" when none is.
func (w *taskEnv) outputFault() string {
	w.outMu.Lock()
	defer w.outMu.Unlock()
	return w.outFault
}

// flush writes encoded alerts and dead letters, waits for Kafka to
// acknowledge them, and counts the joins. It writes only while the
// membership is active (see Membership.Active): a member paused past its
// session waits here until its next heartbeat says whether it still holds
// the task (the task's context ends when it does not).
func (t *processTask) flush(ctx context.Context, s *outScratch, batches []*encoded, dead []deadLetter) error {
	w := t.env
	if err := w.waitActive(ctx); err != nil {
		return err
	}
	if err := w.txnHold(ctx, t); err != nil { // exactly-once: until ack (txn.go)
		return err
	}
	rerouted, err := w.writeOutWith(ctx, s, t.p, batches, dead)
	if err != nil {
		w.txnDrop(t, err)
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
			t.counters.joins[i].Add(int64(n))
		}
	}
	for i, n := range conflicts {
		if n > 0 {
			w.metrics.FieldConflicts.WithLabelValues(record.AlertMembers[i]).Add(float64(n))
		}
	}
	if n := len(dead) + rerouted; n > 0 {
		t.counters.dead.Add(int64(n))
	}
	w.metrics.Alerts.Add(float64(alerts - rerouted))
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

// alcOutboxDepth is how many joined chunks may wait for the writer: the merge
// joins ahead while the oldest is written, and blocks past that.
// eosOutboxDepth is the depth under exactly-once, where every commit
// pauses the writes for its round trips (txnPause): the merge goes on
// joining through a commit instead of stopping 4 chunks in.
const (
	alcOutboxDepth = 4
	eosOutboxDepth = 16
)

// outboxDepth is the task's outbox depth (alcOutboxDepth, or eosOutboxDepth
// under exactly-once).
func (e *taskEnv) outboxDepth() int {
	if e.eos.c != nil {
		return eosOutboxDepth
	}
	return alcOutboxDepth
}

// startOutbox starts the task's writer goroutine (owned by wg, stopped by
// ctx): it writes the chunks in order, waits for each acknowledgement,
// then advances the task's acknowledged offset, releases the chunk's hold
// on the rebalance gate and hands its encoded batch back to free for
// reuse. Chunks not written when ctx ends are dropped unacknowledged: they
// are read again by whoever processes the task next.
func (t *processTask) startOutbox(ctx context.Context, wg *sync.WaitGroup, free chan<- *encoded) chan<- chunk {
	depth := t.env.outboxDepth()
	ch := make(chan chunk, depth)
	wg.Add(1)
	go func() {
		var (
			scratch = outScratch{onErr: func(err error) { t.env.noteTaskErr(t.p, err) }}
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
				for len(batches) < depth {
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
