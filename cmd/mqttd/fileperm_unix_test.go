//go:build unix

package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// nobody is the user and group the child runs as.
const nobody = 65534

// TestUnreadableAuthFilesNameUserOnce starts the broker as another user
// (as the packaged service runs as mqttd) with a password file only root
// may read and an ACL file in a directory only root may enter: the error
// must say, once each, which user needs to read which file and how.
func TestUnreadableAuthFilesNameUserOnce(t *testing.T) {
	if os.Getenv("MQTTD_TEST_RUN_AS_CHILD") == "1" {
		os.Exit(run(strings.Fields(os.Getenv("MQTTD_TEST_ARGS")), noEnv, os.Stdout, os.Stderr, nil))
	}
	if os.Geteuid() != 0 {
		t.Skip("running the broker as another user needs root")
	}
	dir := t.TempDir()
	// t.TempDir's directories are open to their owner alone.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The test binary's own directory may be closed to other users.
	bin := filepath.Join(dir, "mqttd.test")
	copyFile(t, os.Args[0], bin, 0o755)
	pw := filepath.Join(dir, "passwd")
	if err := os.WriteFile(pw, []byte("alice:$7$101$c2FsdHNhbHRzYWx0$"+strings.Repeat("A", 86)+"==\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	closed := filepath.Join(dir, "closed")
	if err := os.Mkdir(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	aclFile := filepath.Join(closed, "acl")
	if err := os.WriteFile(aclFile, []byte("topic a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(data, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestUnreadableAuthFilesNameUserOnce$")
	cmd.Env = append(os.Environ(), "MQTTD_TEST_RUN_AS_CHILD=1", "MQTTD_TEST_ARGS="+strings.Join([]string{
		"--listen", "127.0.0.1:0", "--data-dir", data, "--password-file", pw, "--acl-file", aclFile}, " "))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); err == nil || code == 0 {
		t.Fatalf("the broker started (%v); output:\n%s", err, out)
	}
	text := string(out)
	for _, want := range []string{
		"needs to read " + pw + "; to let it: chgrp nogroup " + pw + " && chmod 0640 " + pw,
		"cannot enter " + closed + " to read " + aclFile + "; to let it: chgrp nogroup " + closed + " && chmod g+x " + closed,
	} {
		if n := strings.Count(text, want); n != 1 {
			t.Errorf("%q printed %d times, want once; output:\n%s", want, n, text)
		}
	}
	if !strings.Contains(text, "user nobody") {
		t.Errorf("the error does not name the user; output:\n%s", text)
	}
}

// copyFile copies src to dst with mode.
func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
