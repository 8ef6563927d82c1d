//go:build unix

package passwd_test

import (
	"os"
	"syscall"
	"testing"

	"mqttd/auth/passwd"
)

func TestRewriteKeepsOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changing a file's owner needs root")
	}
	path := writeFile(t, "alice", "one")
	const uid, gid = 12345, 23456
	if err := os.Chown(path, uid, gid); err != nil {
		t.Fatal(err)
	}
	if err := passwd.Set(path, "bob", []byte("two"), false); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != uid || st.Gid != gid {
		t.Fatalf("owner %d:%d after the rewrite, want %d:%d", st.Uid, st.Gid, uid, gid)
	}
}

func TestCreateOverExistingKeepsOwnerAndMode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changing a file's owner needs root")
	}
	path := writeFile(t, "alice", "one")
	const uid, gid = 12345, 23456
	if err := os.Chown(path, uid, gid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := passwd.Set(path, "bob", []byte("two"), true); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != uid || st.Gid != gid || fi.Mode().Perm() != 0o640 {
		t.Fatalf("%d:%d %#o after -c over the file, want %d:%d 0640", st.Uid, st.Gid, fi.Mode().Perm(), uid, gid)
	}
	users, err := passwd.Load(path)
	if err != nil || len(users) != 1 {
		t.Fatalf("after -c: %v users, %v; want bob alone", users, err)
	}
}
