package produce

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/internal/backoff"
	"github.com/joiner-dev/joiner/murmur2"
	"github.com/joiner-dev/joiner/testsupport/testkit/realkafka"
	"github.com/segmentio/kafka-go"
)

// TestRefreshRealBroker: on a real Kafka, the producer's forced refresh (a
// validate-only CreateTopics for an invalid topic) makes the Transport
// reload its metadata at once and creates nothing. The Transport's own
// timer is set to an hour, so a topic created after the Transport cached
// the cluster is found only through the refresh.
func TestRefreshRealBroker(t *testing.T) {
	addrs := realkafka.Brokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := &kafka.Client{Addr: kafka.TCP(addrs...), Timeout: 30 * time.Second, Transport: &kafka.Transport{}}
	create := func(topic string) {
		t.Helper()
		res, err := admin.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{Topic: topic, NumPartitions: 3, ReplicationFactor: 1}}})
		if err == nil {
			err = res.Errors[topic]
		}
		if err != nil {
			t.Fatalf("creating %s: %v", topic, err)
		}
	}
	prefix := fmt.Sprintf("produce-refresh-%d", time.Now().UnixNano())
	create(prefix + "-a")

	tr := &kafka.Transport{MetadataTTL: time.Hour}
	defer tr.CloseIdleConnections()
	// Attempts for a new topic's first moments, when its broker may still
	// answer NOT_LEADER_OR_FOLLOWER.
	p, err := New(Config{Addr: kafka.TCP(addrs...), Transport: tr, Attempts: 10, Backoff: backoff.Policy{Min: 10 * time.Millisecond, Max: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	write := func(topic string) time.Duration {
		t.Helper()
		start := time.Now()
		if err := p.WriteMessages(ctx, kafka.Message{Topic: topic, Key: []byte("k"), Value: []byte("v")}); err != nil {
			t.Fatalf("writing to %s: %v", topic, err)
		}
		return time.Since(start)
	}
	write(prefix + "-a") // the Transport caches the cluster now
	create(prefix + "-b")
	if d := write(prefix + "-b"); d > 5*time.Second {
		t.Errorf("writing to a topic the Transport did not know took %v: the refresh waited", d)
	}
	if p.refreshGen.Load() == 0 {
		t.Error("the write to the new topic did not refresh the Transport's metadata")
	}
	md, err := admin.Metadata(ctx, &kafka.MetadataRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, topic := range md.Topics {
		if topic.Name == refreshTopic {
			t.Errorf("the refresh created topic %s", refreshTopic)
		}
	}
}

// cpuTime is the user and system CPU time of this process.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkWriteRealBroker compares kafka.Writer, configured as node.New
// configured it before this package, with Producer, on a real Kafka: calls
// of 1,000 alert-sized messages whose keys all land on one partition, as
// a joiner task writes them. ns/op and allocs/op are per call, cpu-ns/msg
// is the process's CPU time (user and system) per message.
//
//	JOINER_KAFKA_BROKERS=127.0.0.1:9092 go test -run '^$' -bench WriteRealBroker -benchmem ./produce/
func BenchmarkWriteRealBroker(b *testing.B) {
	addrs := realkafka.Brokers(b)
	ctx := context.Background()
	topic := fmt.Sprintf("produce-bench-%d", time.Now().UnixNano())
	admin := &kafka.Client{Addr: kafka.TCP(addrs...), Timeout: 30 * time.Second}
	if res, err := admin.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{Topic: topic, NumPartitions: 6, ReplicationFactor: 1}}}); err != nil || res.Errors[topic] != nil {
		b.Fatalf("creating %s: %v %v", topic, err, res)
	}
	keys := keysFor(0, 6, 100)
	msgs := make([]kafka.Message, 1000)
	for i := range msgs {
		msgs[i] = kafka.Message{Topic: topic, Key: keys[i%len(keys)], Value: []byte(strings.Repeat("x", 150)), Time: time.Now()}
	}
	for _, w := range []struct {
		name string
		new  func() (interface {
			WriteMessages(context.Context, ...kafka.Message) error
			Close() error
		}, error)
	}{
		{"kafka.Writer", func() (interface {
			WriteMessages(context.Context, ...kafka.Message) error
			Close() error
		}, error) {
			return &kafka.Writer{Addr: kafka.TCP(addrs...), Balancer: &murmur2.Balancer{}, RequiredAcks: kafka.RequireAll,
				BatchSize: 1000, BatchBytes: 8 << 20, BatchTimeout: 2 * time.Millisecond}, nil
		}},
		{"Producer", func() (interface {
			WriteMessages(context.Context, ...kafka.Message) error
			Close() error
		}, error) {
			return New(Config{Addr: kafka.TCP(addrs...)})
		}},
	} {
		b.Run(w.name, func(b *testing.B) {
			wr, err := w.new()
			if err != nil {
				b.Fatal(err)
			}
			defer wr.Close()
			if err := wr.WriteMessages(ctx, msgs...); err != nil { // warm up
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime()
			for range b.N {
				if err := wr.WriteMessages(ctx, msgs...); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N*len(msgs)), "cpu-ns/msg")
		})
	}
}
