//go:build linux && (amd64 || arm64)

package powercut

import (
	"bytes"
	"os"
	"path/filepath"
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

// cut is the power cut as the crash tests do it: unmount (the processes
// using the files are gone), Cut, mount again.
func cut(t *testing.T, p *FS, mnt string) CutStats {
	t.Helper()
	if err := p.Unmount(); err != nil {
		t.Fatal(err)
	}
	cs, err := p.Cut()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Mount(mnt); err != nil {
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

// TestMmapSeesWrites: bbolt reads its file through a shared mmap while it
// writes with pwrite; a read through the mapping must see the write.
func TestMmapSeesWrites(t *testing.T) {
	_, mnt, _ := mounted(t)
	f := create(t, filepath.Join(mnt, "m"))
	must(t, write(f, make([]byte, 8192), 0))
	m, err := syscall.Mmap(int(f.Fd()), 0, 8192, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatalf("mmap through the filesystem: %v", err)
	}
	defer syscall.Munmap(m)
	must(t, write(f, []byte("seen"), 4096))
	if got := string(m[4096:4100]); got != "seen" {
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
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	put := func(key string) {
		t.Helper()
		err := db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("b"))
			if err != nil {
				return err
			}
			return b.Put([]byte(key), []byte("v"))
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	put("synced")
	db.NoSync = true
	put("unsynced")
	// Still there before the cut: only the power cut can lose it.
	if got := keys(t, db); !bytes.Equal(got, []byte("synced,unsynced,")) {
		t.Fatalf("before the cut: %s", got)
	}
	db.Close()

	cut(t, p, mnt)
	db, err = bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatalf("bbolt after the cut: %v", err)
	}
	defer db.Close()
	if got := keys(t, db); !bytes.Equal(got, []byte("synced,")) {
		t.Errorf("after the cut: %s, want only the synced key", got)
	}
}

// keys lists bucket b's keys, comma-terminated.
func keys(t *testing.T, db *bolt.DB) []byte {
	t.Helper()
	var out []byte
	err := db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("b"))
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, _ []byte) error {
			out = append(append(out, k...), ',')
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
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
