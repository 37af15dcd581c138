package join

import (
	"strings"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/record"
	"github.com/joiner-dev/joiner/statestore"
	"github.com/segmentio/kafka-go"
)

func TestConfigValidate(t *testing.T) {
	valid := Config{Client: newFakeFetcher(), Writer: &fakeWriter{}, Stores: &statestore.Manager{}, InstanceID: "w"}
	for _, c := range []struct {
		name string
		edit func(*Config)
		want string // in the error; "" for none
	}{
		{"valid", func(*Config) {}, ""},
		{"latest", func(c *Config) { c.StartOffset = StartLatest }, ""},
		{"no client", func(c *Config) { c.Client = nil }, "Config.Client is required"},
		{"no writer", func(c *Config) { c.Writer = nil }, "Config.Writer is required"},
		{"writer with a topic", func(c *Config) { c.Writer = &kafka.Writer{Topic: "alerts"} }, "Config.Writer.Topic must be empty"},
		{"kafka writer without a topic", func(c *Config) { c.Writer = &kafka.Writer{} }, ""},
		{"no stores", func(c *Config) { c.Stores = nil }, "Config.Stores is required"},
		{"no instance", func(c *Config) { c.InstanceID = "" }, "Config.InstanceID is required"},
		{"bad start offset", func(c *Config) { c.StartOffset = "newest" }, `Config.StartOffset "newest"`},
	} {
		cfg := valid
		c.edit(&cfg)
		err := cfg.Validate()
		if (err == nil) != (c.want == "") || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: Validate() = %v, want %q", c.name, err, c.want)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	got := Config{Topics: record.Topics{Alerts: "out"}, FetchMaxWait: time.Millisecond}.withDefaults()
	if got.Topics != (record.Topics{Alerts: "out"}.WithDefaults()) || got.FetchMaxWait != time.Millisecond ||
		got.MaxTaskIdle != time.Second || got.CommitInterval != time.Second || got.RemoteTimeout != 5*time.Second ||
		got.HistoryRetention != time.Hour || got.MaxRecordBytes != record.DefaultMaxRecordBytes || got.HTTPClient == nil || got.Logger == nil ||
		got.BulkRestoreMin != DefaultBulkRestoreMin {
		t.Fatalf("withDefaults = %+v", got)
	}
	if got := (Config{BulkRestoreMin: -1}).withDefaults().BulkRestoreMin; got != -1 {
		t.Fatalf("withDefaults of BulkRestoreMin -1 (never) = %d", got)
	}
}
