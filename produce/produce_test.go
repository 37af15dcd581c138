package produce

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/internal/backoff"
	"github.com/joiner-dev/joiner/murmur2"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// fastRetries keeps the tests' backoff short.
var fastRetries = backoff.Policy{Min: time.Millisecond, Max: 5 * time.Millisecond}

func newCluster(t *testing.T, topics map[string]int32) *kfake.Cluster {
	t.Helper()
	opts := []kfake.Opt{kfake.NumBrokers(1)}
	for topic, n := range topics {
		opts = append(opts, kfake.SeedTopics(n, topic))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func newProducer(t *testing.T, c *kfake.Cluster, attempts int) *Producer {
	t.Helper()
	tr := &kafka.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	p, err := New(Config{Addr: kafka.TCP(c.ListenAddrs()...), Transport: tr, Attempts: attempts, Backoff: fastRetries})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// consume reads n records of topic from the start, with franz-go (another
// client than the one under test).
func consume(t *testing.T, c *kfake.Cluster, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records of %s", len(out), n, topic)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

// byPartition groups records by partition, in offset order.
func byPartition(recs []*kgo.Record) map[int32][]*kgo.Record {
	m := make(map[int32][]*kgo.Record)
	for _, r := range recs {
		m[r.Partition] = append(m[r.Partition], r)
	}
	return m
}

// Every message lands on murmur2.Balancer's partition, in the order of
// the call within each partition, with its value, headers and timestamp.
func TestWriteMessagesPartitionsOrderHeaders(t *testing.T) {
	topics := map[string]int32{"alerts": 6, "dead": 3}
	c := newCluster(t, topics)
	p := newProducer(t, c, 0)
	ctx := context.Background()

	base := time.UnixMilli(1_700_000_000_000)
	var msgs []kafka.Message
	seq := 0
	for round := range 3 { // several calls: order across calls too
		var call []kafka.Message
		for i := range 200 {
			topic := "alerts"
			var headers []kafka.Header
			if i%7 == 0 {
				topic = "dead"
				headers = []kafka.Header{{Key: "joiner-dead-letter-reason", Value: []byte("decode")}, {Key: "joiner-source", Value: fmt.Appendf(nil, "n/%d", seq)}}
			}
			call = append(call, kafka.Message{
				Topic:   topic,
				Key:     fmt.Appendf(nil, "SYM%d", (i*31+round)%23),
				Value:   fmt.Appendf(nil, "v%d", seq),
				Time:    base.Add(time.Duration(seq) * time.Millisecond),
				Headers: headers,
			})
			seq++
		}
		if err := p.WriteMessages(ctx, call...); err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, call...)
	}

	var bal murmur2.Balancer
	for topic, n := range topics {
		parts := make([]int, n)
		for i := range parts {
			parts[i] = i
		}
		want := make(map[int32][]kafka.Message)
		total := 0
		for _, m := range msgs {
			if m.Topic == topic {
				p := int32(bal.Balance(m, parts...))
				want[p] = append(want[p], m)
				total++
			}
		}
		got := byPartition(consume(t, c, topic, total))
		if len(got) != len(want) {
			t.Errorf("%s: records in %d partitions, want %d", topic, len(got), len(want))
		}
		for part, ws := range want {
			gs := got[part]
			if len(gs) != len(ws) {
				t.Errorf("%s-%d: %d records, want %d", topic, part, len(gs), len(ws))
				continue
			}
			for i, w := range ws {
				g := gs[i]
				if !bytes.Equal(g.Key, w.Key) || !bytes.Equal(g.Value, w.Value) {
					t.Fatalf("%s-%d record %d: %s=%s, want %s=%s (order or partition differs)", topic, part, i, g.Key, g.Value, w.Key, w.Value)
				}
				if !g.Timestamp.Equal(w.Time) {
					t.Errorf("%s-%d record %d: timestamp %v, want %v", topic, part, i, g.Timestamp, w.Time)
				}
				if len(g.Headers) != len(w.Headers) {
					t.Fatalf("%s-%d record %d: %d headers, want %d", topic, part, i, len(g.Headers), len(w.Headers))
				}
				for j, h := range w.Headers {
					if g.Headers[j].Key != h.Key || !bytes.Equal(g.Headers[j].Value, h.Value) {
						t.Errorf("%s-%d record %d header %d: %s=%s, want %s=%s", topic, part, i, j, g.Headers[j].Key, g.Headers[j].Value, h.Key, h.Value)
					}
				}
			}
		}
	}
}

// failPartition makes the broker answer the produce requests for topic-part
// with code while fail() says so, and counts every produce request for it.
func failPartition(c *kfake.Cluster, topic string, part int32, code int16, fail func(n int64) bool) *atomic.Int64 {
	var n atomic.Int64
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.ProduceRequest)
		if len(r.Topics) != 1 || r.Topics[0].Topic != topic || len(r.Topics[0].Partitions) != 1 || r.Topics[0].Partitions[0].Partition != part {
			return nil, nil, false
		}
		if !fail(n.Add(1)) {
			return nil, nil, false
		}
		resp := r.ResponseKind().(*kmsg.ProduceResponse)
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = topic
		rp := kmsg.NewProduceResponseTopicPartition()
		rp.Partition = part
		rp.ErrorCode = code
		rt.Partitions = append(rt.Partitions, rp)
		resp.Topics = append(resp.Topics, rt)
		return resp, nil, true
	})
	return &n
}

