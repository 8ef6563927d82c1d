//go:build linux && (amd64 || arm64)

package powercut

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// mounted returns a powercut filesystem over a fresh backing directory,
// mounted on a fresh directory, and unmounts it at the end of the test. A
// machine that cannot mount FUSE skips the test, saying why.
func mounted(t *testing.T) (p *FS, mnt, backing string) {
	t.Helper()
	backing, mnt = t.TempDir(), t.TempDir()
	p, err := New(backing)
	if err != nil {
		t.Fatal(err)
	}
	MountOrSkip(t, p, mnt)
	return p, mnt, backing
}

// cut is CutAt, the power cut as the crash tests make it, failing the
// test on an error.
func cut(t *testing.T, p *FS, mnt string) CutStats {
	t.Helper()
	cs, err := p.CutAt(mnt)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// readFile returns the content of path.
func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCutKeepsWhatWasSynced writes, syncs, writes more (past the end and
// over the synced part), and cuts: the synced content stays, the rest is
// gone, seen through the mount and in the backing directory alike.
func TestCutKeepsWhatWasSynced(t *testing.T) {
	p, mnt, backing := mounted(t)
	path := filepath.Join(mnt, "f")
	f := create(t, path)
	must(t, write(f, []byte("durable part|"), 0))
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	must(t, write(f, []byte("lost tail"), 13))
	must(t, write(f, []byte("LOST"), 0))
	if got := readFile(t, path); string(got) != "LOSTble part|lost tail" {
		t.Fatalf("before the cut: %q", got)
	}
	f.Close()

	cs := cut(t, p, mnt)
	for _, where := range []string{path, filepath.Join(backing, "f")} {
		if got := readFile(t, where); string(got) != "durable part|" {
			t.Errorf("%s after the cut: %q, want %q", where, got, "durable part|")
		}
	}
	if cs.Files != 1 || cs.Bytes != 13 {
		t.Errorf("cut stats %+v, want 1 file and 13 bytes", cs)
	}

	// A second cut with nothing written since changes nothing.
	if cs := cut(t, p, mnt); cs.Files != 0 {
		t.Errorf("second cut reverted %+v", cs)
	}
	if got := readFile(t, path); string(got) != "durable part|" {
		t.Errorf("after a second cut: %q", got)
	}
}

// TestNeverSyncedFileIsEmpty: a file created and written but never synced
// is still there after the cut, empty.
func TestNeverSyncedFileIsEmpty(t *testing.T) {
	p, mnt, _ := mounted(t)
	path := filepath.Join(mnt, "new")
	if err := os.WriteFile(path, []byte("never synced"), 0o600); err != nil {
		t.Fatal(err)
	}
	cut(t, p, mnt)
	if got := readFile(t, path); len(got) != 0 {
		t.Errorf("after the cut: %q, want an empty file", got)
	}
}

// TestWriteOnlySync: a file opened write-only, as os.WriteFile and the
// write-then-rename of a config or index file do, can be synced, and what
// was synced survives the cut.
func TestWriteOnlySync(t *testing.T) {
	p, mnt, _ := mounted(t)
	path := filepath.Join(mnt, "index.tmp")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	must(t, write(f, []byte("synced"), 0))
	err = f.Sync()
	f.Close() // before failing: an open file would hold the unmount
	if err != nil {
		t.Fatalf("sync of a write-only file: %v", err)
	}
	cut(t, p, mnt)
	if got := readFile(t, path); string(got) != "synced" {
		t.Errorf("after the cut: %q, want %q", got, "synced")
	}
}

// TestTruncateAndFdatasync covers size changes: a truncate and a write
// past the end without a sync are undone; a truncate followed by
// fdatasync is kept.
func TestTruncateAndFdatasync(t *testing.T) {
	p, mnt, _ := mounted(t)
	path := filepath.Join(mnt, "t")
	page := bytes.Repeat([]byte("p"), 4096)
	f := create(t, path)
	must(t, write(f, bytes.Repeat(page, 3), 0))
	must(t, syscall.Fdatasync(int(f.Fd())))
	must(t, f.Truncate(4096))
	must(t, write(f, []byte("x"), 5*4096))
	f.Close()
	cut(t, p, mnt)
	if got := readFile(t, path); !bytes.Equal(got, bytes.Repeat(page, 3)) {
		t.Fatalf("after an unsynced truncate: %d bytes, want the 3 synced pages", len(got))
	}

	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	must(t, f.Truncate(100))
	must(t, f.Truncate(8192)) // grows again with zeros
	must(t, syscall.Fdatasync(int(f.Fd())))
	f.Close()
	cut(t, p, mnt)
	want := append(bytes.Repeat([]byte("p"), 100), make([]byte, 8192-100)...)
	if got := readFile(t, path); !bytes.Equal(got, want) {
		t.Errorf("after a synced truncate: %d bytes, want 100 bytes then zeros to 8192", len(got))
	}
}

// Files on the filesystem are mapped only in a child process: a page
// fault on a mapping served by this process's own FUSE server blocks its
// thread outside any system call, so a stop-the-world pause of the Go
// runtime waits for the thread and the thread for the server, which the
// pause stops (a deadlock seen under the race detector).

// inChild runs this test binary again as a child that does action (see
// TestChild) and returns what it printed.
func inChild(t *testing.T, action ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestChild$")
	cmd.Env = append(os.Environ(), "POWERCUT_CHILD="+strings.Join(action, "\n"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child %q: %v\n%s", action, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestChild is the child of inChild; without POWERCUT_CHILD it does
// nothing. It prints its result and exits.
func TestChild(t *testing.T) {
	action := os.Getenv("POWERCUT_CHILD")
	if action == "" {
		t.Skip("run by other tests as a child process")
	}
	args := strings.Split(action, "\n")
	out, err := child(args)
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Println(out)
	os.Exit(0)
}

// child does one action on a file of the mounted filesystem: "mmap PATH"
// writes through the file and reads through a shared mapping; "put PATH
// KEY sync|nosync" commits a key with bbolt; "keys PATH" lists them.
func child(args []string) (string, error) {
	switch args[0] {
	case "mmap":
		f, err := os.OpenFile(args[1], os.O_RDWR, 0)
		if err != nil {
			return "", err
		}
		defer f.Close()
		m, err := syscall.Mmap(int(f.Fd()), 0, 8192, syscall.PROT_READ, syscall.MAP_SHARED)
		if err != nil {
			return "", fmt.Errorf("mmap through the filesystem: %w", err)
		}
		defer syscall.Munmap(m)
		if _, err := f.WriteAt([]byte("seen"), 4096); err != nil {
			return "", err
		}
		return string(m[4096:4100]), nil
	case "put":
		db, err := bolt.Open(args[1], 0o600, nil)
		if err != nil {
			return "", err
		}
		defer db.Close()
		db.NoSync = args[3] == "nosync"
		return "", db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("b"))
			if err != nil {
				return err
			}
			return b.Put([]byte(args[2]), []byte("v"))
		})
	case "keys":
		db, err := bolt.Open(args[1], 0o600, nil)
		if err != nil {
			return "", err
		}
		defer db.Close()
		var out []string
		err = db.View(func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte("b"))
			if b == nil {
				return nil
			}
			return b.ForEach(func(k, _ []byte) error {
				out = append(out, string(k))
				return nil
			})
		})
		return strings.Join(out, ","), err
	}
	return "", fmt.Errorf("unknown action %q", args[0])
}

