package join

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/joiner-dev/joiner/record"
)

// lineLog is a slog handler that keeps every line (its message and
// attributes), for tests that count what was logged.
type lineLog struct {
	mu    *sync.Mutex
	lines *[]map[string]string
	attrs []slog.Attr
}

func newLineLog() lineLog { return lineLog{mu: &sync.Mutex{}, lines: &[]map[string]string{}} }

func (l lineLog) Enabled(context.Context, slog.Level) bool { return true }

func (l lineLog) Handle(_ context.Context, r slog.Record) error {
	m := map[string]string{"msg": r.Message, "level": r.Level.String()}
	for _, a := range l.attrs {
		m[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
	l.mu.Lock()
	*l.lines = append(*l.lines, m)
	l.mu.Unlock()
	return nil
}

func (l lineLog) WithAttrs(as []slog.Attr) slog.Handler {
	l.attrs = append(append([]slog.Attr(nil), l.attrs...), as...)
	return l
}

func (l lineLog) WithGroup(string) slog.Handler { return l }

// matching returns the lines whose message contains msg.
func (l lineLog) matching(msg string) []map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]string
	for _, m := range *l.lines {
		if strings.Contains(m["msg"], msg) {
			out = append(out, m)
		}
	}
	return out
}

// keyOnPartition returns a key other than not that murmur2 puts on
// partition p of n.
func keyOnPartition(t *testing.T, p, n int, not string) string {
	t.Helper()
	for i := range 1000 {
		if k := fmt.Sprintf("K%d", i); k != not && SymbolTask(k, n) == p {
			return k
		}
	}
	t.Fatalf("no key of partition %d of %d", p, n)
	return ""
}

// badTicks produces, on market-0 from ts, one tick of each kind that must
// never reach a store, and returns the dead-letter reason of each.
func badTicks(t *testing.T, f *fakeFetcher, ts int64, s0, s1 string) []string {
	t.Helper()
	sameTask := keyOnPartition(t, 0, 2, s0)
	for _, b := range []struct{ key, value string }{
		{sameTask, tickJSON(s0, 99)}, // keyed otherwise, though on the same partition
		{s0, tickJSON(s1, 98)},       // another task's symbol, routed by s0's key
		{"", tickJSON(s0, 97)},       // no key
		{s0, `{"symbol":"` + s0 + `","price":-5}`},
		{s0, `{"symbol":"` + s0 + `","price":0}`},
		{s0, `{"symbol":"` + s0 + `","price":-0}`},
		{s0, `{"symbol":"` + s0 + `","price":"NaN"}`},
		{s0, `{"symbol":"` + s0 + `","price":NaN}`},
	} {
		f.produce("market", 0, ts, b.key, b.value)
		ts++
	}
	return []string{record.ReasonKeyMismatch, record.ReasonKeyMismatch, record.ReasonKeyMismatch,
		record.ReasonInvalidValue, record.ReasonInvalidValue, record.ReasonInvalidValue, record.ReasonWrongType, record.ReasonInvalidJSON}
}

