package listeners_test

import (
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"mqttd/listeners"
)

func TestUnixSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mqttd.sock")
	l := listen(t, listeners.Config{Type: listeners.Unix, Path: path, FileMode: 0o600})
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, want 0600", fi.Mode().Perm())
	}
	ch := acceptOne(l)
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := accepted(t, ch).(syscall.Conn); !ok {
		t.Fatal("a unix connection hides its socket from the poller")
	}
	// A second listener on the same live socket is refused.
	if l2, err := listeners.Listen(listeners.Config{Type: listeners.Unix, Path: path}); err == nil {
		l2.Close()
		t.Fatal("listened on a socket another listener holds")
	}
}

// TestUnixSocketStale checks that a socket file left by a broker that
// did not stop cleanly is replaced, and that a file that is not a socket
// is left alone.
func TestUnixSocketStale(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "mqttd.sock")
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ul.SetUnlinkOnClose(false)
	ul.Close() // the file stays, nobody listens: stale
	listen(t, listeners.Config{Type: listeners.Unix, Path: path})

	file := filepath.Join(dir, "data")
	os.WriteFile(file, []byte("keep me"), 0o600)
	if l, err := listeners.Listen(listeners.Config{Type: listeners.Unix, Path: file}); err == nil {
		l.Close()
		t.Fatal("listened over a regular file")
	}
	if b, _ := os.ReadFile(file); string(b) != "keep me" {
		t.Fatal("the regular file was touched")
	}
}