// countRefreshes counts the CreateTopics requests (the producer's forced
// metadata refresh) and lets the broker answer them.
func countRefreshes(c *kfake.Cluster) *atomic.Int64 {
	var n atomic.Int64
	c.ControlKey(int16(kmsg.CreateTopics), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.CreateTopicsRequest)
		if len(r.Topics) == 1 && r.Topics[0].Topic == refreshTopic {
			if !r.ValidateOnly {
				panic("the refresh request must be validate-only")
			}
			n.Add(1)
		}
		return nil, nil, false
	})
	return &n
}

// keysFor returns n keys that murmur2 puts on partition part of parts.
func keysFor(part, parts, n int) [][]byte {
	var out [][]byte
	for i := 0; len(out) < n; i++ {
		k := fmt.Appendf(nil, "K%d", i)
		if murmur2.Partition(k, parts) == part {
			out = append(out, k)
		}
	}
	return out
}

// A partition whose leader answers NOT_LEADER_OR_FOLLOWER, then recovers:
// the producer refreshes the Transport's metadata, retries, and every
// message is written once, in order; the other partitions are unaffected.
func TestWriteMessagesLeaderErrorThenRecovers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		code    int16
		refresh bool
	}{
		{"not leader", 6, true},
		{"leader not available", 5, true},
		{"request timed out", 7, false},
		{"not enough replicas", 19, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, map[string]int32{"alerts": 4})
			p := newProducer(t, c, 0)
			refreshes := countRefreshes(c)
			attempts := failPartition(c, "alerts", 2, tc.code, func(n int64) bool { return n <= 3 })

			var msgs []kafka.Message
			for part := range 4 {
				for i, k := range keysFor(part, 4, 50) {
					msgs = append(msgs, kafka.Message{Topic: "alerts", Key: k, Value: fmt.Appendf(nil, "%d-%d", part, i)})
				}
			}
			start := time.Now()
			if err := p.WriteMessages(context.Background(), msgs...); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("took %v: a refresh waited (the broker accepted its CreateTopics?)", d)
			}
			if got := attempts.Load(); got != 4 {
				t.Errorf("%d produce requests for alerts-2, want 4 (3 failed, 1 written)", got)
			}
			if got := refreshes.Load(); tc.refresh && got == 0 {
				t.Errorf("no metadata refresh after %d errors", tc.code)
			} else if !tc.refresh && got != 0 {
				t.Errorf("%d metadata refreshes after error %d, want none", got, tc.code)
			}
			got := byPartition(consume(t, c, "alerts", len(msgs)))
			for part := range 4 {
				rs := got[int32(part)]
				if len(rs) != 50 {
					t.Fatalf("alerts-%d: %d records, want 50", part, len(rs))
				}
				for i, r := range rs {
					if want := fmt.Sprintf("%d-%d", part, i); string(r.Value) != want {
						t.Fatalf("alerts-%d record %d: %s, want %s", part, i, r.Value, want)
					}
				}
			}
		})
	}
}

