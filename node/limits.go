package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/joiner-dev/joiner/join"
	"github.com/joiner-dev/joiner/record"
	"github.com/segmentio/kafka-go"
)

// OutputMaxBytes reads the max.message.bytes of the output topics (alerts
// and dead letters) with DescribeConfigs: the largest record batch each
// accepts, which the producer keeps its batches within and the worker
// checks every alert and dead letter against before it is sent (see
// join.Config.MaxMessageBytes). A topic whose config cannot be read takes
// the broker's message.max.bytes (the topic default), else
// join.DefaultMaxMessageBytes; a WARN says so. A limit that is still
// wrong is caught at produce time: the broker refuses the record
// (MESSAGE_TOO_LARGE), and only that record is dead-lettered or truncated.
func OutputMaxBytes(ctx context.Context, c *kafka.Client, t record.Topics, log *slog.Logger) map[string]int {
	t = t.WithDefaults()
	out := map[string]int{}
	topics := []string{t.Alerts, t.DeadLetter}
	var failed []string
	var why error
	res, err := describe(ctx, c, kafka.ResourceTypeTopic, topics, "max.message.bytes")
	for _, topic := range topics {
		n, ok := res[topic]
		if ok && n > 0 {
			out[topic] = n
			continue
		}
		failed = append(failed, topic)
		why = errors.Join(why, err)
	}
	if len(failed) == 0 {
		return out
	}
	fallback, source := join.DefaultMaxMessageBytes, "default"
	if md, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{}}); err == nil {
		id := strconv.Itoa(md.Controller.ID)
		if b, err := describe(ctx, c, kafka.ResourceTypeBroker, []string{id}, "message.max.bytes"); err == nil && b[id] > 0 {
			fallback, source = b[id], "broker message.max.bytes"
		}
	}
	for _, topic := range failed {
		out[topic] = fallback
	}
	log.Warn("cannot read the max.message.bytes of output topics; assuming a limit", "topics", failed, "max_message_bytes", fallback, "from", source, "err", why)
	return out
}

// describe reads the integer config name of resources, by resource name;
// a resource with an error or without the config is absent.
func describe(ctx context.Context, c *kafka.Client, typ kafka.ResourceType, names []string, name string) (map[string]int, error) {
	req := &kafka.DescribeConfigsRequest{}
	for _, n := range names {
		req.Resources = append(req.Resources, kafka.DescribeConfigRequestResource{ResourceType: typ, ResourceName: n, ConfigNames: []string{name}})
	}
	res, err := c.DescribeConfigs(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("describing the configs of %v: %w", names, err)
	}
	out := map[string]int{}
	var errs []error
	for _, r := range res.Resources {
		if r.Error != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r.ResourceName, r.Error))
			continue
		}
		for _, e := range r.ConfigEntries {
			if e.ConfigName != name {
				continue
			}
			if n, err := strconv.Atoi(e.ConfigValue); err == nil {
				out[r.ResourceName] = n
			} else {
				errs = append(errs, fmt.Errorf("%s: %s=%q: %w", r.ResourceName, name, e.ConfigValue, err))
			}
		}
	}
	return out, errors.Join(errs...)
}