// Bad ticks, read by a restore and then by the merge, never reach a store
// and are each dead-lettered with their reason; the alerts of the good
// notifications are exact. The dead letters log one line per reason and
// topic per interval, not one each.
func TestBadTicksAreDeadLetteredNotStored(t *testing.T) {
	logs := newLineLog()
	r := newFakeRig(t, func(c *Config) { c.Logger = slog.New(logs) })
	s0, s1 := symbolOf(t, 0, 2), symbolOf(t, 1, 2)
	r.f.produce("market", 0, 1000, s0, tickJSON(s0, 10.5))
	r.f.produce("market", 1, 1000, s1, tickJSON(s1, 20.25))
	want := badTicks(t, r.f, 1100, s0, s1) // restored
	r.f.produce("notifications", 0, 2000, s0, noteJSON("a", s0))
	r.f.produce("notifications", 1, 2000, s1, noteJSON("b", s1))
	r.w.Assigned(context.Background(), assignment(1, []int{0, 1}, []int{0, 1}))
	r.waitAlert(t, "a")
	want = append(want, badTicks(t, r.f, 2100, s0, s1)...) // merged
	r.f.produce("market", 0, 3000, s0, tickJSON(s0, 11.75))
	r.f.produce("notifications", 0, 4000, s0, noteJSON("c", s0))
	r.waitAlert(t, "c")
	r.waitAlert(t, "b")

	prices := map[string]float64{}
	for _, m := range r.out.byTopic("alerts") {
		var a record.Alert
		if err := json.Unmarshal(m.Value, &a); err != nil || a.Price == nil {
			t.Fatalf("alert %s: %v", m.Value, err)
		}
		prices[a.ID] = *a.Price
	}
	if len(prices) != 3 || prices["a"] != 10.5 || prices["b"] != 20.25 || prices["c"] != 11.75 {
		t.Fatalf("alert prices %v, want a 10.5, b 20.25, c 11.75", prices)
	}
	states, _ := r.tasks()
	for p, sym := range map[int]string{0: s0, 1: s1} {
		for q, st := range states {
			h, err := st.store.History(sym)
			if err != nil {
				t.Fatal(err)
			}
			var got []float64
			for _, v := range h {
				got = append(got, v.Price)
			}
			wantN := map[bool]int{true: map[int]int{0: 2, 1: 1}[p], false: 0}[p == q]
			if len(h) != wantN || (p == q && p == 0 && (got[0] != 11.75 || got[1] != 10.5)) || (p == q && p == 1 && got[0] != 20.25) {
				t.Errorf("store of task %d holds %v for %s (task %d's symbol); want only its good ticks", q, got, sym, p)
			}
		}
	}
	waitFor(t, "every bad tick dead-lettered", func() bool { return len(r.out.byTopic(record.DefaultDeadLetterTopic)) >= len(want) })
	dead := r.out.byTopic(record.DefaultDeadLetterTopic)
	if len(dead) != len(want) {
		t.Fatalf("%d dead letters, want %d", len(dead), len(want))
	}
	for i, m := range dead {
		reason, _ := header(m, headerReason)
		src, _ := header(m, headerSource)
		wantSrc := fmt.Sprintf("market/0/%d", 1+i) // offset 0 is the good tick
		if reason != want[i] || src != wantSrc {
			t.Errorf("dead letter %d (%s): reason %q from %s, want %q from %s", i, m.Value, reason, src, want[i], wantSrc)
		}
	}
	if n := counterValue(r.w.metrics.DeadLetters.WithLabelValues(record.ReasonKeyMismatch)); n != 6 {
		t.Errorf("joiner_dead_letters_total{reason=key_mismatch} = %d, want 6", n)
	}
	// 16 dead letters of 4 reasons, all well within one interval: one
	// line per reason.
	lines := logs.matching("dead-lettered")
	byReason := map[string]int{}
	for _, l := range lines {
		byReason[l["reason"]+"/"+l["topic"]]++
	}
	if len(lines) != 4 || len(byReason) != 4 {
		t.Errorf("%d dead-letter log lines (%v), want one per reason and topic: 4", len(lines), byReason)
	}
}

// A standby copy applies no bad tick either: its store holds only the
// good ones.
func TestStandbyStoresNoBadTicks(t *testing.T) {
	r := newFakeRig(t)
	s0, s1 := symbolOf(t, 0, 2), symbolOf(t, 1, 2)
	r.f.produce("market", 0, 1000, s0, tickJSON(s0, 10.5))
	badTicks(t, r.f, 1100, s0, s1)
	r.f.produce("market", 0, 2000, s0, tickJSON(s0, 12.5))
	r.w.Assigned(context.Background(), withStandby(assignment(1, []int{1}, []int{1}), []int{0}, nil))
	sb := r.standby(t, 0)
	waitFor(t, "the standby to read market-0", func() bool { return sb.appliedOffset() == 9 })
	for sym, want := range map[string][]float64{s0: {12.5, 10.5}, s1: nil} {
		h, err := sb.store.History(sym)
		if err != nil {
			t.Fatal(err)
		}
		if len(h) != len(want) || (len(want) > 0 && (h[0].Price != want[0] || h[1].Price != want[1])) {
			t.Errorf("standby store holds %v for %s, want prices %v", h, sym, want)
		}
	}
	if n := len(r.out.byTopic(record.DefaultDeadLetterTopic)); n != 0 {
		t.Errorf("a standby dead-lettered %d records; the active owner does", n)
	}
}
