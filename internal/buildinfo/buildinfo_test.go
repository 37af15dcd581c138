package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestResolve(t *testing.T) {
	vcs := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"},
	}}
	for _, tc := range []struct {
		name              string
		version, revision string
		bi                *debug.BuildInfo
		want              Info
	}{
		{"stamped wins", "0.1.0", "f00d", vcs, Info{"0.1.0", "f00d", "go1.26.0"}},
		{"vcs settings", "", "", vcs, Info{"devel", "abc123-dirty", "go1.26.0"}},
		{"go install at a version", "", "", &debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "v0.2.0"}},
			Info{"v0.2.0", "unknown", "go1.26.1"}},
	} {
		if got := resolve(tc.version, tc.revision, tc.bi); got != tc.want {
			t.Errorf("%s: resolve = %+v, want %+v", tc.name, got, tc.want)
		}
	}
	if got := resolve("", "", nil); got.Version != "devel" || got.Revision != "unknown" || got.GoVersion == "" {
		t.Errorf("no build info: %+v", got)
	}
}
