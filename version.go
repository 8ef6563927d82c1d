package mqttd

import (
	"runtime/debug"
)

// modulePath is this module's path, looked up in the build information.
const modulePath = "mqttd"

// buildVersion is the version and commit the Go build information gives
// this module: the module version when it was built as a dependency or
// from a tagged module, "dev" otherwise; the VCS revision (with "-dirty"
// for modified sources) when it was built from its own checkout.
func buildVersion() (version, commit string) {
	version = "dev"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return version, ""
	}
	mod := &bi.Main
	if mod.Path != modulePath {
		mod = nil
		for _, d := range bi.Deps {
			if d.Path == modulePath {
				mod = d
				break
			}
		}
	}
	if mod == nil {
		return version, ""
	}
	if mod.Version != "" && mod.Version != "(devel)" {
		version = mod.Version
	}
	if mod != &bi.Main {
		return version, "" // a dependency carries no revision of its own
	}
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			commit = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if commit != "" && dirty {
		commit += "-dirty"
	}
	return version, commit
}
