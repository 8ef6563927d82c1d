//go:build linux && (amd64 || arm64)

package powercut

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// FS is the power-cut filesystem over one backing directory. It can be
// mounted, unmounted, cut and mounted again; the durable state lives in
// the FS, not in the mount.
type FS struct {
	backing string

	mu      sync.Mutex
	files   map[uint64]*file // by backing inode number
	server  *fuse.Server
	mounted string
}

// file is the durable state of one backing file.
type file struct {
	mu      sync.Mutex
	durable []byte   // content as of the last sync
	dirty   []extent // ranges written since the last sync
	low     int64    // lowest size a truncate set since the last sync, or -1
}

// extent is a byte range [off, end).
type extent struct{ off, end int64 }

// New returns the filesystem over backing, an existing directory.
func New(backing string) (*FS, error) {
	st, err := fsStat(backing)
	if err != nil {
		return nil, err
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return nil, fmt.Errorf("powercut: %s is not a directory", backing)
	}
	return &FS{backing: backing, files: map[uint64]*file{}}, nil
}

func fsStat(path string) (*syscall.Stat_t, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	return &st, nil
}

// Mount mounts the filesystem on dir by calling mount(2) itself (we need no
// fusermount binary, but root or CAP_SYS_ADMIN and /dev/fuse).
func (p *FS) Mount(dir string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.server != nil {
		return fmt.Errorf("powercut: already mounted on %s", p.mounted)
	}
	inner, err := gofs.NewLoopbackRoot(p.backing)
	if err != nil {
		return err
	}
	root := &node{LoopbackNode: inner.(*gofs.LoopbackNode), fs: p}
	srv, err := gofs.Mount(dir, root, &gofs.Options{
		MountOptions: fuse.MountOptions{
			DirectMountStrict: true,
			FsName:            p.backing,
			Name:              "powercut",
		},
	})
	if err != nil {
		return fmt.Errorf("powercut: mount on %s: %w", dir, err)
	}
	p.server, p.mounted = srv, dir
	return nil
}

// Unmount unmounts the filesystem; the processes that used it must have
// closed their files (or died).
func (p *FS) Unmount() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.server == nil {
		return nil
	}
	if err := p.server.Unmount(); err != nil {
		return fmt.Errorf("powercut: unmount %s: %w", p.mounted, err)
	}
	p.server, p.mounted = nil, ""
	return nil
}

// CutStats says what a Cut threw away.
type CutStats struct {
	Files int   // files that had writes not made durable
	Bytes int64 // bytes written since those files' last sync
}

// Cut is the power cut: every file reverts to its content as of its last
// fsync or fdatasync. It must be called while unmounted, since the kernel
// of a live mount would go on showing the lost writes from its page cache.
func (p *FS) Cut() (CutStats, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var cs CutStats
	if p.server != nil {
		return cs, fmt.Errorf("powercut: Cut while mounted on %s", p.mounted)
	}
	err := filepath.WalkDir(p.backing, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(path, &st); err != nil {
			return &fs.PathError{Op: "lstat", Path: path, Err: err}
		}
		f := p.files[st.Ino]
		if f == nil {
			return nil // never opened through the filesystem: unchanged
		}
		return f.revert(path, st.Size, &cs)
	})
	return cs, err
}

// CutAt is the power cut as a crash test makes it: the filesystem is
// unmounted (the processes that used its files must be gone), cut, and
// mounted on dir again.
func (p *FS) CutAt(dir string) (CutStats, error) {
	if err := p.Unmount(); err != nil {
		return CutStats{}, err
	}
	cs, err := p.Cut()
	if err != nil {
		return cs, err
	}
	return cs, p.Mount(dir)
}

// revert writes the durable content back over what changed since the last
// sync and cuts the file to its durable size.
func (f *file) revert(path string, size int64, cs *CutStats) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := int64(len(f.durable))
	if len(f.dirty) == 0 && f.low < 0 && size == n {
		return nil
	}
	cs.Files++
	fd, err := syscall.Open(path, syscall.O_WRONLY, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	restore := func(off, end int64) error {
		off, end = min(off, n), min(end, n)
		if off >= end {
			return nil
		}
		_, err := syscall.Pwrite(fd, f.durable[off:end], off)
		return err
	}
	for _, e := range f.dirty {
		cs.Bytes += e.end - e.off
		if err := restore(e.off, e.end); err != nil {
			return &fs.PathError{Op: "pwrite", Path: path, Err: err}
		}
	}
	if f.low >= 0 {
		if err := restore(f.low, n); err != nil {
			return &fs.PathError{Op: "pwrite", Path: path, Err: err}
		}
	}
	if err := syscall.Ftruncate(fd, n); err != nil {
		return &fs.PathError{Op: "truncate", Path: path, Err: err}
	}
	f.dirty, f.low = nil, -1
	return nil
}

