package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// releaseVersion and releaseCommit are stamped by hack/release with
// -ldflags "-X main.releaseVersion=... -X main.releaseCommit=...", since a
// release is built in a clean environment where the Go build cache and
// GOFLAGS (-buildvcs=false) may keep the commit out of the build info.
// They are variables only because -X can set nothing else: nothing
// assigns them.
var releaseVersion, releaseCommit string

// build says which mqttd this is.
type build struct {
	// version is a release's `git describe` (v1.2.0, v1.2.0-3-g0123abc,
	// 0123abc-dirty), else the module version, else "dev".
	version string
	// commit is the full commit hash, "" when unknown.
	commit string
	// modified is a build from a checkout with uncommitted changes, as
	// the build info records it (a stamped version says -dirty instead).
	modified bool
}

// buildOf combines the stamped values with the build info Go records (nil
// when there is none): a stamp wins, the build info fills what it left out.
func buildOf(stampedVersion, stampedCommit string, bi *debug.BuildInfo) build {
	b := build{version: stampedVersion, commit: stampedCommit}
	if bi != nil {
		if v := bi.Main.Version; b.version == "" && v != "" && v != "(devel)" {
			b.version = v
		}
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && b.commit == "":
				b.commit = s.Value
			case s.Key == "vcs.modified" && stampedCommit == "":
				b.modified = s.Value == "true"
			}
		}
	}
	if b.version == "" {
		b.version = "dev"
	}
	return b
}

// String is one line for `mqttd version` and the start-up banner:
// "v1.2.0 (commit 0123456789ab, go1.26.0 linux/arm64)".
func (b build) String() string {
	commit := "unknown"
	if b.commit != "" {
		commit = b.commit[:min(len(b.commit), 12)]
	}
	if b.modified {
		commit += " modified"
	}
	return fmt.Sprintf("%s (commit %s, %s %s/%s)", b.version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// version describes this binary: see build.String.
func version() string { return thisBuild().String() }

// thisBuild is this binary's build: the stamp, else the build info.
func thisBuild() build {
	bi, _ := debug.ReadBuildInfo()
	return buildOf(releaseVersion, releaseCommit, bi)
}
