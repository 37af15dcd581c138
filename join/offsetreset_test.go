package join

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/record"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Row "OffsetOutOfRange on a fetch": counted per topic and logged at WARN
// with the old and the new offset, then the reader goes on from the first
// offset the log holds.
func TestOffsetOutOfRangeIsCountedAndLogged(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "notifications"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	client := &kafka.Client{Addr: kafka.TCP(c.ListenAddrs()...), Timeout: 5 * time.Second}
	ctx := context.Background()
	if _, err := client.Produce(ctx, &kafka.ProduceRequest{Topic: "notifications", Partition: 0, RequiredAcks: kafka.RequireAll,
		Records: kafka.NewRecordReader(kafka.Record{Value: kafka.NewBytes([]byte("a"))}, kafka.Record{Value: kafka.NewBytes([]byte("b"))})}); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	w := &Processor{cfg: Config{Client: client, Topics: record.Topics{}.WithDefaults()}}
	w.client, w.topics, w.limits.FetchMaxWait = client, w.cfg.Topics, 50*time.Millisecond
	w.log = slog.New(slog.NewTextHandler(&logs, nil))
	reg := prometheus.NewRegistry()
	w.registerOffsetResets(reg)

	r := w.reader("notifications", 0, 1000)
	if _, err := r.Fetch(ctx); err != nil {
		t.Fatal(err)
	}
	if r.Next != 0 {
		t.Errorf("reader at %d after the reset, want the first offset 0", r.Next)
	}
	m, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got float64 = -1
	for _, mf := range m {
		if mf.GetName() == "joiner_offset_resets_total" {
			for _, s := range mf.GetMetric() {
				if s.GetLabel()[0].GetValue() == "notifications" {
					got = s.GetCounter().GetValue()
				}
			}
		}
	}
	if got != 1 {
		t.Errorf("joiner_offset_resets_total{topic=notifications} = %v, want 1", got)
	}
	for _, want := range []string{"level=WARN", "offset=1000", "first_offset=0", "topic=notifications"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
}
