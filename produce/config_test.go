package produce

import (
	"strings"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/internal/backoff"
	"github.com/segmentio/kafka-go"
)

// A zero Config takes the exported defaults; set fields are kept; no
// Addr is refused by Validate and New.
func TestConfigDefaults(t *testing.T) {
	got := Config{}.withDefaults()
	want := Config{
		Timeout: DefaultTimeout, Attempts: DefaultAttempts, MaxBatchBytes: DefaultMaxBatchBytes,
		Backoff:            backoff.Policy{Min: DefaultBackoffMin, Max: DefaultBackoffMax},
		TransactionTimeout: DefaultTransactionTimeout,
	}
	if got.Timeout != want.Timeout || got.Attempts != want.Attempts || got.MaxBatchBytes != want.MaxBatchBytes ||
		got.Backoff != want.Backoff || got.TransactionTimeout != want.TransactionTimeout {
		t.Errorf("Config{}.withDefaults() = %+v, want %+v", got, want)
	}
	set := Config{Timeout: time.Second, Attempts: 3, MaxBatchBytes: 1000, Backoff: backoff.Policy{Min: time.Millisecond, Max: time.Millisecond}, TransactionTimeout: time.Minute}
	if got := set.withDefaults(); got.Timeout != set.Timeout || got.Attempts != set.Attempts || got.MaxBatchBytes != set.MaxBatchBytes ||
		got.Backoff != set.Backoff || got.TransactionTimeout != set.TransactionTimeout {
		t.Errorf("withDefaults changed set fields: %+v, want %+v", got, set)
	}
	if err := (Config{}).Validate(); err == nil || !strings.Contains(err.Error(), "Config.Addr is required") {
		t.Errorf("Config{}.Validate() = %v, want Addr required", err)
	}
	if _, err := New(Config{}); err == nil {
		t.Error("New(Config{}) succeeded without an Addr")
	}
	p, err := New(Config{Addr: kafka.TCP("127.0.0.1:1")})
	if err != nil {
		t.Fatal(err)
	}
	if p.attempts != DefaultAttempts || p.batchBytes != DefaultMaxBatchBytes || p.client.Timeout != DefaultTimeout {
		t.Errorf("New(zero Config) has attempts %d, batch bytes %d, timeout %v; want the defaults", p.attempts, p.batchBytes, p.client.Timeout)
	}
}
