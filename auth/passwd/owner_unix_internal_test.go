//go:build unix

package passwd

import (
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// standInGroup makes an existing group, not root's, play the service's
// group, and returns its id.
func standInGroup(t *testing.T) int {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("giving a file a group the test is not in needs root")
	}
	for _, name := range []string{"daemon", "bin", "nogroup"} {
		if g, err := user.LookupGroup(name); err == nil && g.Gid != "0" {
			old := serviceGroup
			serviceGroup = name
			t.Cleanup(func() { serviceGroup = old })
			gid, err := strconv.Atoi(g.Gid)
			if err != nil {
				t.Fatal(err)
			}
			return gid
		}
	}
	t.Skip("no group to stand in for mqttd")
	return 0
}

// checkAccess fails unless the file at path has group gid and mode.
func checkAccess(t *testing.T, path string, gid int, mode os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if int(st.Gid) != gid || fi.Mode().Perm() != mode {
		t.Fatalf("%s: group %d mode %#o, want group %d mode %#o", path, st.Gid, fi.Mode().Perm(), gid, mode)
	}
}

func TestNewFileInServiceGroupDirIsGroupReadable(t *testing.T) {
	gid := standInGroup(t)
	dir := t.TempDir()
	if err := os.Chown(dir, 0, gid); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "passwd")
	if err := Set(path, "alice", []byte("secret"), true); err != nil {
		t.Fatal(err)
	}
	checkAccess(t, path, gid, 0o640)
}

func TestNewFileInServiceDirIsGroupReadable(t *testing.T) {
	gid := standInGroup(t)
	dir := t.TempDir()
	old := serviceDir
	serviceDir = dir
	t.Cleanup(func() { serviceDir = old })
	// A relative name, as `cd /etc/mqttd && mqttd passwd -c passwd alice`.
	t.Chdir(dir)
	if err := Set("passwd", "alice", []byte("secret"), true); err != nil {
		t.Fatal(err)
	}
	checkAccess(t, filepath.Join(dir, "passwd"), gid, 0o640)
}

func TestNewFileElsewhereIsPrivate(t *testing.T) {
	standInGroup(t)
	path := filepath.Join(t.TempDir(), "passwd")
	if err := Set(path, "alice", []byte("secret"), true); err != nil {
		t.Fatal(err)
	}
	checkAccess(t, path, os.Getegid(), 0o600)
}