// state returns the durable state of the backing file open on fd, making
// it on first use: a file created just now is durable as empty, any other
// as it is now (it was on "disk" before this filesystem saw it).
func (p *FS) state(fd int, created bool) (*file, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if f := p.files[st.Ino]; f != nil && !created {
		return f, nil
	}
	f := &file{low: -1}
	if !created {
		f.durable = make([]byte, st.Size)
		if _, err := preadFull(fd, f.durable, 0); err != nil {
			return nil, err
		}
	} else if st.Size > 0 {
		// Created over a file the kernel did not know; its bytes are
		// not durable.
		f.dirty = []extent{{0, st.Size}}
	}
	// An inode number freed by an unlink may come back for a new file:
	// the new state replaces the old.
	p.files[st.Ino] = f
	return f, nil
}

// wrote records that [off, off+n) changed.
func (f *file) wrote(off, n int64) {
	if n <= 0 {
		return
	}
	if k := len(f.dirty); k > 0 && f.dirty[k-1].end == off {
		f.dirty[k-1].end = off + n // sequential writes make one range
		return
	}
	f.dirty = append(f.dirty, extent{off, off + n})
}

// truncated records a size change.
func (f *file) truncated(size int64) {
	if f.low < 0 || size < f.low {
		f.low = size
	}
}

// sync makes the file's current content on fd durable.
func (f *file) sync(fd int) error {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return err
	}
	if f.low >= 0 && f.low < int64(len(f.durable)) {
		f.durable = f.durable[:f.low]
	}
	if grow := st.Size - int64(len(f.durable)); grow > 0 {
		f.durable = append(f.durable, make([]byte, grow)...)
	}
	f.durable = f.durable[:st.Size]
	for _, e := range f.dirty {
		off, end := min(e.off, st.Size), min(e.end, st.Size)
		if off < end {
			if _, err := preadFull(fd, f.durable[off:end], off); err != nil {
				return err
			}
		}
	}
	f.dirty, f.low = nil, -1
	return nil
}

// preadFull reads len(b) bytes at off.
func preadFull(fd int, b []byte, off int64) (int, error) {
	n := 0
	for n < len(b) {
		m, err := syscall.Pread(fd, b[n:], off+int64(n))
		if err != nil {
			return n, err
		}
		if m == 0 {
			return n, errors.New("powercut: file shorter than its size")
		}
		n += m
	}
	return n, nil
}

// node is a loopback node whose files are tracked.
type node struct {
	*gofs.LoopbackNode
	fs *FS
}

// WrapChild makes every node below the root a tracking node too.
func (n *node) WrapChild(_ context.Context, ops gofs.InodeEmbedder) gofs.InodeEmbedder {
	if lb, ok := ops.(*gofs.LoopbackNode); ok {
		return &node{LoopbackNode: lb, fs: n.fs}
	}
	return ops
}

var (
	_ gofs.NodeWrapChilder    = (*node)(nil)
	_ gofs.NodeOpener         = (*node)(nil)
	_ gofs.NodeCreater        = (*node)(nil)
	_ gofs.NodeSetattrer      = (*node)(nil)
	_ gofs.NodeCopyFileRanger = (*node)(nil)
)

// Open opens the backing file and tracks it.
func (n *node) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.Open(ctx, readable(flags))
	if errno != 0 {
		return nil, 0, errno
	}
	return n.fs.wrap(fh, false, fl)
}

// Create creates the backing file and tracks it.
func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	ino, fh, fl, errno := n.LoopbackNode.Create(ctx, name, readable(flags), mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	h, fl, errno := n.fs.wrap(fh, true, fl)
	return ino, h, fl, errno
}

// readable turns a write-only open of a backing file into a read-write
// one: a sync reads back what changed (file.sync), which a write-only
// descriptor cannot (EBADF). The kernel still holds the program to the
// mode it asked for.
func readable(flags uint32) uint32 {
	if flags&syscall.O_ACCMODE == syscall.O_WRONLY {
		return flags&^syscall.O_ACCMODE | syscall.O_RDWR
	}
	return flags
}

