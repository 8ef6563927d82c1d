package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair: what is written to master is
// typed on slave, and slave's echo comes back on master.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slave.Close() })
	return master, slave
}

func TestPasswdPromptDoesNotEcho(t *testing.T) {
	master, slave := openPTY(t)
	path := filepath.Join(t.TempDir(), "passwd")
	var stderr bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- runPasswd([]string{"-c", path, "alice"}, slave, &stderr) }()
	// Type only once echo is off, since a terminal echoes as keys arrive.
	deadline := time.Now().Add(10 * time.Second)
	for {
		tio, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
		if err != nil {
			t.Fatal(err)
		}
		if tio.Lflag&unix.ECHO == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("echo never turned off")
		}
		<-time.After(time.Millisecond)
	}
	if _, err := master.WriteString("typed-secret\ntyped-secret\n"); err != nil {
		t.Fatal(err)
	}
	if code := <-done; code != 0 {
		t.Fatalf("exit code %d: %s", code, stderr.String())
	}
	// Echo is back on: a marker typed now comes back, after anything the
	// password put there.
	if _, err := master.WriteString("END\n"); err != nil {
		t.Fatal(err)
	}
	echoed := make(chan string, 1)
	go func() {
		var got []byte
		buf := make([]byte, 256)
		for !bytes.Contains(got, []byte("END")) {
			n, err := master.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				break
			}
		}
		echoed <- string(got)
	}()
	select {
	case got := <-echoed:
		if strings.Contains(got, "typed-secret") || !strings.Contains(got, "END") {
			t.Fatalf("terminal showed %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("echo not restored: the marker never came back")
	}
	if !loadUsers(t, path)["alice"].Verify([]byte("typed-secret")) {
		t.Fatal("password typed on the terminal not written")
	}
}
