package fetch

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/murmur2"
	"github.com/joiner-dev/joiner/produce"
	"github.com/segmentio/kafka-go"
)

// txnLog writes, to each of the partitions of a new topic on e, one
// committed transaction, one aborted transaction, a plain record, then a
// committed one: the log ends with a COMMIT marker, after which no data
// record follows. It returns the topic and each partition's end (the
// high watermark, markers included) and values, committed and all.
func txnLog(t *testing.T, e *txnEnv, partitions int) (topic string, end int64, committed, all func(p int) []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topic = fmt.Sprintf("fetch-markers-%d", time.Now().UnixNano())
	res, err := e.client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{Topic: topic, NumPartitions: partitions, ReplicationFactor: 1}}})
	if err == nil {
		err = res.Errors[topic]
	}
	if err != nil {
		t.Fatal(err)
	}
	tr := &kafka.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	p, err := produce.New(produce.Config{Addr: kafka.TCP(e.addrs...), Transport: tr, Attempts: 50, TransactionalID: topic + "-t"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.InitProducerID(ctx); err != nil {
		t.Fatal(err)
	}
	plain, err := produce.New(produce.Config{Addr: kafka.TCP(e.addrs...), Transport: tr, Attempts: 50})
	if err != nil {
		t.Fatal(err)
	}
	keys := make([][]byte, partitions) // a key of each partition
	for i, found := 0, 0; found < partitions; i++ {
		k := fmt.Appendf(nil, "k%d", i)
		if part := murmur2.Partition(k, partitions); keys[part] == nil {
			keys[part], found = k, found+1
		}
	}
	msgs := func(prefix string, n int) []kafka.Message {
		var out []kafka.Message
		for part := range partitions {
			for i := range n {
				out = append(out, kafka.Message{Topic: topic, Key: keys[part], Value: fmt.Appendf(nil, "p%d-%s%d", part, prefix, i)})
			}
		}
		return out
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(p.Begin())
	must(p.WriteMessages(ctx, msgs("c", 3)...))
	must(p.Commit(ctx))
	must(p.Begin())
	must(p.WriteMessages(ctx, msgs("a", 2)...))
	must(p.Abort(ctx))
	must(plain.WriteMessages(ctx, msgs("plain", 1)...))
	must(p.Begin())
	must(p.WriteMessages(ctx, msgs("d", 2)...))
	must(p.Commit(ctx))
	// 3+1 + 2+1 + 1 + 2+1: the last offset is a COMMIT marker.
	end = 11
	for part := range partitions {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			lso, err := e.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: {{Partition: part, Timestamp: kafka.LastOffset}}}, IsolationLevel: kafka.ReadCommitted})
			must(err)
			if lso.Topics[topic][0].LastOffset == end {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s-%d: last stable offset %d, want %d", topic, part, lso.Topics[topic][0].LastOffset, end)
			}
		}
	}
	committed = func(p int) []string {
		var out []string
		for _, v := range []string{"c0", "c1", "c2", "plain0", "d0", "d1"} {
			out = append(out, fmt.Sprintf("p%d-%s", p, v))
		}
		return out
	}
	all = func(p int) []string {
		var out []string
		for _, v := range []string{"c0", "c1", "c2", "a0", "a1", "plain0", "d0", "d1"} {
			out = append(out, fmt.Sprintf("p%d-%s", p, v))
		}
		return out
	}
	return topic, end, committed, all
}

// readToEnd reads topic-p with a Reader on c until its Next reaches end,
// or fails the test after 10 s: a reader that stops at the last data
// record (before a trailing marker) never gets there.
func readToEnd(t *testing.T, c Client, topic string, p int, end int64) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := NewReader(c, topic, p, 0, 50*time.Millisecond, nil)
	var got []string
	for r.Next < end {
		recs, err := r.Fetch(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s-%d: the reader is stuck at offset %d of %d (high watermark %d), read %q", topic, p, r.Next, end, r.HWM, got)
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, values(recs)...)
	}
	if r.Next != end || r.HWM != end {
		t.Errorf("%s-%d: next %d, high watermark %d; want both %d", topic, p, r.Next, r.HWM, end)
	}
	return got
}

// A read_uncommitted Reader, by one fetch a partition or through a Mux,
// reads past the transaction markers to the partition's end, a trailing
// COMMIT marker too, and reads every data record, those of the aborted
// transaction included (at-least-once reads read_uncommitted).
func TestReaderReachesEndPastMarkers(t *testing.T) { testReaderReachesEndPastMarkers(t, kfakeEnv(t)) }
func TestReaderReachesEndPastMarkersRealBroker(t *testing.T) {
	testReaderReachesEndPastMarkers(t, realEnv(t))
}

func testReaderReachesEndPastMarkers(t *testing.T, e *txnEnv) {
	const parts = 3
	topic, end, _, all := txnLog(t, e, parts)
	m := NewMux(e.client)
	defer m.Close()
	for _, c := range []struct {
		name   string
		client Client
	}{{"client", e.client}, {"mux", m}} {
		for p := range parts {
			if got := readToEnd(t, c.client, topic, p, end); !slices.Equal(got, all(p)) {
				t.Errorf("%s, %s-%d: %q, want %q", c.name, topic, p, got, all(p))
			}
		}
	}
}

// A read_committed Mux delivers none of an aborted transaction's records
// and no control record, and its readers' offsets still reach the end
// (the last stable offset), past the aborted batch and the markers.
func TestMuxReadCommitted(t *testing.T)           { testMuxReadCommitted(t, kfakeEnv(t)) }
func TestMuxReadCommittedRealBroker(t *testing.T) { testMuxReadCommitted(t, realEnv(t)) }

func testMuxReadCommitted(t *testing.T, e *txnEnv) {
	const parts = 3
	topic, end, committed, _ := txnLog(t, e, parts)
	m := NewCommittedMux(e.client)
	defer m.Close()
	for p := range parts {
		if got := readToEnd(t, m, topic, p, end); !slices.Equal(got, committed(p)) {
			t.Errorf("%s-%d: %q, want %q", topic, p, got, committed(p))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		last, err := ListOffset(ctx, m, topic, p, kafka.LastOffset)
		cancel()
		if err != nil || last != end {
			t.Errorf("%s-%d: end offset %d (%v), want %d", topic, p, last, err, end)
		}
	}
}
