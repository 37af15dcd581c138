package fetch

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// logClient is a Client over one in-memory partition log starting at
// offset first; fail makes the next fetches fail.
type logClient struct {
	first int64
	vals  []string
	fail  int
	calls int
}

func (c *logClient) Fetch(_ context.Context, req *kafka.FetchRequest) (*kafka.FetchResponse, error) {
	c.calls++
	if c.fail > 0 {
		c.fail--
		return nil, errors.New("broken pipe")
	}
	end := c.first + int64(len(c.vals))
	res := &kafka.FetchResponse{Topic: req.Topic, Partition: req.Partition, HighWatermark: end}
	if req.Offset < c.first || req.Offset > end {
		res.Error = kafka.OffsetOutOfRange
		res.Records = kafka.NewRecordReader()
		return res, nil
	}
	var recs []kafka.Record
	for o := req.Offset; o < end; o++ {
		recs = append(recs, kafka.Record{Offset: o, Value: kafka.NewBytes([]byte(c.vals[o-c.first]))})
	}
	res.Records = kafka.NewRecordReader(recs...)
	return res, nil
}

func (c *logClient) ListOffsets(_ context.Context, req *kafka.ListOffsetsRequest) (*kafka.ListOffsetsResponse, error) {
	out := &kafka.ListOffsetsResponse{Topics: map[string][]kafka.PartitionOffsets{}}
	for t, ps := range req.Topics {
		for _, p := range ps {
			out.Topics[t] = append(out.Topics[t], kafka.PartitionOffsets{Partition: p.Partition, FirstOffset: c.first, LastOffset: c.first + int64(len(c.vals))})
		}
	}
	return out, nil
}

// TestReaderOffsetReset: a fetch answered OFFSET_OUT_OF_RANGE tells the
// reader's callback the old and the new offset and goes on from the first
// offset the log holds.
func TestReaderOffsetReset(t *testing.T) {
	c := &logClient{first: 5, vals: []string{"a", "b"}}
	var from, to int64 = -1, -1
	r := NewReader(c, "t", 3, 1, time.Millisecond, func(topic string, p int, f, tt int64) {
		if topic != "t" || p != 3 {
			t.Errorf("reset of %s-%d; want t-3", topic, p)
		}
		from, to = f, tt
	})
	recs, err := r.Fetch(context.Background())
	if err != nil || len(recs) != 0 {
		t.Fatalf("fetch: %d records, %v; want none and no error", len(recs), err)
	}
	if from != 1 || to != 5 || r.Next != 5 {
		t.Fatalf("reset from %d to %d, reader at %d; want 1, 5 and 5", from, to, r.Next)
	}
	recs, err = r.Fetch(context.Background())
	if err != nil || len(recs) != 2 || string(recs[0].Value) != "a" || string(recs[1].Value) != "b" || r.Next != 7 || r.HWM != 7 {
		t.Fatalf("fetch after the reset: %v, %v, next %d, hwm %d; want a and b, next and hwm 7", recs, err, r.Next, r.HWM)
	}
}

// TestReaderFetchRetrying: failures are handed to onErr and retried until
// a fetch succeeds; a done context ends the retries with its error.
func TestReaderFetchRetrying(t *testing.T) {
	c := &logClient{vals: []string{"x"}, fail: 2}
	r := NewReader(c, "t", 0, 0, time.Millisecond, nil)
	var errs int
	recs, sent, err := r.FetchRetrying(context.Background(), func(error) { errs++ })
	if err != nil || len(recs) != 1 || string(recs[0].Value) != "x" || sent.IsZero() {
		t.Fatalf("FetchRetrying: %v, %v, sent %v; want x", recs, err, sent)
	}
	if errs != 2 || c.calls != 3 {
		t.Fatalf("%d errors reported in %d calls; want 2 in 3", errs, c.calls)
	}
	c.fail = 1 << 30
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := r.FetchRetrying(ctx, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("FetchRetrying on a dead broker: %v; want the context's deadline", err)
	}
}
