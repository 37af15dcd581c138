package group

import (
	"strings"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/record"
)

func TestConfigValidate(t *testing.T) {
	ok := Config{Brokers: []string{"x:1"}, GroupID: "g", InstanceID: "i", Topics: record.Topics{Market: "m", Notifications: "n"}, Handler: &recorder{}}
	for _, tc := range []struct {
		name  string
		edit  func(*Config)
		field string // in the error; "" when valid
	}{
		{"zero values take defaults", func(*Config) {}, ""},
		{"every assignor", func(c *Config) { c.Assignor = AssignorRange }, ""},
		{"default heartbeat follows a short session", func(c *Config) { c.SessionTimeout = 2 * time.Second }, ""},
		{"heartbeat over a third of the default session", func(c *Config) { c.HeartbeatInterval = 4 * time.Second }, "HeartbeatInterval"},
		{"heartbeat over a third of the session", func(c *Config) { c.SessionTimeout, c.HeartbeatInterval = 2*time.Second, time.Second }, "HeartbeatInterval"},
		{"negative metadata check", func(c *Config) { c.MetadataCheckInterval = -1 }, "negative"},
		{"unknown assignor", func(c *Config) { c.Assignor = "sticky" }, "Config.Assignor"},
		{"no group", func(c *Config) { c.GroupID = "" }, "Config.GroupID"},
		{"empty topic", func(c *Config) { c.Topics.Notifications = "" }, "Config.Topics"},
		{"one topic twice", func(c *Config) { c.Topics.Notifications = c.Topics.Market }, "Config.Topics"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ok
			tc.edit(&cfg)
			err := cfg.Validate()
			switch {
			case tc.field == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tc.field != "" && (err == nil || !strings.Contains(err.Error(), tc.field)):
				t.Fatalf("Validate = %v, want an error naming %s", err, tc.field)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	d := Config{SessionTimeout: 900 * time.Millisecond}.withDefaults()
	if d.Assignor != DefaultAssignor() || d.RebalanceTimeout != DefaultRebalanceTimeout ||
		d.HeartbeatInterval != 300*time.Millisecond || d.MetadataCheckInterval != DefaultMetadataCheckInterval || d.Logger == nil {
		t.Errorf("defaults %+v", d)
	}
	if d := (Config{}).withDefaults(); d.SessionTimeout != DefaultSessionTimeout || d.HeartbeatInterval != DefaultHeartbeatInterval {
		t.Errorf("defaults %+v", d)
	}
}
