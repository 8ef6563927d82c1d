package bolt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// bbolt's file format (version 2), as far as checkFile needs it: a page
// starts with a 16-byte header; pages 0 and 1 hold a meta record each,
// in the machine's byte order, whose last field is an FNV-64a checksum of
// the fields before it.
const (
	boltMagic      = 0xED0CDAED
	boltVersion    = 2
	pageHeaderSize = 16
	metaSize       = 64
	noFreelist     = ^uint64(0)
)

type boltMeta struct {
	pageSize, root, freelist, pgid, txid uint64
}

// formatErr is damage found in the file, as opposed to a failure to
// read it: only damage is ErrCorrupt, which may lead the broker to move
// the file aside.
type formatErr string

func (e formatErr) Error() string { return string(e) }

func formatf(format string, args ...any) error { return formatErr(fmt.Sprintf(format, args...)) }

// errNoFreelist marks a file bbolt wrote with NoFreelistSync, which mqttd
// never sets: not damaged, but not one of ours.
var errNoFreelist = errors.New("no stored free list: not written by mqttd")

// checkFile looks at the meta pages and the free list before bbolt maps
// the file, and reports whether the file existed with something in it.
// bbolt does not check that the file is as long as its meta page says: a
// file cut short opens, then faults on the first page past its end. And a
// damaged free list page has bbolt.Open panic with the file mapped.
//
// It runs before bbolt takes the lock, so another process may be
// committing meanwhile; that is harmless, because bbolt grows the file
// before it writes a meta page that counts the new pages, writes the free
// list to a page of its own before the meta page that points to it, and
// writes one meta page at a time.
func checkFile(path string) (bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("bolt: open %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("bolt: %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return false, fmt.Errorf("bolt: %s: not a regular file (%v)", path, st.Mode().Type())
	}
	if st.Size() == 0 {
		// What a crash while bbolt created the file leaves; bbolt starts
		// it afresh, as it would a missing file.
		return false, nil
	}
	if err := checkPages(f, st.Size()); err != nil {
		var fe formatErr
		if err == errNoFreelist {
			return true, fmt.Errorf("bolt: %s: %w: %v", path, ErrSchema, err)
		}
		if errors.As(err, &fe) {
			return true, fmt.Errorf("bolt: %s: %w: %v", path, ErrCorrupt, err)
		}
		return true, fmt.Errorf("bolt: read %s: %w", path, err)
	}
	return true, nil
}

func checkPages(f *os.File, size int64) error {
	m, err := readMeta(f, size)
	if err != nil {
		return err
	}
	if m.root >= m.pgid || m.freelist >= m.pgid && m.freelist != noFreelist {
		return formatf("meta page points past its high water mark")
	}
	if m.pgid > uint64(size)/m.pageSize {
		return formatf("truncated: %d bytes, but its meta page counts %d pages of %d", size, m.pgid, m.pageSize)
	}
	if m.freelist == noFreelist {
		// bbolt would rebuild the free list by walking the tree in a
		// goroutine of its own, which panics, uncatchably, on damage. Only
		// a file written with NoFreelistSync, which mqttd never sets, has
		// none.
		return errNoFreelist
	}
	return checkFreelist(f, m)
}

// readMeta returns the newer valid meta page, as bbolt would use. The
// second one is where the page size of the first says, or, if the first
// is damaged, at one of the page sizes bbolt supports.
func readMeta(f *os.File, size int64) (boltMeta, error) {
	m0, err0 := metaAt(f, 0)
	var fe formatErr
	if err0 != nil && !errors.As(err0, &fe) {
		return boltMeta{}, err0
	}
	var offsets []int64
	if err0 == nil {
		offsets = []int64{int64(m0.pageSize)}
	} else {
		for i := range 15 {
			offsets = append(offsets, 1024<<i)
		}
	}
	for _, off := range offsets {
		if off+pageHeaderSize+metaSize > size {
			break
		}
		m1, err1 := metaAt(f, off)
		if err1 != nil {
			if !errors.As(err1, &fe) {
				return boltMeta{}, err1
			}
			continue
		}
		if err0 != nil || m1.txid > m0.txid {
			return m1, nil
		}
		break
	}
	if err0 != nil {
		return boltMeta{}, formatf("no valid bbolt meta page (not a bbolt file, or both are damaged): %v", err0)
	}
	return m0, nil
}