// A non-retriable error (MESSAGE_TOO_LARGE) is returned after one attempt,
// naming the topic-partition and what to do.
func TestWriteMessagesNonRetriable(t *testing.T) {
	c := newCluster(t, map[string]int32{"alerts": 2})
	p := newProducer(t, c, 0)
	attempts := failPartition(c, "alerts", 1, 10, func(int64) bool { return true })
	msgs := []kafka.Message{
		{Topic: "alerts", Key: keysFor(0, 2, 1)[0], Value: []byte("a")},
		{Topic: "alerts", Key: keysFor(1, 2, 1)[0], Value: []byte("b")},
	}
	err := p.WriteMessages(context.Background(), msgs...)
	if !errors.Is(err, kafka.MessageSizeTooLarge) {
		t.Fatalf("err = %v, want MessageSizeTooLarge", err)
	}
	for _, want := range []string{"alerts-1", "not retriable", "max.message.bytes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if n := attempts.Load(); n != 1 {
		t.Errorf("%d attempts, want 1", n)
	}
}

// A retriable error that lasts is returned after Attempts attempts.
func TestWriteMessagesGivesUp(t *testing.T) {
	c := newCluster(t, map[string]int32{"alerts": 1})
	p := newProducer(t, c, 3)
	attempts := failPartition(c, "alerts", 0, 7, func(int64) bool { return true })
	err := p.WriteMessages(context.Background(), kafka.Message{Topic: "alerts", Key: []byte("k"), Value: []byte("v")})
	if !errors.Is(err, kafka.RequestTimedOut) || !strings.Contains(err.Error(), "after 3 attempts") {
		t.Fatalf("err = %v, want RequestTimedOut after 3 attempts", err)
	}
	if n := attempts.Load(); n != 3 {
		t.Errorf("%d attempts, want 3", n)
	}
}

// A topic that does not exist is an error that says so, after one
// metadata refresh; nothing is written.
func TestWriteMessagesUnknownTopic(t *testing.T) {
	c := newCluster(t, map[string]int32{"alerts": 1})
	c.ControlKey(int16(kmsg.Metadata), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.MetadataRequest)
		r.AllowAutoTopicCreation = false // kfake would create it
		return nil, nil, false
	})
	p := newProducer(t, c, 0)
	refreshes := countRefreshes(c)
	err := p.WriteMessages(context.Background(), kafka.Message{Topic: "missing", Key: []byte("k"), Value: []byte("v")})
	if err == nil || !strings.Contains(err.Error(), `topic "missing" does not exist`) {
		t.Fatalf("err = %v, want: topic does not exist", err)
	}
	if n := refreshes.Load(); n != 1 {
		t.Errorf("%d refreshes, want 1", n)
	}
}

// Concurrent calls (one per task) each get their messages acknowledged.
func TestWriteMessagesConcurrentCalls(t *testing.T) {
	c := newCluster(t, map[string]int32{"alerts": 3})
	p := newProducer(t, c, 0)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				var msgs []kafka.Message
				for j := range 10 {
					msgs = append(msgs, kafka.Message{Topic: "alerts", Key: fmt.Appendf(nil, "g%d-%d", g, j), Value: fmt.Appendf(nil, "%d/%d/%d", g, i, j)})
				}
				if err := p.WriteMessages(context.Background(), msgs...); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	recs := consume(t, c, "alerts", 8*20*10)
	last := make(map[string]int) // key -> last round seen: order per key
	for _, r := range recs {
		var g, i, j int
		fmt.Sscanf(string(r.Value), "%d/%d/%d", &g, &i, &j)
		k := string(r.Key)
		if prev, ok := last[k]; ok && i <= prev {
			t.Fatalf("key %s: round %d after %d", k, i, prev)
		}
		last[k] = i
	}
}

