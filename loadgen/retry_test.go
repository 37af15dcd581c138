package loadgen

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/murmur2"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// failProduce makes the broker answer the next n produce requests (all of
// them when n < 0) with REQUEST_TIMED_OUT for every partition.
func failProduce(c *kfake.Cluster, n int64) *atomic.Int64 {
	var failed atomic.Int64
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if n >= 0 && failed.Load() >= n {
			return nil, nil, false
		}
		failed.Add(1)
		r := req.(*kmsg.ProduceRequest)
		resp := r.ResponseKind().(*kmsg.ProduceResponse)
		for _, t := range r.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition = p.Partition
				rp.ErrorCode = 7 // REQUEST_TIMED_OUT, retriable
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
	return &failed
}

// oneShotWriter gives up after one attempt, so the run's own retries are
// what the test sees.
func oneShotWriter(addrs []string) *kafka.Writer {
	return &kafka.Writer{Addr: kafka.TCP(addrs...), Balancer: &murmur2.Balancer{}, RequiredAcks: kafka.RequireAll,
		MaxAttempts: 1, BatchTimeout: time.Millisecond}
}

// Produce errors during an outage are retried: the run finishes, every
// record is in Kafka, and the summary says how many were retried.
func TestRunRetriesProduceErrors(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "market", "notifications"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	failed := failProduce(c, 4)
	w := oneShotWriter(c.ListenAddrs())
	defer w.Close()
	var progress bytes.Buffer
	sum, err := Run(context.Background(), Config{Writer: w, Symbols: 10, TicksPerSymbol: 2, NotificationsPerSymbol: 3,
		RetryTimeout: 30 * time.Second, Progress: &progress})
	if err != nil {
		t.Fatalf("run failed despite retries: %v\n%s", err, progress.String())
	}
	if failed.Load() != 4 {
		t.Fatalf("broker failed %d produce requests, want 4", failed.Load())
	}
	if sum.Retried == 0 {
		t.Errorf("Retried = 0 after 4 failed produce requests")
	}
	if !strings.Contains(progress.String(), "records retried") {
		t.Errorf("summary does not report retries:\n%s", progress.String())
	}
	client := &kafka.Client{Addr: kafka.TCP(c.ListenAddrs()...), Timeout: 5 * time.Second}
	for topic, want := range map[string]int64{"market": 20, "notifications": 30} {
		var got int64
		for p := range 3 {
			res, err := client.ListOffsets(context.Background(), &kafka.ListOffsetsRequest{
				Topics: map[string][]kafka.OffsetRequest{topic: {kafka.LastOffsetOf(p)}}})
			if err != nil {
				t.Fatal(err)
			}
			got += res.Topics[topic][0].LastOffset
		}
		if got < want {
			t.Errorf("%s holds %d records, want at least %d", topic, got, want)
		}
	}
}

// When Kafka never accepts, the run gives up after RetryTimeout with one
// line that names each distinct error once, with a count.
func TestRunGivesUpWithOneConciseError(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "market", "notifications"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	failProduce(c, -1)
	w := oneShotWriter(c.ListenAddrs())
	defer w.Close()
	start := time.Now()
	_, err = Run(context.Background(), Config{Writer: w, Symbols: 50, TicksPerSymbol: 1, RetryTimeout: time.Second})
	if err == nil {
		t.Fatal("run succeeded against a broker that rejects every write")
	}
	if d := time.Since(start); d < time.Second || d > 15*time.Second {
		t.Errorf("gave up after %s, want about the 1s retry timeout", d)
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") {
		t.Errorf("error spans several lines:\n%s", msg)
	}
	if n := strings.Count(msg, "Request Timed Out"); n != 1 {
		t.Errorf("the error names the same cause %d times, want once: %s", n, msg)
	}
	if !strings.Contains(msg, "× ") || !strings.Contains(msg, "RetryTimeout") {
		t.Errorf("error %q lacks a count or the flag to raise", msg)
	}
	if len(msg) > 600 {
		t.Errorf("error is %d bytes, want a concise line: %s", len(msg), msg)
	}
}

// A run stopped while it retries says why its writes were failing: the
// error is the context's and names the last write's cause, and the run
// stops at once instead of sleeping out the retry timeout.
func TestRunStoppedWhileRetryingNamesTheLastCause(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "market", "notifications"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	failed := failProduce(c, -1)
	w := oneShotWriter(c.ListenAddrs())
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for failed.Load() < 3 {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(30 * time.Millisecond) // into the third wait, 200-400ms
		cancel()
	}()
	start := time.Now()
	_, err = Run(ctx, Config{Writer: w, Symbols: 50, TicksPerSymbol: 1, RetryTimeout: time.Minute})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if !strings.Contains(err.Error(), "Request Timed Out") {
		t.Errorf("error %q does not name the failing writes' cause", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("stopped after %s, want soon after the cancel", d)
	}
}
