package join

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/joiner-dev/joiner/record"
	"github.com/segmentio/kafka-go"
)

// TestJoinKeepsTheNotification: each alert is its notification's object
// byte for byte plus the join's members (through the store lookup and the
// newest-price fast path), a member named like a join member is renamed
// and counted, the notification's headers go with its alert in order,
// and a dead letter keeps the record's headers before its reasons.
func TestJoinKeepsTheNotification(t *testing.T) {
	w, pt, _ := newTestWorker(t)
	fw := &fakeWriter{}
	w.writer = fw
	ctx := context.Background()
	if err := pt.st.applyRetrying(ctx, []fetchedRecord{recAt(0, 1000, `{"symbol":"BBCA","price":9125.5}`)}, -1); err != nil {
		t.Fatal(err)
	}
	hdrs := func(kv ...string) []kafka.Header {
		var h []kafka.Header
		for i := 0; i < len(kv); i += 2 {
			h = append(h, kafka.Header{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return h
	}
	in := []struct {
		value   string
		headers []kafka.Header
		alert   string // "" for a dead letter
	}{
		{`{"user":7,"symbol":"BBCA","meta":{"lang":"id","tags":["a","b"]},"score":1.5e3,"n":123456789012345678901234567890}`,
			hdrs("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tenant", "acme"),
			`{"user":7,"symbol":"BBCA","meta":{"lang":"id","tags":["a","b"]},"score":1.5e3,"n":123456789012345678901234567890,"notification_ts_ms":2000,"price":9125.5,"price_ts_ms":1000,"result":"local","worker":"w"}`},
		{`{"symbol":"BBCA", "price":{"target":9000}, "text":"caf\u00e9 \"x\""}`,
			hdrs("tracestate", "k=v", "tracestate", "k2=v2", "empty", ""),
			`{"symbol":"BBCA", "notification_price":{"target":9000}, "text":"caf\u00e9 \"x\"","notification_ts_ms":2001,"price":9125.5,"price_ts_ms":1000,"result":"local","worker":"w"}`},
		{`{"symbol":"BBCA","a":1,"a":2}`, hdrs("traceparent", "t-dead"), ""},
		{`{"symbol":"BBCA"}`, nil, `{"symbol":"BBCA","notification_ts_ms":1999,"price":9125.5,"price_ts_ms":1000,"result":"local","worker":"w"}`},
	}
	var recs []fetchedRecord
	for i, c := range in {
		r := recAt(int64(i), 2000+i, c.value)
		if i == 3 {
			r = recAt(int64(i), 1999, c.value) // older than the first: a store lookup again
		}
		r.Headers = c.headers
		recs = append(recs, r)
	}
	var e encoded
	dead, err := pt.joinInto(ctx, &e, recs)
	if err != nil {
		t.Fatal(err)
	}
	if err := pt.flush(ctx, nil, []*encoded{&e}, dead); err != nil {
		t.Fatal(err)
	}
	alerts := fw.byTopic(w.cfg.Topics.Alerts)
	k := 0
	for i, c := range in {
		if c.alert == "" {
			continue
		}
		if k >= len(alerts) {
			t.Fatalf("%d alerts, want one for notification %d", len(alerts), i)
		}
		a := alerts[k]
		k++
		if string(a.Value) != c.alert || string(a.Key) != "BBCA" {
			t.Errorf("alert of %s:\n got %s (key %q)\nwant %s", c.value, a.Value, a.Key, c.alert)
		}
		if !slices.EqualFunc(a.Headers, c.headers, func(x, y kafka.Header) bool { return x.Key == y.Key && string(x.Value) == string(y.Value) }) {
			t.Errorf("alert of %s has headers %v, want %v", c.value, a.Headers, c.headers)
		}
	}
	if k != len(alerts) {
		t.Errorf("%d alerts, want %d", len(alerts), k)
	}
	if got := counterValue(w.metrics.FieldConflicts.WithLabelValues("price")); got != 1 {
		t.Errorf("joiner_alert_field_conflicts_total{member=price} = %v, want 1", got)
	}
	dl := fw.byTopic(w.cfg.Topics.DeadLetter)
	if len(dl) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dl))
	}
	var keys []string
	for _, h := range dl[0].Headers {
		keys = append(keys, h.Key)
	}
	if want := []string{"traceparent", "joiner-dead-letter-reason", "joiner-dead-letter-error", "joiner-source"}; !slices.Equal(keys, want) || string(dl[0].Headers[0].Value) != "t-dead" || string(dl[0].Headers[1].Value) != record.ReasonInvalidValue {
		t.Errorf("dead letter headers %v, want the record's, then the reasons: %v", dl[0].Headers, want)
	}
}

