package main

import (
	"runtime/debug"
	"testing"
)

// --version says the module version and the VCS revision from the build
// information, and why there is none when the build recorded nothing.
func TestFormatVersion(t *testing.T) {
	rev := []debug.BuildSetting{{Key: "vcs.revision", Value: "55ff8290a1b2c3d4e5f6"}, {Key: "vcs.modified", Value: "true"}}
	for _, c := range []struct {
		name, ldflags string
		info          *debug.BuildInfo
		want          string
	}{
		{"no build info", "dev", nil, "dev"},
		{"go install @version", "dev", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}},
			"v1.2.3 (go1.26.8)"},
		{"a checkout with VCS stamping", "dev", &debug.BuildInfo{GoVersion: "go1.26.8",
			Main: debug.Module{Version: "v0.0.0-20261207144900-55ff8290a1b2+dirty"}, Settings: rev},
			"v0.0.0-20261207144900-55ff8290a1b2+dirty (revision 55ff8290a1b2+dirty, go1.26.8)"},
		{"go run", "dev", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			"dev (no VCS revision recorded, go1.26.8)"},
		{"a release's -X main.version", "v2.0.0", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: rev[:1]},
			"v2.0.0 (revision 55ff8290a1b2)"},
	} {
		if got := formatVersion(c.ldflags, c.info); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