// TestMmapSeesWrites: bbolt reads its file through a shared mmap while it
// writes with pwrite; a read through the mapping must see the write.
func TestMmapSeesWrites(t *testing.T) {
	_, mnt, _ := mounted(t)
	path := filepath.Join(mnt, "m")
	f := create(t, path)
	must(t, write(f, make([]byte, 8192), 0))
	if got := inChild(t, "mmap", path); got != "seen" {
		t.Errorf("mapping shows %q after the write, want %q", got, "seen")
	}
}

// TestBboltLosesWhatItDidNotSync runs bbolt on the filesystem: a commit
// with fsync survives the cut, a commit made with NoSync (a store that
// forgot its fsync) does not, and the database still opens. This is the
// failure kill -9 cannot show.
func TestBboltLosesWhatItDidNotSync(t *testing.T) {
	p, mnt, _ := mounted(t)
	path := filepath.Join(mnt, "db")
	inChild(t, "put", path, "synced", "sync")
	inChild(t, "put", path, "unsynced", "nosync")
	// Still there before the cut: only the power cut can lose it.
	if got := inChild(t, "keys", path); got != "synced,unsynced" {
		t.Fatalf("before the cut: %s", got)
	}
	cut(t, p, mnt)
	if got := inChild(t, "keys", path); got != "synced" {
		t.Errorf("after the cut: %s, want only the synced key", got)
	}
}

// TestCutWhileMountedFails: the kernel's page cache of a live mount would
// hide the cut.
func TestCutWhileMountedFails(t *testing.T) {
	p, _, _ := mounted(t)
	if _, err := p.Cut(); err == nil {
		t.Error("Cut while mounted did not fail")
	}
}

// create creates a file that is closed, at the latest, when the test
// ends: before the unmount, which an open file would make fail.
func create(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// write writes b at off.
func write(f *os.File, b []byte, off int64) error {
	_, err := f.WriteAt(b, off)
	return err
}

// must fails the test on an error.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
