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
