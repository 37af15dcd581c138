package demo_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/join"
	"github.com/joiner-dev/joiner/node"
	"github.com/joiner-dev/joiner/record"
	"github.com/segmentio/kafka-go"
)

// TestConfirmLatency measures what confirming the partition counts
// before a join (join/planconfirm.go) costs in latency: one worker, a
// steady 2,000 notifications/s with 400 ticks/s for 10 s, and the time
// from each notification's write to its alert's arrival at a reader
// long-polling every alerts partition. It only reports (p50, p90, p99,
// max); run it with JOINER_CONFIRM_LATENCY=1, and
// JOINER_PARTITION_CHECK_INTERVAL (a duration; default the flag's) to
// compare intervals.
func TestConfirmLatency(t *testing.T) {
	if os.Getenv("JOINER_CONFIRM_LATENCY") == "" {
		t.Skip("a measurement: set JOINER_CONFIRM_LATENCY=1")
	}
	var interval time.Duration
	if v := os.Getenv("JOINER_PARTITION_CHECK_INTERVAL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatal(err)
		}
		interval = d
	}
	f := haFleet(t, 6, func(c *node.Config) { c.PartitionCheckInterval = interval; c.MaxTaskIdle = 10 * time.Millisecond })
	startAll(t, f, "w1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := f.WaitStable(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	b := f.Broker
	var (
		mu      sync.Mutex
		written = map[string]int64{} // id -> write start, Unix µs
		arrived = map[string]int64{}
	)
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for p := range b.Partitions {
		wg.Go(func() {
			c := &kafka.Client{Addr: kafka.TCP(b.Addrs...), Timeout: 10 * time.Second, Transport: &kafka.Transport{}}
			for next := int64(0); rctx.Err() == nil; {
				res, err := c.Fetch(rctx, &kafka.FetchRequest{Topic: b.Topics.Alerts, Partition: p, Offset: next, MinBytes: 1, MaxBytes: 8 << 20, MaxWait: 50 * time.Millisecond})
				if err != nil || res.Error != nil {
					continue
				}
				now := time.Now().UnixMicro()
				for {
					rec, err := res.Records.ReadRecord()
					if err != nil {
						break
					}
					next = rec.Offset + 1
					v, _ := kafka.ReadAll(rec.Value)
					var a record.Alert
					if json.Unmarshal(v, &a) == nil {
						mu.Lock()
						if _, ok := arrived[a.ID]; !ok {
							arrived[a.ID] = now
						}
						mu.Unlock()
					}
				}
			}
		})
	}
	prod := newSwitchingProducer(b.Addrs, 6)
	rng := rand.New(rand.NewPCG(7, 7))
	var fields record.Fields
	nid := 0
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		now := time.Now()
		var tm, nm []kafka.Message
		for range 2 {
			s := fmt.Sprintf("L%02d", rng.IntN(30))
			tm = append(tm, kafka.Message{Key: []byte(s), Time: now, Value: fields.AppendTick(nil, record.Tick{Symbol: s, Price: 1 + rng.Float64()})})
		}
		if err := prod.write(ctx, b.Topics.Market, tm); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		ids := make([]string, 0, 10)
		for range 10 {
			s := fmt.Sprintf("L%02d", rng.IntN(30))
			nid++
			id := fmt.Sprintf("lat-%d", nid)
			ids = append(ids, id)
			nm = append(nm, kafka.Message{Key: []byte(s), Time: start, Value: fields.AppendNotification(nil, &record.Notification{ID: id, User: "u", Symbol: s, Text: "t"})})
		}
		mu.Lock()
		for _, id := range ids {
			written[id] = start.UnixMicro()
		}
		mu.Unlock()
		if err := prod.write(ctx, b.Topics.Notifications, nm); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		mu.Lock()
		n := len(arrived)
		mu.Unlock()
		if n >= len(written) {
			break
		}
	}
	stop()
	wg.Wait()
	var lat []time.Duration
	for id, w := range written {
		if a, ok := arrived[id]; ok {
			lat = append(lat, time.Duration(a-w)*time.Microsecond)
		}
	}
	if len(lat) < len(written) {
		t.Errorf("%d of %d notifications alerted", len(lat), len(written))
	}
	slices.Sort(lat)
	q := func(f float64) time.Duration { return lat[min(len(lat)-1, int(f*float64(len(lat))))] }
	t.Logf("partition check interval %v: %d alerts, latency p50 %v, p90 %v, p99 %v, max %v",
		cmp.Or(interval, join.DefaultPartitionCheckInterval), len(lat), q(0.5), q(0.9), q(0.99), lat[len(lat)-1])
}