func metaAt(f *os.File, off int64) (boltMeta, error) {
	var buf [pageHeaderSize + metaSize]byte
	if _, err := f.ReadAt(buf[:], off); err != nil {
		if errors.Is(err, io.EOF) {
			return boltMeta{}, formatf("file too short for a meta page")
		}
		return boltMeta{}, err
	}
	b := buf[pageHeaderSize:]
	e := binary.NativeEndian
	h := fnv.New64a()
	h.Write(b[:56])
	switch {
	case e.Uint32(b[0:]) != boltMagic:
		return boltMeta{}, formatf("bad magic number")
	case e.Uint32(b[4:]) != boltVersion:
		return boltMeta{}, formatf("bbolt format version %d", e.Uint32(b[4:]))
	case e.Uint64(b[56:]) != h.Sum64():
		return boltMeta{}, formatf("meta page checksum mismatch")
	}
	m := boltMeta{
		pageSize: uint64(e.Uint32(b[8:])),
		root:     e.Uint64(b[16:]),
		freelist: e.Uint64(b[32:]),
		pgid:     e.Uint64(b[40:]),
		txid:     e.Uint64(b[48:]),
	}
	if m.pageSize < 1024 || m.pageSize&(m.pageSize-1) != 0 {
		return boltMeta{}, formatf("page size %d", m.pageSize)
	}
	return m, nil
}

// checkFreelist checks the free list page, which bbolt.Open reads: on a
// damaged one it panics with the file mapped, and so locked, until the
// process exits; or, given a count of billions, allocates until the
// process dies. A free page id out of range would later have bbolt write
// over a meta page or past the end.
func checkFreelist(f *os.File, m boltMeta) error {
	off := int64(m.freelist * m.pageSize)
	var h [pageHeaderSize + 8]byte
	if _, err := f.ReadAt(h[:], off); err != nil {
		return err // the file is long enough: checked against the high water mark
	}
	e := binary.NativeEndian
	id, flags, overflow := e.Uint64(h[0:]), e.Uint16(h[8:]), uint64(e.Uint32(h[12:]))
	count, skip := uint64(e.Uint16(h[10:])), uint64(0)
	if count == 0xFFFF {
		count, skip = e.Uint64(h[pageHeaderSize:]), 1
	}
	switch {
	case id != m.freelist || flags != 0x10:
		return formatf("page %d is not a free list page (id %d, flags %#x)", m.freelist, id, flags)
	case overflow >= m.pgid-m.freelist:
		return formatf("free list page %d overflows past the high water mark", m.freelist)
	case count > ((overflow+1)*m.pageSize-pageHeaderSize)/8-skip:
		return formatf("%d free pages do not fit in a free list of %d pages", count, overflow+1)
	}
	ids := make([]byte, count*8)
	if _, err := f.ReadAt(ids, off+int64(pageHeaderSize+skip*8)); err != nil {
		return err
	}
	for i := 0; i < len(ids); i += 8 {
		if p := e.Uint64(ids[i:]); p < 2 || p >= m.pgid {
			return formatf("free page id %d out of range", p)
		}
	}
	return nil
}

// MoveAside renames a file Open refused as corrupt to path +
// ".corrupt-<unix time>" (with a further suffix if that is taken) and
// returns the new name, so that the broker can start with an empty store
// while the old file is kept for a look. Call it only after Open failed
// with ErrCorrupt, and only when the operator asked for it: the broker's
// state is then lost.
func MoveAside(path string) (string, error) {
	base := path + ".corrupt-" + strconv.FormatInt(time.Now().Unix(), 10)
	dst := base
	for i := 1; ; i++ {
		_, err := os.Lstat(dst)
		if errors.Is(err, fs.ErrNotExist) {
			break
		}
		if err != nil {
			return "", fmt.Errorf("bolt: move %s aside: %w", path, err)
		}
		dst = base + "-" + strconv.Itoa(i)
	}
	if err := os.Rename(path, dst); err != nil {
		return "", fmt.Errorf("bolt: move %s aside: %w", path, err)
	}
	// The log holds changes of that file and of no other.
	if err := moveWALAside(path, dst); err != nil {
		return dst, fmt.Errorf("bolt: moved %s to %s, but not its log: %w", path, dst, err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return dst, fmt.Errorf("bolt: moved %s to %s, but: %w", path, dst, err)
	}
	return dst, nil
}
