package loadgen

import (
	"context"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/joiner-dev/joiner/record"
)

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // in the error; "" for none
	}{
		{"brokers", Config{Brokers: []string{"b:9092"}}, ""},
		{"no brokers", Config{}, "no brokers given"},
		{"transactional, no brokers", Config{Transactional: true}, "a transactional run needs Brokers"},
		{"negative count", Config{Brokers: []string{"b"}, Malformed: -1}, "counts must not be negative"},
		{"NaN rate", Config{Brokers: []string{"b"}, Rate: math.NaN()}, "rate must be 0"},
		{"negative padding", Config{Brokers: []string{"b"}, NotificationBytes: -1}, "must not be negative"},
		{"abort without transactions", Config{Brokers: []string{"b"}, AbortEvery: 2}, "needs Transactional"},
	} {
		err := tc.cfg.Validate()
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v, want %q", tc.name, err, tc.want)
		}
		if tc.want != "" {
			if _, err := Run(context.Background(), tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: Run = %v, want %q", tc.name, err, tc.want)
			}
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	got := Config{}.withDefaults()
	if got.MarketTopic != record.DefaultMarketTopic || got.NotificationsTopic != record.DefaultNotificationsTopic ||
		got.Symbols != DefaultSymbols || got.Seed != DefaultSeed || got.Progress != io.Discard || got.RetryTimeout != DefaultRetryTimeout {
		t.Errorf("Config{}.withDefaults() = %+v", got)
	}
	if got := (Config{Symbols: 3, Seed: 7}).withDefaults(); got.Symbols != 3 || got.Seed != 7 {
		t.Errorf("withDefaults changed set fields: %+v", got)
	}
}