// The leader of a partition moves to another broker (or its broker leaves
// the cluster) between two writes: the producer refreshes the Transport's
// metadata and writes to the new leader. The Transport's own refresh timer
// is set to an hour, so only the producer's refresh can find the new
// leader within the few attempts allowed.
func TestWriteMessagesLeaderMoves(t *testing.T) {
	for _, remove := range []bool{false, true} {
		name := "moved"
		if remove {
			name = "broker removed"
		}
		t.Run(name, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(1, "alerts"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			tr := &kafka.Transport{MetadataTTL: time.Hour}
			defer tr.CloseIdleConnections()
			p, err := New(Config{Addr: kafka.TCP(c.ListenAddrs()...), Transport: tr, Attempts: 5, Backoff: fastRetries})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			write := func(v string) {
				t.Helper()
				if err := p.WriteMessages(ctx, kafka.Message{Topic: "alerts", Key: []byte("k"), Value: []byte(v)}); err != nil {
					t.Fatalf("writing %s: %v", v, err)
				}
			}
			write("before")
			old := c.LeaderFor("alerts", 0)
			if remove {
				if err := c.RemoveNode(old); err != nil {
					t.Fatal(err)
				}
				for c.LeaderFor("alerts", 0) == old {
					c.ShufflePartitionLeaders()
				}
			} else if err := c.MoveTopicPartition("alerts", 0, (old+1)%3); err != nil {
				t.Fatal(err)
			}
			write("after")
			recs := consume(t, c, "alerts", 2)
			if string(recs[0].Value) != "before" || string(recs[1].Value) != "after" {
				t.Errorf("read %s, %s; want before, after", recs[0].Value, recs[1].Value)
			}
		})
	}
}

// A partition's messages beyond MaxBatchBytes go in further requests, in
// order, none of whose record batch exceeds MaxBatchBytes (the size
// estimate is an upper bound), and a write larger than the broker's
// max.message.bytes (1 MiB in kfake) goes through.
func TestWriteMessagesSplitsLargeBatches(t *testing.T) {
	for _, limit := range []int{0, 10_000} {
		t.Run(fmt.Sprint("MaxBatchBytes=", limit), func(t *testing.T) {
			c := newCluster(t, map[string]int32{"alerts": 1})
			var requests, largest atomic.Int64
			c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				for _, rt := range req.(*kmsg.ProduceRequest).Topics {
					for _, rp := range rt.Partitions {
						requests.Add(1)
						if n := int64(len(rp.Records)); n > largest.Load() {
							largest.Store(n)
						}
					}
				}
				return nil, nil, false
			})
			tr := &kafka.Transport{}
			defer tr.CloseIdleConnections()
			p, err := New(Config{Addr: kafka.TCP(c.ListenAddrs()...), Transport: tr, Backoff: fastRetries, MaxBatchBytes: limit})
			if err != nil {
				t.Fatal(err)
			}
			var msgs []kafka.Message
			total := 0
			for i := range 3000 {
				m := kafka.Message{Topic: "alerts", Key: fmt.Appendf(nil, "key-%d", i), Value: bytes.Repeat([]byte{'x'}, 200+i%800),
					Time: time.UnixMilli(int64(i) * 1_000_000)}
				if i%3 == 0 {
					m.Headers = []kafka.Header{{Key: "h", Value: fmt.Appendf(nil, "%d", i)}}
				}
				total += len(m.Value)
				msgs = append(msgs, m)
			}
			if err := p.WriteMessages(context.Background(), msgs...); err != nil {
				t.Fatal(err)
			}
			max := p.batchBytes
			if got := largest.Load(); got > int64(max) {
				t.Errorf("a record batch of %d bytes, more than MaxBatchBytes %d", got, max)
			}
			if min := int64(total / max); requests.Load() <= min {
				t.Errorf("%d requests for %d value bytes, want more than %d", requests.Load(), total, min)
			}
			recs := consume(t, c, "alerts", len(msgs))
			for i, r := range recs {
				if !bytes.Equal(r.Key, msgs[i].Key) {
					t.Fatalf("record %d: key %s, want %s", i, r.Key, msgs[i].Key)
				}
			}
		})
	}
}

