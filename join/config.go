package join

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/joiner-dev/joiner/record"
	"github.com/segmentio/kafka-go"
)

// The defaults of Config's zero fields, applied by withDefaults; the
// CLI's flags default to them. DefaultBulkRestoreMin is in restore_load.go and
// record.DefaultMaxRecordBytes is MaxRecordBytes'.
const (
	DefaultMaxTaskIdle      = time.Second
	DefaultCommitInterval   = time.Second
	DefaultFetchMaxWait     = 250 * time.Millisecond
	DefaultRemoteTimeout    = 5 * time.Second
	DefaultStallTimeout     = time.Minute
	DefaultHistoryRetention = time.Hour
	// DefaultStartOffset is StartOffset's: a notifications partition with
	// no committed offset starts at its earliest record.
	DefaultStartOffset = StartEarliest
)

// BulkRestoreNever is the Config.BulkRestoreMin that turns bulk-loaded
// restores off (any negative value does): zero is the default, as in
// every Config field, so "never" needs a value of its own.
const BulkRestoreNever int64 = -1

func isKafkaWriterWithTopic(w Writer) bool {
	kw, ok := w.(*kafka.Writer)
	return ok && kw.Topic != ""
}

// Validate reports the first problem of c: a required field left empty,
// a *kafka.Writer with a Topic, or an unknown StartOffset. NewWorker calls
// it; zero values of the other fields take their defaults.
func (c *Config) Validate() error {
	switch {
	case c.Client == nil:
		return errors.New("join: Config.Client is required")
	case c.Writer == nil:
		return errors.New("join: Config.Writer is required")
	case isKafkaWriterWithTopic(c.Writer):
		return errors.New("join: Config.Writer.Topic must be empty: alerts and dead letters go to different topics")
	case c.Stores == nil:
		return errors.New("join: Config.Stores is required")
	case c.InstanceID == "":
		return errors.New("join: Config.InstanceID is required")
	case c.Grace < 0:
		return fmt.Errorf("join: Config.Grace is %v; want 0 (none) or a positive duration", c.Grace)
	}
	return validStartOffset(c.StartOffset)
}

// withDefaults returns c with every zero field set to the default its
// doc comment names: the one place join's defaults are applied.
func (c Config) withDefaults() Config {
	c.Topics = c.Topics.WithDefaults()
	c.Fields = c.Fields.WithDefaults()
	defDur := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	defDur(&c.MaxTaskIdle, DefaultMaxTaskIdle)
	defDur(&c.CommitInterval, DefaultCommitInterval)
	defDur(&c.FetchMaxWait, DefaultFetchMaxWait)
	defDur(&c.RemoteTimeout, DefaultRemoteTimeout)
	defDur(&c.HistoryRetention, DefaultHistoryRetention)
	defDur(&c.StallTimeout, DefaultStallTimeout)
	defDur(&c.PartitionCheckInterval, DefaultPartitionCheckInterval)
	if c.BulkRestoreMin == 0 {
		c.BulkRestoreMin = DefaultBulkRestoreMin
	}
	if c.StartOffset == "" {
		c.StartOffset = DefaultStartOffset
	}
	if c.MaxRecordBytes <= 0 {
		c.MaxRecordBytes = record.DefaultMaxRecordBytes
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: time.Minute}}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}
