package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/record"
	"github.com/joiner-dev/joiner/testsupport/testkit"
	"github.com/segmentio/kafka-go"
)

// deadLetterReader reads a cluster's dead-letter topic in the background.
type deadLetterReader struct {
	mu   sync.Mutex
	recs []deadLetter
}

// deadLetter is one record of the dead-letter topic.
type deadLetter struct {
	kafka.Record
	key, value []byte
}

func (c *cluster) readDeadLetters() *deadLetterReader {
	d := &deadLetterReader{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r := testkit.NewTopicReader(c.client, c.deadT, c.partitions)
		for ctx.Err() == nil {
			n, _ := r.Poll(ctx, func(rec kafka.Record, v []byte) {
				k, _ := kafka.ReadAll(rec.Key)
				d.mu.Lock()
				d.recs = append(d.recs, deadLetter{rec, k, bytes.Clone(v)})
				d.mu.Unlock()
			})
			if n == 0 {
				select {
				case <-ctx.Done():
				case <-time.After(50 * time.Millisecond):
				}
			}
		}
	}()
	c.t.Cleanup(func() { cancel(); <-done })
	return d
}

// byReason returns the dead letters read so far whose reason is reason.
func (d *deadLetterReader) byReason(reason string) []deadLetter {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []deadLetter
	for _, r := range d.recs {
		if h, _ := recordHeader(r.Record, "joiner-dead-letter-reason"); h == reason {
			out = append(out, r)
		}
	}
	return out
}

// writeAndCheckExact writes msgs (the market's first), waits for the alert of every
// notification of ids (if any) and checks that each is local with the price want
// gives its id (the price as of its time).
func (c *cluster) writeAndCheckExact(msgs []kafka.Message, ids []string, want map[string]float64) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The ticks are acknowledged before the first notification is sent
	// (one write would send both topics' batches at once): each
	// notification is produced after every tick of its symbol, as the
	// as-of guarantee needs; the ticks' timestamps order them.
	var market, rest []kafka.Message
	for _, m := range msgs {
		if m.Topic == c.market {
			market = append(market, m)
		} else {
			rest = append(rest, m)
		}
	}
	for _, part := range [][]kafka.Message{market, rest} {
		if len(part) == 0 {
			continue
		}
		if err := c.writer.WriteMessages(ctx, part...); err != nil {
			c.t.Fatal(err)
		}
	}
	if len(ids) == 0 {
		return
	}
	c.waitAlerts(ids, 90*time.Second)
	for _, id := range ids {
		a, _ := c.alerts.alert(id)
		if a.Price == nil || *a.Price != want[id] || a.Result != record.ResultLocal {
			c.t.Errorf("alert of %s: %s, price %s; want the local price %v", id, a.Result, fmtPrice(a.Price), want[id])
		}
	}
}

