package node

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/joiner-dev/joiner/record"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// OutputMaxBytes reads each output topic's max.message.bytes; a topic it
// cannot describe (here: it does not exist) takes the broker's
// message.max.bytes, with a WARN.
func TestOutputMaxBytes(t *testing.T) {
	client := startBroker(t, kfake.SeedTopics(1, "alerts"), kfake.BrokerConfigs(map[string]string{"message.max.bytes": "50000"}))
	ctx := context.Background()
	res, err := client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{Topic: "dl", NumPartitions: 1, ReplicationFactor: 1,
		ConfigEntries: []kafka.ConfigEntry{{ConfigName: "max.message.bytes", ConfigValue: "7000"}}}}})
	if err != nil || res.Errors["dl"] != nil {
		t.Fatalf("creating dl: %v %v", err, res.Errors)
	}
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	got := OutputMaxBytes(ctx, client, record.Topics{Alerts: "alerts", DeadLetter: "dl"}, log)
	if got["alerts"] != 1048588 || got["dl"] != 7000 {
		t.Errorf("limits %v, want alerts 1048588 (the topic default kfake describes) and dl 7000 (its own)", got)
	}
	if buf.Len() != 0 {
		t.Errorf("a WARN although every topic was described: %s", buf.String())
	}
	got = OutputMaxBytes(ctx, client, record.Topics{Alerts: "alerts", DeadLetter: "missing"}, log)
	if got["missing"] != 50000 || !strings.Contains(buf.String(), "broker message.max.bytes") {
		t.Errorf("limits %v and log %q, want the missing topic at the broker's 50000, with a WARN", got, buf.String())
	}
}
