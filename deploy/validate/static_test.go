package validate

import (
	"testing"
	"time"
)

// Static restarts (README "Static restarts"): the workers do not leave the
// group on SIGTERM, and the session timeout covers a pod restart, 30-45s.
func TestStaticRestartSettings(t *testing.T) {
	m := loadManifests(t)
	cm := m.config(t)
	_, c := m.worker(t)
	v, ok := setting(c, cm, "JOINER_SESSION_TIMEOUT")
	d, err := time.ParseDuration(v)
	if !ok || err != nil || d < 30*time.Second || d > 45*time.Second {
		t.Errorf("JOINER_SESSION_TIMEOUT = %q (set %v): want 30s to 45s, long enough for a pod restart", v, ok)
	}
	if v, ok := setting(c, cm, "JOINER_LEAVE_ON_SHUTDOWN"); ok && v != "false" {
		t.Errorf("JOINER_LEAVE_ON_SHUTDOWN = %q: the workers of a StatefulSet must not leave on SIGTERM (use joiner leave to scale down)", v)
	}
}