func recordHeader(r kafka.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// TestIntegrationRecordAtSizeLimit: the alerts and dead-letter topics are
// created with max.message.bytes 8192. On every partition one notification
// has an alert over that limit, and one notification is over the input
// limit (64 KiB) itself. No partition stalls: every other notification,
// before and after them, gets its alert with the exact as-of price; each
// too-large alert is dead-lettered (alert_too_large) and each dead letter
// over the limit is written truncated, with the original size and SHA-256
// in its headers; the committed offsets reach the end. The workers read
// the limit from the topics at start.
func TestIntegrationRecordAtSizeLimit(t *testing.T) {
	const limit = 8192
	small := []kafka.ConfigEntry{{ConfigName: "max.message.bytes", ConfigValue: strconv.Itoa(limit)}}
	requireKafka(t)
	c := newClusterConfigured(t, partitions, &clusterNet{brokers: brokers, http: httpClient, scheme: "http"},
		map[string][]kafka.ConfigEntry{"alerts": small, "dead-letters": small})
	dead := c.readDeadLetters()
	ws := []*worker{c.start("w1"), c.start("w2")}
	c.waitStable(ws, 0, 60*time.Second)

	// One symbol per partition at least: 24 symbols over 6 partitions.
	const symbols = 24
	base := time.Now().Add(-time.Minute).UnixMilli()
	var msgs []kafka.Message
	add := func(topic, key string, ts int64, value []byte) {
		msgs = append(msgs, kafka.Message{Topic: topic, Key: []byte(key), Time: time.UnixMilli(ts), Value: value})
	}
	want := map[string]float64{} // notification id → price as of its time
	var ids, bigIDs []string
	oversized := map[string][]byte{} // symbol → its oversized notification's value
	note := func(id, sym string, ts int64, price float64) {
		add(c.notifs, sym, ts, record.AppendNotification(nil, &record.Notification{ID: id, Symbol: sym}))
		want[id], ids = price, append(ids, id)
	}
	for i := range symbols {
		sym := fmt.Sprintf("LIM%d", i)
		p1, p2 := 100+float64(i)+0.5, 200+float64(i)+0.25
		add(c.market, sym, base, record.AppendTick(nil, record.Tick{Symbol: sym, Price: p1}))
		note("a-"+sym, sym, base+1000, p1)
		big := record.Notification{ID: "big-" + sym, Symbol: sym, Text: strings.Repeat("t", limit)}
		add(c.notifs, sym, base+1500, record.AppendNotification(nil, &big))
		bigIDs = append(bigIDs, big.ID)
		note("b-"+sym, sym, base+2000, p1)
		v := record.AppendNotification(nil, &record.Notification{ID: "huge-" + sym, Symbol: sym, Text: strings.Repeat("h", 70<<10)})
		add(c.notifs, sym, base+2500, v)
		oversized[sym] = v
		add(c.market, sym, base+3000, record.AppendTick(nil, record.Tick{Symbol: sym, Price: p2}))
		note("c-"+sym, sym, base+4000, p2)
	}
	c.writeAndCheckExact(msgs, ids, want)
	for _, id := range bigIDs {
		if _, ok := c.alerts.alert(id); ok {
			t.Errorf("notification %s has an alert larger than the topic's limit", id)
		}
	}
	c.poll("the dead letters", 60*time.Second, func() (bool, string) {
		a := dead.byReason(record.ReasonAlertTooLarge)
		o := dead.byReason(record.ReasonOversized)
		return len(a) >= symbols && len(o) >= symbols, fmt.Sprintf("%d alert_too_large and %d oversized dead letters of %d each", len(a), len(o), symbols)
	})
	check := func(d deadLetter, origSize int, origSHA string) {
		t.Helper()
		if size, _ := recordHeader(d.Record, "joiner-dead-letter-original-size"); size != strconv.Itoa(origSize) {
			t.Errorf("dead letter %s: original size %q, want %d", d.key, size, origSize)
		}
		if sum, _ := recordHeader(d.Record, "joiner-dead-letter-original-sha256"); sum != origSHA {
			t.Errorf("dead letter %s: SHA-256 %q, want %q", d.key, sum, origSHA)
		}
		if len(d.value) >= origSize || len(d.value) < 256 {
			t.Errorf("dead letter %s: %d value bytes of %d: not truncated to fit %d", d.key, len(d.value), origSize, limit)
		}
	}
	for _, d := range dead.byReason(record.ReasonAlertTooLarge) {
		s, _ := recordHeader(d.Record, "joiner-dead-letter-original-size")
		size, _ := strconv.Atoi(s)
		sum, _ := recordHeader(d.Record, "joiner-dead-letter-original-sha256")
		if size <= limit || len(sum) != 64 || !bytes.HasPrefix(d.value, []byte(`{"id":"big-`+string(d.key)+`"`)) {
			t.Errorf("alert_too_large dead letter %s: original size %d, SHA-256 %q, value %.40q...", d.key, size, sum, d.value)
		}
		check(d, size, sum)
	}
	for _, d := range dead.byReason(record.ReasonOversized) {
		orig := oversized[string(d.key)]
		h := sha256.Sum256(orig)
		check(d, len(orig), hex.EncodeToString(h[:]))
		if !bytes.HasPrefix(orig, d.value) {
			t.Errorf("oversized dead letter %s: its value is not a prefix of the notification", d.key)
		}
	}
	c.waitCaughtUp(60 * time.Second)
	logs, err := os.ReadFile(ws[0].logPath)
	if err != nil || !bytes.Contains(logs, []byte(fmt.Sprintf(`"%s":%d`, c.alertsT, limit))) {
		t.Errorf("worker w1 did not log the alerts topic's max.message.bytes of %d (%v)", limit, err)
	}
}

// TestIntegrationRecordAtDefaultSizeLimit: topics with the broker's
// default max.message.bytes (1,048,588) and one notification just under
// it: far over the input limit, so it is dead-lettered, and its dead
// letter (the value plus three headers) is over the limit too. The
// partition keeps moving: the dead letter is written truncated with the
// original size and SHA-256, and the notifications around it are
// alerted exactly.
func TestIntegrationRecordAtDefaultSizeLimit(t *testing.T) {
	c := newCluster(t, partitions)
	dead := c.readDeadLetters()
	ws := []*worker{c.start("w1")}
	c.waitStable(ws, 0, 60*time.Second)
	const sym = "HUGE"
	base := time.Now().Add(-time.Minute).UnixMilli()
	// The notification's record batch is just within the limit (about 80
	// bytes of record and batch headers), its dead letter's headers are
	// not.
	const value = 1_048_588 - 100
	big := record.AppendNotification(nil, &record.Notification{ID: "huge", Symbol: sym, Text: "x"})
	big = record.AppendNotification(nil, &record.Notification{ID: "huge", Symbol: sym, Text: strings.Repeat("x", value-len(big)+1)})
	if len(big) != value {
		t.Fatalf("notification of %d bytes, want %d", len(big), value)
	}
	msgs := []kafka.Message{
		{Topic: c.market, Key: []byte(sym), Time: time.UnixMilli(base), Value: record.AppendTick(nil, record.Tick{Symbol: sym, Price: 7.5})},
		{Topic: c.notifs, Key: []byte(sym), Time: time.UnixMilli(base + 1000), Value: record.AppendNotification(nil, &record.Notification{ID: "before", Symbol: sym})},
		{Topic: c.notifs, Key: []byte(sym), Time: time.UnixMilli(base + 1500), Value: big},
		{Topic: c.notifs, Key: []byte(sym), Time: time.UnixMilli(base + 2000), Value: record.AppendNotification(nil, &record.Notification{ID: "after", Symbol: sym})},
	}
	// One write each: the big one fills a record batch alone.
	for _, m := range msgs[:3] {
		c.writeAndCheckExact([]kafka.Message{m}, nil, nil)
	}
	c.writeAndCheckExact(msgs[3:], []string{"before", "after"}, map[string]float64{"before": 7.5, "after": 7.5})
	c.poll("the dead letter", 30*time.Second, func() (bool, string) {
		return len(dead.byReason(record.ReasonOversized)) == 1, "none yet"
	})
	d := dead.byReason(record.ReasonOversized)[0]
	sum := sha256.Sum256(big)
	size, _ := recordHeader(d.Record, "joiner-dead-letter-original-size")
	hash, _ := recordHeader(d.Record, "joiner-dead-letter-original-sha256")
	if size != strconv.Itoa(len(big)) || hash != hex.EncodeToString(sum[:]) || len(d.value) >= len(big) || !bytes.HasPrefix(big, d.value) {
		t.Errorf("dead letter: original size %q, SHA-256 %q, %d value bytes; want %d, %x and a truncated prefix", size, hash, len(d.value), len(big), sum)
	}
	c.waitCaughtUp(60 * time.Second)
}
