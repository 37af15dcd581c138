package node

import (
	"strings"
	"testing"

	"github.com/joiner-dev/joiner/record"
)

// withDefaults applies node's defaults and gives the shared fields to
// the embedded configs of the worker, the member and the stores;
// Validate names the missing required fields.
func TestConfigDefaults(t *testing.T) {
	c, err := Config{InstanceID: "w1"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	topics := record.Topics{}.WithDefaults()
	if c.Group != DefaultGroup || c.HTTPAddr != DefaultHTTPAddr || c.Logger == nil || c.Topics != topics {
		t.Errorf("withDefaults = group %q, http %q, topics %+v", c.Group, c.HTTPAddr, c.Topics)
	}
	if c.JoinConfig.InstanceID != "w1" || c.JoinConfig.Topics != topics || c.JoinConfig.Logger != c.Logger {
		t.Errorf("join config: instance %q, topics %+v", c.JoinConfig.InstanceID, c.JoinConfig.Topics)
	}
	if c.MemberConfig.GroupID != DefaultGroup || c.MemberConfig.InstanceID != "w1" || c.MemberConfig.Topics != topics || c.MemberConfig.Logger != c.Logger {
		t.Errorf("member config: group %q, instance %q, topics %+v", c.MemberConfig.GroupID, c.MemberConfig.InstanceID, c.MemberConfig.Topics)
	}
	if c.StoreOptions.Group != DefaultGroup || c.StoreOptions.InstanceID != "w1" {
		t.Errorf("store options: group %q, instance %q", c.StoreOptions.Group, c.StoreOptions.InstanceID)
	}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{StoreOptions: StoreOptions{Dirs: []string{"d"}}}, "set Brokers"},
		{Config{Brokers: []string{"b"}}, "set Dirs"},
	} {
		if err := tc.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate() = %v, want %q", err, tc.want)
		}
	}
}
