// Package buildinfo says which joiner this is: the version and commit
// scripts/build stamps in with -ldflags -X, else what the Go toolchain
// recorded in the binary (debug.ReadBuildInfo: the module version and the
// vcs.* settings of a build inside a git checkout).
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"sync"
)

// Version and Revision are set by scripts/build:
//
//	-ldflags "-X github.com/joiner-dev/joiner/internal/buildinfo.Version=0.1.0
//	          -X github.com/joiner-dev/joiner/internal/buildinfo.Revision=<commit>"
//
// Empty means not stamped: Get falls back to the binary's build info.
var (
	Version  string
	Revision string
)

// Info describes the running binary.
type Info struct {
	// Version is the release (the VERSION file at build time), the module
	// version of a `go install ...@v` build, or "devel".
	Version string
	// Revision is the git commit, with "-dirty" when the tree had
	// uncommitted changes; "unknown" when nothing recorded it.
	Revision string
	// GoVersion is the toolchain that built the binary.
	GoVersion string
}

var (
	once sync.Once
	info Info
)

// Get returns the binary's Info.
func Get() Info {
	once.Do(func() {
		bi, _ := debug.ReadBuildInfo()
		info = resolve(Version, Revision, bi)
	})
	return info
}

// resolve prefers the stamped values, then bi's, then "devel"/"unknown".
func resolve(version, revision string, bi *debug.BuildInfo) Info {
	in := Info{Version: version, Revision: revision, GoVersion: runtime.Version()}
	if bi != nil {
		if bi.GoVersion != "" {
			in.GoVersion = bi.GoVersion
		}
		if in.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			in.Version = bi.Main.Version
		}
		if in.Revision == "" {
			var rev string
			var dirty bool
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					rev = s.Value
				case "vcs.modified":
					dirty = s.Value == "true"
				}
			}
			if rev != "" && dirty {
				rev += "-dirty"
			}
			in.Revision = rev
		}
	}
	if in.Version == "" {
		in.Version = "devel"
	}
	if in.Revision == "" {
		in.Revision = "unknown"
	}
	return in
}
