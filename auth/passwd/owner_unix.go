//go:build unix

package passwd

import (
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// The packaged service runs as user and group mqttd and reads its files
// from /etc/mqttd. Variables, not constants, so that a test can stand in
// a group that exists on the machine running it.
var (
	serviceGroup = "mqttd"
	serviceDir   = "/etc/mqttd"
)

// keepOwner gives f the owner and group of the file it replaces, so a
// file edited by root stays readable by the broker's user. Failing that
// (not root) the new file keeps its creator's, like any file written.
func keepOwner(f *os.File, old fs.FileInfo) {
	if st, ok := old.Sys().(*syscall.Stat_t); ok {
		f.Chown(int(st.Uid), int(st.Gid))
	}
}

// shareNew gives f, a new password file in dir, to the service's group
// with mode 0640 when dir is the service's (its group is the service's,
// or it is the service's config directory), so that the service can read
// a file made as root; elsewhere, or when the group cannot be given, the
// file stays 0600, its creator's alone. It returns the mode to set.
func shareNew(f *os.File, dir string) fs.FileMode {
	gid, ok := serviceGID(dir)
	if !ok || f.Chown(-1, gid) != nil {
		return 0o600
	}
	return 0o640
}

// serviceGID returns the service group's id when dir belongs to it.
func serviceGID(dir string) (int, bool) {
	fi, err := os.Stat(dir)
	if err != nil {
		return 0, false
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		if g, err := user.LookupGroupId(strconv.Itoa(int(st.Gid))); err == nil && g.Name == serviceGroup {
			return int(st.Gid), true
		}
	}
	abs, err := filepath.Abs(dir)
	if err != nil || abs != serviceDir {
		return 0, false
	}
	g, err := user.LookupGroup(serviceGroup)
	if err != nil {
		return 0, false
	}
	gid, err := strconv.Atoi(g.Gid)
	return gid, err == nil
}
