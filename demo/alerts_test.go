package demo

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/loadgen"
	"github.com/segmentio/kafka-go"
)

// TestCollectAlertsIntoTrims: the demo's collector counts alerts per id
// (duplicates included) and, with trim, deletes from the embedded broker
// the alerts it has read and the notifications below the group's committed
// offsets, which is what keeps `joiner demo` with a million notifications
// within its memory budget.
func TestCollectAlertsIntoTrims(t *testing.T) {
	b, err := StartBroker(2)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := loadgen.NewWriter(b.Addrs)
	defer w.Close()
	var msgs []kafka.Message
	for i := range 50 {
		sym := fmt.Sprintf("S%d", i%5)
		msgs = append(msgs,
			kafka.Message{Topic: b.Topics.Notifications, Key: []byte(sym), Value: fmt.Appendf(nil, `{"id":"n%d","symbol":%q}`, i, sym)},
			kafka.Message{Topic: b.Topics.Alerts, Key: []byte(sym), Value: fmt.Appendf(nil, `{"id":"n%d","symbol":%q,"notification_ts_ms":1,"result":"miss","worker":"w"}`, i, sym)})
	}
	// n0 twice: one duplicate.
	msgs = append(msgs, kafka.Message{Topic: b.Topics.Alerts, Key: []byte("S0"), Value: []byte(`{"id":"n0","symbol":"S0","notification_ts_ms":1,"result":"miss","worker":"w"}`)})
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	// The group has committed notifications up to offset 3 of partition 0.
	if _, err := b.Client.OffsetCommit(ctx, &kafka.OffsetCommitRequest{GroupID: b.Group, GenerationID: -1,
		Topics: map[string][]kafka.OffsetCommit{b.Topics.Notifications: {{Partition: 0, Offset: 3}}}}); err != nil {
		t.Fatal(err)
	}
	a := NewAlerts()
	if err := b.CollectAlertsInto(ctx, a, true, func(a *Alerts) bool { return a.Records >= 51 }); err != nil {
		t.Fatal(err)
	}
	if a.Distinct() != 50 || a.Duplicates() != 1 || a.Count("n0") != 2 || a.Count("n1") != 1 || a.Count("n99") != 0 {
		t.Fatalf("distinct %d, duplicates %d, n0 %d, n1 %d, n99 %d; want 50, 1, 2, 1, 0", a.Distinct(), a.Duplicates(), a.Count("n0"), a.Count("n1"), a.Count("n99"))
	}
	first := func(topic string, p int) int64 {
		res, err := b.Client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: {kafka.FirstOffsetOf(p), kafka.LastOffsetOf(p)}}})
		if err != nil {
			t.Fatal(err)
		}
		return res.Topics[topic][0].FirstOffset
	}
	alerts := first(b.Topics.Alerts, 0) + first(b.Topics.Alerts, 1)
	if alerts != 51 {
		t.Errorf("alerts deleted up to %d records in all; want all 51 read", alerts)
	}
	if got := first(b.Topics.Notifications, 0); got != 3 {
		t.Errorf("notifications-0 starts at %d; want 3, the committed offset", got)
	}
	if got := first(b.Topics.Notifications, 1); got != 0 {
		t.Errorf("notifications-1 starts at %d; want 0 (nothing committed)", got)
	}
}

func TestAlertProgress(t *testing.T) {
	p := newAlertProgress(nil, 1000)
	p.last = p.last.Add(-time.Second)
	line := p.line(400)
	for _, want := range []string{"400/1000", "40.0%", "600 remaining", "alerts/s"} {
		if !strings.Contains(line, want) {
			t.Errorf("progress line %q lacks %q", line, want)
		}
	}
}

// TestHeartbeat: while a status is set, a line appears when nothing was
// written for a second, and none while lines keep coming or without a
// status.
func TestHeartbeat(t *testing.T) {
	var mu sync.Mutex
	var out bytes.Buffer
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return out.Write(p) })
	hb := &heartbeat{out: w, last: time.Now()}
	stop := hb.start()
	n := 0
	hb.setStatus(func() string { n++; return fmt.Sprintf("status %d", n) })
	for range 15 { // 1.5s of lines every 100ms: no status line
		fmt.Fprintln(hb, "loadgen: progress")
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(2500 * time.Millisecond) // silent: about two status lines
	hb.setStatus(nil)
	time.Sleep(1200 * time.Millisecond) // no status: nothing
	stop()
	mu.Lock()
	got := out.String()
	mu.Unlock()
	if c := strings.Count(got, "demo: status"); c < 1 || c > 3 {
		t.Fatalf("%d status lines in %q; want 1 to 3, only in the silent 2.5s", c, got)
	}
	if i, j := strings.Index(got, "demo: status"), strings.LastIndex(got, "loadgen:"); i < j {
		t.Fatalf("a status line came while lines kept coming: %q", got)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
