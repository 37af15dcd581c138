package join

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/joiner-dev/joiner/produce"
	"github.com/joiner-dev/joiner/record"
	"github.com/segmentio/kafka-go"
)

var _ Writer = (*produce.Producer)(nil)

// header returns the value of header key of m, and whether it has one.
func header(m kafka.Message, key string) (string, bool) {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// checkTruncated checks that dead letter m holds a prefix of orig, no
// larger than limit, with orig's size and SHA-256 in its headers.
func checkTruncated(t *testing.T, m kafka.Message, orig []byte, limit int) {
	t.Helper()
	sum := sha256.Sum256(orig)
	if size, _ := header(m, headerOriginalSize); size != strconv.Itoa(len(orig)) {
		t.Errorf("dead letter: original size header %q, want %d", size, len(orig))
	}
	if h, _ := header(m, headerSHA256); h != hex.EncodeToString(sum[:]) {
		t.Errorf("dead letter: SHA-256 header %q, want the original's %x", h, sum)
	}
	if len(m.Value) >= len(orig) || len(m.Value) < minTruncated || !bytes.HasPrefix(orig, m.Value) {
		t.Errorf("dead letter value of %d bytes is not a truncated prefix of the original (%d bytes)", len(m.Value), len(orig))
	}
	if n := produce.RecordBatchBytes(&m); n > limit {
		t.Errorf("truncated dead letter of %d bytes is over the limit of %d", n, limit)
	}
}

// A notification near the size limit: its alert is over the alerts
// topic's max.message.bytes and the dead letter of that alert over the
// dead-letter topic's; a malformed notification's dead letter is too. The
// partition keeps moving: the alert is dead-lettered (alert_too_large)
// and both dead letters are truncated with the original size and hash;
// every other notification of the partition, before and after, gets its
// exact alert. Either the worker knows the limit (Config.MaxMessageBytes:
// checked before sending) or only the broker does (it refuses the
// records, and only they are sent again, changed).
func TestOversizeAlertAndDeadLetterDoNotStallThePartition(t *testing.T) {
	const limit = 4000
	for _, known := range []bool{true, false} {
		t.Run("limit known "+strconv.FormatBool(known), func(t *testing.T) {
			r := newFakeRig(t, func(c *Config) {
				c.MaxRecordBytes = 1 << 20
				if known {
					c.MaxMessageBytes = map[string]int{"alerts": limit, record.DefaultDeadLetterTopic: limit}
				}
			})
			r.out.maxBytes = limit
			s := symbolOf(t, 0, 1)
			r.f.produce("market", 0, 1000, s, tickJSON(s, 1.5))
			r.f.produce("market", 0, 3000, s, tickJSON(s, 2.5))
			big := record.Notification{ID: "big", Symbol: s, Text: strings.Repeat("t", limit-150)}
			bigValue := string(record.AppendNotification(nil, &big))
			badValue := `{"id":"bad","symbol":"` + s + `","text":"` + strings.Repeat("x", limit+1000) // invalid JSON
			r.f.produce("notifications", 0, 1500, s, noteJSON("a", s))
			r.f.produce("notifications", 0, 1600, s, bigValue)
			r.f.mu.Lock() // the big notification's headers go with its dead letter
			bigLog := r.f.logs["notifications"][0]
			bigLog[len(bigLog)-1].Headers = []kafka.Header{{Key: "traceparent", Value: []byte("tp-big")}}
			r.f.mu.Unlock()
			r.f.produce("notifications", 0, 2000, s, noteJSON("b", s))
			r.f.produce("notifications", 0, 2100, s, badValue)
			r.f.produce("notifications", 0, 3500, s, noteJSON("c", s))
			if produce.RecordBatchBytes(&kafka.Message{Key: []byte(s), Value: []byte(bigValue)}) > limit {
				t.Fatal("the notification itself is over the limit; the test wants only its alert to be")
			}
			r.w.Assigned(context.Background(), assignment(1, []int{0}, []int{0}))

			waitFor(t, "the partition acknowledged to its end", func() bool {
				_, procs := r.tasks()
				return procs[0] != nil && procs[0].acked.Load() == 5
			})
			want := map[string]float64{"a": 1.5, "b": 1.5, "c": 2.5}
			got := map[string]float64{}
			for _, m := range r.out.byTopic("alerts") {
				var a record.Alert
				if err := json.Unmarshal(m.Value, &a); err != nil {
					t.Fatal(err)
				}
				if a.Price == nil || a.Result != record.ResultLocal {
					t.Fatalf("alert %s: no local price", m.Value)
				}
				got[a.ID] = *a.Price
			}
			if len(got) != len(want) || got["a"] != want["a"] || got["b"] != want["b"] || got["c"] != want["c"] {
				t.Fatalf("alerts %v, want exactly %v", got, want)
			}
			dead := r.out.byTopic(record.DefaultDeadLetterTopic)
			if len(dead) != 2 {
				t.Fatalf("%d dead letters, want 2", len(dead))
			}
			slices.SortFunc(dead, func(a, b kafka.Message) int { // a refused alert is dead-lettered after the first write
				sa, _ := header(a, headerSource)
				sb, _ := header(b, headerSource)
				return strings.Compare(sa, sb)
			})
			bigAlert := record.NewAlertEncoder("w").Append(nil, &record.Alert{Notification: big, NotificationTsMs: 1600,
				Price: new(1.5), PriceTsMs: 1000, Result: record.ResultLocal, Worker: "w"})
			for i, w := range []struct {
				reason, source string
				orig           []byte
			}{
				{record.ReasonAlertTooLarge, "notifications/0/1", bigAlert},
				{record.ReasonInvalidJSON, "notifications/0/3", []byte(badValue)},
			} {
				m := dead[i]
				if reason, _ := header(m, headerReason); reason != w.reason {
					t.Errorf("dead letter %d: reason %q, want %q", i, reason, w.reason)
				}
				if src, _ := header(m, headerSource); src != w.source {
					t.Errorf("dead letter %d: source %q, want %q", i, src, w.source)
				}
				checkTruncated(t, m, w.orig, limit)
			}
			if h := dead[0].Headers; len(h) == 0 || h[0].Key != "traceparent" || string(h[0].Value) != "tp-big" {
				t.Errorf("the refused alert's dead letter has headers %v, want its notification's traceparent first", h)
			}
			for reason, want := range map[string]int64{record.ReasonAlertTooLarge: 1, record.ReasonInvalidJSON: 1} {
				if n := counterValue(r.w.metrics.DeadLettersTruncated.WithLabelValues(reason)); n != want {
					t.Errorf("joiner_dead_letters_truncated_total{reason=%q} = %d, want %d", reason, n, want)
				}
				if n := counterValue(r.w.metrics.DeadLetters.WithLabelValues(reason)); n != want {
					t.Errorf("joiner_dead_letters_total{reason=%q} = %d, want %d", reason, n, want)
				}
			}
			if n := counterValue(r.w.metrics.Alerts); n != 3 {
				t.Errorf("joiner_alerts_total = %d, want 3 (the alert dead-lettered is not one)", n)
			}
			if r.out.refused > 0 && known {
				t.Errorf("%d messages were sent over the known limit", r.out.refused)
			}
			if r.out.refused == 0 && !known {
				t.Error("the writer refused nothing: the test did not go through the broker's refusal")
			}
		})
	}
}

// A write that fails with an error no retry fixes (here the principal may
// not write the topic) is not retried in silence: /readyz fails naming
// it, joiner_output_blocked is 1, and the task holds (nothing is
// acknowledged) until the write succeeds, then everything goes out.
func TestOutputConfigErrorFailsReadiness(t *testing.T) {
	r := newFakeRig(t)
	r.out.mu.Lock()
	r.out.fail = fmt.Errorf("writing 1 messages to alerts-0: %w", kafka.TopicAuthorizationFailed)
	r.out.mu.Unlock()
	s := symbolOf(t, 0, 1)
	r.f.produce("market", 0, 1000, s, tickJSON(s, 4.25))
	r.f.produce("notifications", 0, 1500, s, noteJSON("a", s))
	r.w.Assigned(context.Background(), assignment(1, []int{0}, []int{0}))
	waitFor(t, "/readyz to fail", func() bool {
		ok, why := r.w.Ready()
		return !ok && strings.Contains(why, "Topic Authorization Failed")
	})
	if v := gaugeValue(t, r.w.metrics.OutputBlocked); v != 1 {
		t.Errorf("joiner_output_blocked = %v, want 1", v)
	}
	if _, procs := r.tasks(); procs[0].acked.Load() >= 0 {
		t.Fatal("a notification was acknowledged while its alert could not be written")
	}
	r.out.mu.Lock()
	r.out.fail = nil
	r.out.mu.Unlock()
	waitFor(t, "the alert", func() bool { return len(r.out.byTopic("alerts")) == 1 })
	var a record.Alert
	if err := json.Unmarshal(r.out.byTopic("alerts")[0].Value, &a); err != nil || a.ID != "a" || a.Price == nil || *a.Price != 4.25 {
		t.Fatalf("alert %+v (%v), want a at 4.25", a, err)
	}
	waitFor(t, "/readyz to pass", func() bool { ok, _ := r.w.Ready(); return ok })
	if v := gaugeValue(t, r.w.metrics.OutputBlocked); v != 0 {
		t.Errorf("joiner_output_blocked = %v after a write succeeded, want 0", v)
	}
}

// Two tasks' writes blocked by a config error: the first to end does not
// clear the fault while the other still cannot write.
func TestOutputFaultLastsWhileAnyWriteIsBlocked(t *testing.T) {
	r := newFakeRig(t)
	err := fmt.Errorf("writing 1 messages to joiner-dead-letters-0: %w", kafka.TopicAuthorizationFailed)
	r.w.blockOutput(err, true)
	r.w.blockOutput(err, true)
	r.w.blockOutput(err, false) // the first write again
	r.w.unblockOutput()
	if why := r.w.outputFault(); !strings.Contains(why, "Topic Authorization Failed") || gaugeValue(t, r.w.metrics.OutputBlocked) != 1 {
		t.Fatalf("fault %q with one write still blocked, want it kept", why)
	}
	r.w.unblockOutput()
	if why := r.w.outputFault(); why != "" || gaugeValue(t, r.w.metrics.OutputBlocked) != 0 {
		t.Fatalf("fault %q after every write ended, want none", why)
	}
}
