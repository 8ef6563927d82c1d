package main

import (
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestBuildOf(t *testing.T) {
	vcs := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.modified", Value: "true"},
	}}
	for _, tc := range []struct {
		name            string
		version, commit string
		bi              *debug.BuildInfo
		want            build
	}{
		{"stamped", "v1.2.0", "fedcba9876543210fedcba9876543210fedcba98", vcs,
			build{version: "v1.2.0", commit: "fedcba9876543210fedcba9876543210fedcba98"}},
		{"stamped version only", "v1.2.0", "", vcs,
			build{version: "v1.2.0", commit: "0123456789abcdef0123456789abcdef01234567", modified: true}},
		{"from the build info", "", "", vcs,
			build{version: "dev", commit: "0123456789abcdef0123456789abcdef01234567", modified: true}},
		{"module version", "", "", &debug.BuildInfo{Main: debug.Module{Version: "v1.3.0"}}, build{version: "v1.3.0"}},
		{"nothing known", "", "", nil, build{version: "dev"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := buildOf(tc.version, tc.commit, tc.bi); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	if got := (build{version: "dev", commit: "0123456789abcdef", modified: true}).String(); !strings.HasPrefix(got, "dev (commit 0123456789ab modified, go") {
		t.Errorf("String: %q", got)
	}
	if got := (build{version: "dev"}).String(); !strings.HasPrefix(got, "dev (commit unknown, go") {
		t.Errorf("String without a commit: %q", got)
	}
}

// TestVersionStamp builds the binary as hack/release does and checks that
// `mqttd version` shows what the linker stamped.
func TestVersionStamp(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "mqttd")
	ldflags := "-X main.releaseVersion=v9.8.7-1-gfedcba9 -X main.releaseCommit=fedcba9876543210fedcba9876543210fedcba98"
	if out, err := exec.Command("go", "build", "-ldflags", ldflags, "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, err := exec.Command(bin, args...).Output()
		if err != nil {
			t.Fatalf("mqttd %s: %v", args[0], err)
		}
		if want := "mqttd v9.8.7-1-gfedcba9 (commit fedcba987654, go"; !strings.HasPrefix(string(out), want) {
			t.Errorf("mqttd %s printed %q, want it to start with %q", args[0], out, want)
		}
	}
}
