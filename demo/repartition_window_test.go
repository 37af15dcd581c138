package demo_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/murmur2"
	"github.com/joiner-dev/joiner/record"
	"github.com/joiner-dev/joiner/testsupport/oracle"
	"github.com/segmentio/kafka-go"
)

// switchingProducer writes records partitioned with murmur2 over the
// partition count it knows, which the test switches when it likes: a
// producer whose metadata shows the new count at its own time.
type switchingProducer struct {
	addrs  []string
	client atomic.Pointer[kafka.Client]
	count  atomic.Int64
}

func newSwitchingProducer(addrs []string, count int) *switchingProducer {
	p := &switchingProducer{addrs: addrs}
	p.switchTo(count)
	return p
}

// switchTo makes the producer partition over count from now on, with a
// client of its own whose metadata is read fresh.
func (p *switchingProducer) switchTo(count int) {
	p.client.Store(&kafka.Client{Addr: kafka.TCP(p.addrs...), Timeout: 10 * time.Second, Transport: &kafka.Transport{}})
	p.count.Store(int64(count))
}

// write writes msgs (all of topic), each to its key's partition, and
// returns once Kafka acknowledged them all.
func (p *switchingProducer) write(ctx context.Context, topic string, msgs []kafka.Message) error {
	n := int(p.count.Load())
	c := p.client.Load()
	byPart := map[int][]kafka.Record{}
	for _, m := range msgs {
		q := murmur2.Partition(m.Key, n)
		byPart[q] = append(byPart[q], kafka.Record{Time: m.Time, Key: kafka.NewBytes(m.Key), Value: kafka.NewBytes(m.Value)})
	}
	for q, recs := range byPart {
		res, err := c.Produce(ctx, &kafka.ProduceRequest{Topic: topic, Partition: q, RequiredAcks: kafka.RequireAll, Records: kafka.NewRecordReader(recs...)})
		if err == nil {
			err = res.Error
		}
		if err != nil {
			return fmt.Errorf("produce %s-%d: %w", topic, q, err)
		}
	}
	return nil
}

// TestBothTopicsGrowProducersSwitchOneByOne (issue 19, item 5, the
// metadata window): both input topics go from 6 to 8 partitions under
// load, and the producers switch to the new count one by one: the tick
// producer at once, the notification producer 4 s later. In between, a
// moved symbol's newest tick is in its partition under 8, which no task
// reads under the plan of 6, while its notifications still go to its
// partition under 6. The workers' cached metadata shows the change
// seconds late; joined in that window, such a notification would get the
// older price. Every alert's price is checked against the as-of price of
// what was written.
func TestBothTopicsGrowProducersSwitchOneByOne(t *testing.T) {
	f, topics := oracleFleet(t)
	b := f.Broker
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ticks := newSwitchingProducer(b.Addrs, 6)
	notes := newSwitchingProducer(b.Addrs, 6)
	wl := oracle.NewWorkload(record.Fields{})
	rng := rand.New(rand.NewPCG(19, 5))
	symbols := make([]string, 40)
	for i := range symbols {
		symbols[i] = fmt.Sprintf("W%02d", i)
	}
	var fields record.Fields
	price, nid := 0, 0
	last := int64(0)
	// round writes 4 ticks, then (once acknowledged) 8 notifications, all
	// with distinct timestamps newer than every record before them.
	round := func() error {
		base := max(time.Now().UnixMilli(), last+1)
		var tm, nm []kafka.Message
		type tk struct {
			symbol string
			ts     int64
			price  float64
		}
		var written []tk
		for i := range 4 {
			s := symbols[rng.IntN(len(symbols))]
			price++
			p := float64(price) + 0.5
			ts := base + int64(i)
			tm = append(tm, kafka.Message{Key: []byte(s), Time: time.UnixMilli(ts), Value: fields.AppendTick(nil, record.Tick{Symbol: s, Price: p})})
			written = append(written, tk{s, ts, p})
		}
		if err := ticks.write(ctx, topics.Market, tm); err != nil {
			return err
		}
		for _, w := range written {
			wl.AddTick(w.symbol, w.ts, w.price)
		}
		type nt struct {
			id, symbol string
			ts         int64
		}
		var ns []nt
		for i := range 8 {
			s := symbols[rng.IntN(len(symbols))]
			nid++
			id := fmt.Sprintf("win-%d", nid)
			ts := base + 4 + int64(i)
			v := fields.AppendNotification(nil, &record.Notification{ID: id, User: "u", Symbol: s, Text: "t"})
			nm = append(nm, kafka.Message{Key: []byte(s), Time: time.UnixMilli(ts), Value: v})
			ns = append(ns, nt{id, s, ts})
		}
		last = base + 11
		if err := notes.write(ctx, topics.Notifications, nm); err != nil {
			return err
		}
		for i, n := range ns {
			wl.AddNotification(n.id, n.symbol, n.ts, nm[i].Value)
		}
		return nil
	}
	run := func(d time.Duration) {
		t.Helper()
		for end := time.Now().Add(d); time.Now().Before(end); {
			if err := round(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	run(1500 * time.Millisecond)
	growBoth(ctx, t, b, 8)
	ticks.switchTo(8)
	run(4 * time.Second)
	notes.switchTo(8)
	run(3 * time.Second)
	rep, err := wl.WaitComplete(ctx, oracle.NewAlertReader(b.Client, b.Topics.Alerts, b.Partitions), wl.Produced(), 90*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%v", rep)
	if rep.Lost != 0 || rep.Wrong != 0 || rep.DuplicatesDiffering != 0 {
		t.Errorf("oracle: %v; examples: %q", rep, rep.Examples)
	}
}