// Setattr records a truncate made by path (with a handle, the handle's
// Setattr records it).
func (n *node) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if _, isOurs := fh.(*handle); isOurs {
		return n.LoopbackNode.Setattr(ctx, fh, in, out) // calls handle.Setattr
	}
	if size, ok := in.GetSize(); ok {
		path := filepath.Join(n.RootData.Path, n.Path(nil))
		fd, err := syscall.Open(path, syscall.O_RDONLY, 0)
		if err != nil {
			return gofs.ToErrno(err)
		}
		defer syscall.Close(fd)
		f, err := n.fs.state(fd, false)
		if err != nil {
			return gofs.ToErrno(err)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		f.truncated(int64(size))
		return n.LoopbackNode.Setattr(ctx, nil, in, out)
	}
	return n.LoopbackNode.Setattr(ctx, fh, in, out)
}

// CopyFileRange is refused, so the kernel falls back to reads and writes,
// which are tracked.
func (n *node) CopyFileRange(context.Context, gofs.FileHandle, uint64, *gofs.Inode, gofs.FileHandle, uint64, uint64, uint64) (uint32, syscall.Errno) {
	return 0, syscall.ENOSYS
}

// wrap puts a tracking handle around the loopback file fh.
func (p *FS) wrap(fh gofs.FileHandle, created bool, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	lf, ok := fh.(*gofs.LoopbackFile)
	if !ok {
		return nil, 0, syscall.EIO
	}
	// PassthroughFd is how a LoopbackFile tells its descriptor; the
	// handle itself never offers passthrough to the kernel.
	fd, ok := lf.PassthroughFd()
	if !ok {
		lf.Release(context.Background())
		return nil, 0, syscall.EBADF
	}
	f, err := p.state(fd, created)
	if err != nil {
		lf.Release(context.Background())
		return nil, 0, gofs.ToErrno(err)
	}
	return &handle{lf: lf, fd: fd, f: f}, flags, 0
}

// handle is an open file: reads pass through, writes and size changes are
// recorded, fsync makes them durable. It deliberately does not implement
// gofs.FilePassthroughFder.
type handle struct {
	lf *gofs.LoopbackFile
	fd int
	f  *file
}

var (
	_ gofs.FileReader    = (*handle)(nil)
	_ gofs.FileWriter    = (*handle)(nil)
	_ gofs.FileFsyncer   = (*handle)(nil)
	_ gofs.FileFlusher   = (*handle)(nil)
	_ gofs.FileReleaser  = (*handle)(nil)
	_ gofs.FileGetattrer = (*handle)(nil)
	_ gofs.FileSetattrer = (*handle)(nil)
	_ gofs.FileLseeker   = (*handle)(nil)
	_ gofs.FileAllocater = (*handle)(nil)
)

// Read, Flush, Release, Getattr and Lseek pass straight through: they
// change nothing the model tracks.
func (h *handle) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return h.lf.Read(ctx, buf, off)
}

// Write writes through and records the range, under the file's lock so
// that a concurrent sync sees either both or neither.
func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	n, errno := h.lf.Write(ctx, data, off)
	h.f.wrote(off, int64(n))
	return n, errno
}

// Fsync makes the file durable (fsync and fdatasync alike). The backing
// file itself is not synced: durability is this filesystem's model, and
// the backing directory is only the page cache.
func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	return gofs.ToErrno(h.f.sync(h.fd))
}

func (h *handle) Flush(ctx context.Context) syscall.Errno   { return h.lf.Flush(ctx) }
func (h *handle) Release(ctx context.Context) syscall.Errno { return h.lf.Release(ctx) }

func (h *handle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return h.lf.Getattr(ctx, out)
}

// Setattr records a truncate and passes the change through.
func (h *handle) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	if size, ok := in.GetSize(); ok {
		h.f.truncated(int64(size))
	}
	return h.lf.Setattr(ctx, in, out)
}

func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return h.lf.Lseek(ctx, off, whence)
}

// Allocate records the allocated range as changed: it may extend the file.
func (h *handle) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	h.f.wrote(int64(off), int64(size))
	return h.lf.Allocate(ctx, off, size, mode)
}
