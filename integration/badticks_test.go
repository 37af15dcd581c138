package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/record"
	"github.com/segmentio/kafka-go"
)

// TestIntegrationBadTicks: a third of the market records are bad: keyed
// by another symbol than their own (so on another symbol's partition),
// with a negative, zero or "NaN" price. Two worker processes on real
// Kafka store none of them: every notification's alert carries the exact
// price of its symbol's last good tick before it, and every bad tick is
// dead-lettered once with its reason (key_mismatch, invalid_value,
// wrong_type). The workers log the dead letters once per reason per
// interval, not once each.
func TestIntegrationBadTicks(t *testing.T) {
	c := newCluster(t, partitions)
	dead := c.readDeadLetters()
	ws := []*worker{c.start("w1"), c.start("w2")}
	c.waitStable(ws, 0, 60*time.Second)
	began := time.Now()

	const symbols = 60
	base := time.Now().Add(-time.Minute).UnixMilli()
	var msgs []kafka.Message
	add := func(topic, key string, ts int64, value string) {
		msgs = append(msgs, kafka.Message{Topic: topic, Key: []byte(key), Time: time.UnixMilli(ts), Value: []byte(value)})
	}
	tick := func(sym string, price float64) string {
		return string(record.AppendTick(nil, record.Tick{Symbol: sym, Price: price}))
	}
	want := map[string]float64{}
	var ids []string
	wantDead := map[string]int{}
	for i := range symbols {
		sym, other := fmt.Sprintf("BAD%d", i), fmt.Sprintf("BAD%d", (i+1)%symbols)
		p1, p2 := 10+float64(i)+0.5, 50+float64(i)+0.25
		add(c.market, sym, base, tick(sym, p1))
		add(c.market, other, base+100, tick(sym, 999)) // keyed by another symbol
		add(c.market, sym, base+200, `{"symbol":"`+sym+`","price":-`+fmt.Sprint(p1)+`}`)
		add(c.market, sym, base+300, `{"symbol":"`+sym+`","price":0}`)
		add(c.market, sym, base+400, `{"symbol":"`+sym+`","price":"NaN"}`)
		wantDead[record.ReasonKeyMismatch]++
		wantDead[record.ReasonInvalidValue] += 2
		wantDead[record.ReasonWrongType]++
		add(c.notifs, sym, base+1000, string(record.AppendNotification(nil, &record.Notification{ID: "a-" + sym, Symbol: sym})))
		want["a-"+sym], ids = p1, append(ids, "a-"+sym)
		add(c.market, sym, base+2000, tick(sym, p2))
		add(c.market, sym, base+2100, `{"symbol":"`+sym+`","price":-1}`)
		wantDead[record.ReasonInvalidValue]++
		add(c.notifs, sym, base+3000, string(record.AppendNotification(nil, &record.Notification{ID: "b-" + sym, Symbol: sym})))
		want["b-"+sym], ids = p2, append(ids, "b-"+sym)
	}
	c.writeAndCheckExact(msgs, ids, want)
	c.waitCaughtUp(60 * time.Second)
	total := 0
	for _, n := range wantDead {
		total += n
	}
	c.poll("the dead letters", 30*time.Second, func() (bool, string) {
		got := map[string]int{}
		n := 0
		for reason := range wantDead {
			got[reason] = len(dead.byReason(reason))
			n += got[reason]
		}
		return n >= total, fmt.Sprintf("%v of %v", got, wantDead)
	})
	for reason, n := range wantDead {
		recs := dead.byReason(reason)
		if len(recs) != n {
			t.Errorf("%d dead letters with reason %s, want %d", len(recs), reason, n)
		}
		for _, d := range recs {
			src, _ := recordHeader(d.Record, "joiner-source")
			if !strings.HasPrefix(src, c.market+"/") {
				t.Errorf("dead letter %s (%s) from %q, want the market topic", d.value, reason, src)
			}
		}
	}
	// At most one line per reason (and topic) per 10 s interval, per worker.
	intervals := int(time.Since(began)/(10*time.Second)) + 1
	for _, w := range ws {
		f, err := os.Open(w.logPath)
		if err != nil {
			t.Fatal(err)
		}
		per := map[string]int{}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var line struct{ Msg, Reason, Topic string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && strings.HasPrefix(line.Msg, "dead-lettered") {
				per[line.Reason+"/"+line.Topic]++
			}
		}
		f.Close()
		for k, n := range per {
			if n > intervals {
				t.Errorf("worker %s logged %d dead-letter lines for %s in %d interval(s), want at most one per interval", w.id, n, k, intervals)
			}
		}
		t.Logf("worker %s: dead-letter log lines %v", w.id, per)
	}
}