// A broker whose max.message.bytes is 2,000: one message of a partition is
// larger. WriteMessages writes every other message, in order, and returns
// a *RejectedError naming only that one, with or without TopicMaxBytes
// (without it the partition's batch is refused whole and sent again
// in halves; with it no batch exceeds the limit).
func TestWriteMessagesRejectsOnlyTheRecordsTooLarge(t *testing.T) {
	for _, topicMax := range []int{0, 2000} {
		t.Run(fmt.Sprint("TopicMaxBytes=", topicMax), func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "alerts"),
				kfake.BrokerConfigs(map[string]string{"message.max.bytes": "2000"}))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var oversized, requests atomic.Int64 // record batches sent larger than the limit, and in all
			c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				for _, rt := range req.(*kmsg.ProduceRequest).Topics {
					for _, rp := range rt.Partitions {
						requests.Add(1)
						if len(rp.Records) > 2000 {
							oversized.Add(1)
						}
					}
				}
				return nil, nil, false
			})
			tr := &kafka.Transport{}
			defer tr.CloseIdleConnections()
			cfg := Config{Addr: kafka.TCP(c.ListenAddrs()...), Transport: tr, Backoff: fastRetries}
			if topicMax > 0 {
				cfg.TopicMaxBytes = map[string]int{"alerts": topicMax}
			}
			p, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			k0, k1 := keysFor(0, 2, 20), keysFor(1, 2, 20)
			var msgs []kafka.Message
			big := -1
			for i := range 20 {
				msgs = append(msgs, kafka.Message{Topic: "alerts", Key: k0[i], Value: fmt.Appendf(bytes.Repeat([]byte{'a'}, 100), "%d", i)})
				if i == 7 {
					big = len(msgs)
					msgs = append(msgs, kafka.Message{Topic: "alerts", Key: k0[i], Value: bytes.Repeat([]byte{'B'}, 3000)})
				}
				msgs = append(msgs, kafka.Message{Topic: "alerts", Key: k1[i], Value: fmt.Appendf(bytes.Repeat([]byte{'b'}, 100), "%d", i)})
			}
			if RecordBatchBytes(&msgs[big]) <= 2000 || RecordBatchBytes(&msgs[0]) > 2000 {
				t.Fatal("RecordBatchBytes does not tell the large message from the others")
			}
			err = p.WriteMessages(context.Background(), msgs...)
			var rej *RejectedError
			if !errors.As(err, &rej) {
				t.Fatalf("err = %v, want a *RejectedError", err)
			}
			if len(rej.Rejected) != 1 || rej.Rejected[0].Index != big || !errors.Is(rej.Rejected[0].Err, kafka.MessageSizeTooLarge) {
				t.Fatalf("rejected %+v, want only message %d with MESSAGE_TOO_LARGE", rej.Rejected, big)
			}
			if n := requests.Load(); n >= int64(len(msgs)) {
				t.Errorf("%d produce requests for %d messages: the refused batches were not split in halves", n, len(msgs))
			}
			if n := oversized.Load(); topicMax > 0 && n != 1 {
				t.Errorf("%d record batches over the topic's limit were sent, want 1 (the large message alone)", n)
			}
			if !errors.Is(err, kafka.MessageSizeTooLarge) || ConfigError(err) {
				t.Errorf("err %v: not MessageSizeTooLarge, or taken for a config error", err)
			}
			parts := byPartition(consume(t, c, "alerts", len(msgs)-1))
			for _, m := range slices.Delete(slices.Clone(msgs), big, big+1) {
				part := int32(murmur2.Partition(m.Key, 2))
				if len(parts[part]) == 0 {
					t.Fatalf("partition %d is missing records", part)
				}
				r := parts[part][0]
				parts[part] = parts[part][1:]
				if !bytes.Equal(r.Value, m.Value) {
					t.Fatalf("partition %d: record %q, want %q (in order)", part, r.Value, m.Value)
				}
			}
		})
	}
}

// Authorization and missing topics are config errors; refused records,
// leader changes and network errors are not.
func TestConfigError(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("writing: %w", kafka.TopicAuthorizationFailed), true},
		{fmt.Errorf("writing: %w", kafka.SASLAuthenticationFailed), true},
		{fmt.Errorf("produce: topic does not exist: %w", kafka.UnknownTopicOrPartition), true},
		{fmt.Errorf("writing: %w", kafka.MessageSizeTooLarge), false},
		{fmt.Errorf("writing: %w", kafka.InvalidRecord), false},
		{fmt.Errorf("writing: %w", kafka.NotLeaderForPartition), false},
		{fmt.Errorf("writing: %w", kafka.RequestTimedOut), false},
		{errors.New("dial tcp: connection refused"), false},
	} {
		if got := ConfigError(tt.err); got != tt.want {
			t.Errorf("ConfigError(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