// TestLateTicksCounted: a tick stored after a notification at or after
// its time was joined on its task is late: counted, stored (a later
// lookup sees it); a tick newer than every joined notification is not.
func TestLateTicksCounted(t *testing.T) {
	w, pt, _ := newTestWorker(t)
	w.writer = &fakeWriter{}
	ctx := context.Background()
	if err := pt.st.applyRetrying(ctx, []fetchedRecord{recAt(0, 1000, `{"symbol":"BBCA","price":1}`)}, -1); err != nil {
		t.Fatal(err)
	}
	var e encoded
	if _, err := pt.joinInto(ctx, &e, []fetchedRecord{recAt(0, 2000, `{"symbol":"BBCA"}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := pt.joinInto(ctx, &e, []fetchedRecord{recAt(1, 2500, `{"symbol":"BBCA"}`)}); err != nil { // the newest-price path
		t.Fatal(err)
	}
	err := pt.st.applyRetrying(ctx, []fetchedRecord{
		recAt(1, 1500, `{"symbol":"BBCA","price":2}`), // late: before 2500
		recAt(2, 2500, `{"symbol":"TLKM","price":3}`), // late: at 2500
		recAt(3, 2501, `{"symbol":"BBCA","price":4}`), // in time
	}, -1)
	if err != nil {
		t.Fatal(err)
	}
	if got := counterValue(w.metrics.TicksLate); got != 2 {
		t.Errorf("joiner_ticks_late_total = %v, want 2", got)
	}
	// The latest price (GET /v1/prices without at_ms) is no join: a tick
	// after it is not late.
	if _, err := w.PriceAsOf(ctx, "BBCA", nil); err != nil {
		t.Fatal(err)
	}
	if err := pt.st.applyRetrying(ctx, []fetchedRecord{recAt(4, 2600, `{"symbol":"BBCA","price":5}`)}, -1); err != nil {
		t.Fatal(err)
	}
	if got := counterValue(w.metrics.TicksLate); got != 2 {
		t.Errorf("joiner_ticks_late_total = %v after a latest-price lookup and a newer tick, want 2", got)
	}
	tick, _, err := pt.st.getAsOf("BBCA", 2000)
	if err != nil || tick.Price != 2 {
		t.Errorf("the price as of 2000 after the late tick: %+v, %v; want the late tick's 2", tick, err)
	}
}

// TestEncodedRollbackDropsHeaders: headers of alerts taken back by a
// rollback do not go with the alerts added after it.
func TestEncodedRollbackDropsHeaders(t *testing.T) {
	w, _, _ := newTestWorker(t)
	fw := &fakeWriter{}
	w.writer = fw
	n, err := w.dec.Notification([]byte(`{"symbol":"BBCA"}`))
	if err != nil {
		t.Fatal(err)
	}
	var e encoded
	h := []kafka.Header{{Key: "traceparent", Value: []byte("kept")}}
	e.addPriced(w.alerts, &n, h, 1, nil, record.ResultMiss)
	m := e.mark()
	e.addPriced(w.alerts, &n, []kafka.Header{{Key: "traceparent", Value: []byte("rolled back")}}, 2, nil, record.ResultMiss)
	e.rollback(m)
	e.addPriced(w.alerts, &n, nil, 3, nil, record.ResultMiss)
	e.addPriced(w.alerts, &n, []kafka.Header{{Key: "traceparent", Value: []byte("third")}}, 4, nil, record.ResultMiss)
	if _, err := w.writeOutWith(context.Background(), nil, -1, []*encoded{&e}, nil); err != nil {
		t.Fatal(err)
	}
	msgs := fw.byTopic(w.cfg.Topics.Alerts)
	if len(msgs) != 3 || len(msgs[0].Headers) != 1 || string(msgs[0].Headers[0].Value) != "kept" || len(msgs[1].Headers) != 0 ||
		len(msgs[2].Headers) != 1 || string(msgs[2].Headers[0].Value) != "third" {
		t.Fatalf("messages %+v: want the first and third with their headers, the second with none", msgs)
	}
}

// TestNewestPricesKeepTheVersionBefore: a merged task answers a
// notification between its symbol's newest version and the one before
// from memory, follows a late tick that falls between them, and leaves
// older notifications to the store: each alert's price is the store's
// as-of price.
func TestNewestPricesKeepTheVersionBefore(t *testing.T) {
	w, pt, _ := newTestWorker(t)
	w.writer = &fakeWriter{}
	ctx := context.Background()
	apply := func(recs ...fetchedRecord) {
		t.Helper()
		ticks, err := pt.st.applyTicks(ctx, recs, -1)
		if err != nil {
			t.Fatal(err)
		}
		pt.applied(ticks)
	}
	var e encoded
	join := func(off int64, ms int) string {
		t.Helper()
		e.reset()
		if _, err := pt.joinInto(ctx, &e, []fetchedRecord{recAt(off, ms, `{"symbol":"BBCA"}`)}); err != nil || len(e.spans) != 1 {
			t.Fatalf("join at %d: %v", ms, err)
		}
		sp := e.spans[0]
		return string(e.buf[sp.v:sp.e])
	}
	want := func(ms int) string {
		t.Helper()
		tick, _, err := pt.st.getAsOf("BBCA", int64(ms))
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf(`"price":%v,"price_ts_ms":%d`, tick.Price, tick.TimestampMs)
	}
	apply(recAt(0, 1000, `{"symbol":"BBCA","price":1}`))
	join(0, 1100) // the symbol's newest price is now in the map
	apply(recAt(1, 2000, `{"symbol":"BBCA","price":2}`))
	c := pt.latest["BBCA"]
	if c == nil || !c.hasPrev || c.prev.Price != 1 || c.tick.Price != 2 {
		t.Fatalf("newest prices %+v, want 2 and before it 1", c)
	}
	for _, step := range []struct {
		tick fetchedRecord
		at   int
		prev float64 // the version before the newest after the tick, 0: none expected
	}{
		{recAt(2, 1200, `{"symbol":"BBCA","price":3}`), 1500, 3}, // late, between the two
		{recAt(3, 1500, `{"symbol":"BBCA","price":4}`), 1500, 4}, // a tie with the notification
		{recAt(4, 900, `{"symbol":"BBCA","price":5}`), 950, 4},   // older than the one before: the store
		{recAt(5, 3000, `{"symbol":"BBCA","price":6}`), 2500, 2}, // a new newest
	} {
		apply(step.tick)
		if got := join(1, step.at); !strings.Contains(got, want(step.at)) {
			t.Errorf("after the tick at %d, the alert at %d is %s, want the store's %s", step.tick.Time.UnixMilli(), step.at, got, want(step.at))
		}
		if c.prev.Price != step.prev {
			t.Errorf("after the tick at %d the version before the newest is %+v, want price %v", step.tick.Time.UnixMilli(), c.prev, step.prev)
		}
	}
}
