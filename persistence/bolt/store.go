package bolt

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"mqttd/persistence"
)

// Durability says when committed batches reach stable storage.
type Durability int

const (
	// Sync makes every Apply durable before it returns: an acknowledged
	// message survives a power cut. It costs one fdatasync per Apply, of
	// the log the batch is appended to (wal.go); bbolt's own commits, two
	// fsyncs each, come later, many batches at a time.
	Sync Durability = iota
	// Interval commits without fsync and fsyncs at most a second after
	// the first commit that needs it: an acknowledgement no longer means
	// the message is on disk. A crash of the process loses nothing (the
	// data is in the page cache). A power cut or kernel panic loses up to
	// the last second, and can lose the file: without the fsync between
	// its data pages and its meta page, bbolt cannot stop the disk from
	// getting the new meta page before the pages it points to; Open then
	// reports ErrCorrupt (see MoveAside). For brokers on storage too slow
	// for Sync that accept that risk.
	Interval
	// None never fsyncs, not even at Close: the kernel writes back when it
	// likes. A power cut may lose any amount of recent state, and a file
	// whose pages reached the disk out of order may not open again (then
	// see MoveAside). For tests, and for throwaway state on tmpfs.
	None
)

// String names the mode as a config file would.
func (d Durability) String() string {
	switch d {
	case Sync:
		return "sync"
	case Interval:
		return "interval"
	case None:
		return "none"
	}
	return fmt.Sprintf("Durability(%d)", int(d))
}

// Options configure Open. The zero value is Sync with a 1 s lock timeout.
type Options struct {
	Durability Durability
	// Timeout is how long Open waits for the file's lock; zero (or less)
	// means 1 s.
	// Short, because the holder is usually another broker still running,
	// which will not let go: better to say so than to hang.
	Timeout time.Duration

	// syncEvery is Interval's delay; zero means 1 s. Tests shorten it.
	syncEvery time.Duration
}

// Errors of Open, wrapped with the file's path and details.
var (
	// ErrLocked: another process, or another Open in this one, holds the
	// file.
	ErrLocked = errors.New("database file is in use")
	// ErrCorrupt: the file is not a bbolt file, is cut short or is
	// damaged. MoveAside lets the broker start empty, keeping the file for
	// a look.
	ErrCorrupt = errors.New("database file is corrupt")
	// ErrSchema: the file was written by another program, or by a build of
	// mqttd with a schema this one does not know. Do not move it aside
	// without thought: a newer mqttd may read it.
	ErrSchema = errors.New("unknown database schema")
)

// Schema versions: schemaVersion is the layout described in the package
// comment, which a new file is made with; a file is marked schemaHashed
// (markHashed) before the first batch holding a key that holds a hash (a
// session ID, filter or retained topic longer than maxPlainKey) reaches
// it or its log, so that a build that cannot read those refuses it as
// ErrSchema, which leaves it alone, rather than meeting them as damage,
// which may move it aside.
const (
	schemaVersion = 1
	schemaHashed  = 2
)

var (
	bucketMeta     = []byte("meta")
	bucketMessages = []byte("messages")
	bucketRefs     = []byte("refs")
	bucketRetained = []byte("retained")
	bucketSessions = []byte("sessions")
	bucketSubs     = []byte("subs")
	bucketOut      = []byte("out")
	bucketRel      = []byte("rel")
	bucketWills    = []byte("wills")
	keyVersion     = []byte("version")

	allBuckets = [][]byte{bucketMeta, bucketMessages, bucketRefs, bucketRetained,
		bucketSessions, bucketSubs, bucketOut, bucketRel, bucketWills}
)

// Store is a persistence.Store in a bbolt file. It is safe for concurrent
// use: bbolt runs one writing transaction at a time and any number of
// readers beside it.
type Store struct {
	db   *bbolt.DB
	path string
	opts Options

	// For Interval: dirty is set by a commit not yet fsynced; kick wakes
	// the syncer when it becomes set, so that an idle store has no timer
	// running at all.
	dirty   atomic.Bool
	kick    chan struct{}
	stop    chan struct{}
	stopped chan struct{}
	syncs   atomic.Int64 // background fsyncs done, for tests
	// syncErr is the first background fsync failure. It sticks: after a
	// failed fsync the kernel may have dropped the dirty pages, so no
	// commit since can be trusted to be on disk.
	syncErr atomic.Pointer[error]

	// Sync only: the log Apply writes to (wal.go), the shadow it checks
	// batches against, and the goroutine that applies the log to the file.
	wal    *wal
	shadow *shadow
	// wmu guards the log's end and the shadow; amu, taken before wmu, is
	// held by the one checkpoint that may run.
	wmu, amu   sync.Mutex
	walErr     atomic.Pointer[error]
	walKick    chan struct{}
	walHurry   chan struct{}
	walStop    chan struct{}
	walStopped chan struct{}
	// failErr is the last checkpoint's failure and failAt when it came
	// (under amu).
	failErr error
	failAt  time.Time
	// canc is the checkpoint's scratch, yield its clock (under amu).
	canc  canceller
	yield yielder

	// hashedSchema is set once the file is marked schemaHashed.
	hashedSchema atomic.Bool

	closeOnce sync.Once
	closeErr  error
}

var _ persistence.Store = (*Store)(nil)

// Open opens the store in the file at path, creating it if it does not
// exist. A file another Open holds, in this process or another, fails
// after opts.Timeout with ErrLocked; a damaged file fails with ErrCorrupt
// and a file of another schema with ErrSchema, all naming the file.
func Open(path string, opts Options) (*Store, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = time.Second
	}
	if opts.syncEvery <= 0 {
		opts.syncEvery = time.Second
	}
	if opts.Durability < Sync || opts.Durability > None {
		return nil, fmt.Errorf("bolt: %s: unknown durability %d", path, opts.Durability)
	}
	existed, err := checkFile(path)
	if err != nil {
		return nil, err
	}
	db, err := openDB(path, opts)
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, path: path, opts: opts}
	if err := s.initSchema(); err != nil {
		_ = db.Close()
		return nil, err
	}
	if !existed && opts.Durability != None {
		// bbolt fsyncs the new file but not its directory entry, without
		// which a power cut can lose the file whole.
		if err := syncDir(filepath.Dir(path)); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("bolt: %s: %w", path, err)
		}
	}
	var walErr error
	if opts.Durability == Sync {
		walErr = s.startWAL()
	} else {
		walErr = s.openWAL(false) // a log a Sync run left, applied
	}
	if walErr != nil {
		_ = db.Close()
		return nil, walErr
	}
	if opts.Durability == Interval {
		s.kick = make(chan struct{}, 1)
		s.stop = make(chan struct{})
		s.stopped = make(chan struct{})
		go s.syncLoop()
	}
	return s, nil
}

// openDB opens the bbolt file. Should bbolt panic or fault on the memory
// map all the same (checkFile vets the pages it reads here), that is
// turned into ErrCorrupt and the file it had no chance to close is
// closed. Its lock stays held till the process exits, though: the memory
// map, which only bbolt could unmap, keeps the file open.
func openDB(path string, opts Options) (db *bbolt.DB, err error) {
	var file *os.File
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			if file != nil {
				_ = file.Close()
			}
			db, err = nil, fmt.Errorf("bolt: %s: %w: %v", path, ErrCorrupt, p)
		}
	}()
	db, err = bbolt.Open(path, 0o600, &bbolt.Options{
		Timeout: opts.Timeout,
		NoSync:  opts.Durability != Sync,
		OpenFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
			f, err := os.OpenFile(name, flag, perm)
			file = f
			return f, err
		},
	})
	switch {
	case err == nil:
		return db, nil
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("bolt: %s: %w: another process (or another Open in this one) "+
			"holds its lock; gave up after %v", path, ErrLocked, opts.Timeout)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrVersionMismatch),
		errors.Is(err, berrors.ErrChecksum):
		return nil, fmt.Errorf("bolt: %s: %w: %v", path, ErrCorrupt, err)
	}
	return nil, fmt.Errorf("bolt: open %s: %w", path, err)
}

// initSchema creates the buckets of a new file and checks those of an
// old one. It reads first and writes only for a new file, so that opening
// an existing store writes nothing.
func (s *Store) initSchema() (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer s.guard(&err)
	fresh := false
	err = s.db.View(func(tx *bbolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			return s.checkEmpty(tx, &fresh)
		}
		v, n := uvarint(meta.Get(keyVersion))
		if n <= 0 {
			return fmt.Errorf("bolt: %s: %w: no schema version in meta", s.path, ErrCorrupt)
		}
		if v != schemaVersion && v != schemaHashed {
			return fmt.Errorf("bolt: %s: %w: schema version %d, this build reads %d and %d",
				s.path, ErrSchema, v, schemaVersion, schemaHashed)
		}
		s.hashedSchema.Store(v == schemaHashed)
		for _, name := range allBuckets {
			if tx.Bucket(name) == nil {
				return fmt.Errorf("bolt: %s: %w: bucket %q is missing", s.path, ErrCorrupt, name)
			}
		}
		return nil
	})
	if err != nil || !fresh {
		return err
	}
	return s.db.Update(func(tx *bbolt.Tx) error {
		for _, name := range allBuckets {
			if _, err := tx.CreateBucket(name); err != nil {
				return fmt.Errorf("bolt: %s: create bucket %q: %w", s.path, name, err)
			}
		}
		return tx.Bucket(bucketMeta).Put(keyVersion, []byte{schemaVersion})
	})
}

// checkEmpty sets fresh for a file without buckets; one with buckets but
// no meta is some other program's.
func (s *Store) checkEmpty(tx *bbolt.Tx, fresh *bool) error {
	var names []string
	_ = tx.ForEach(func(name []byte, _ *bbolt.Bucket) error {
		names = append(names, string(name))
		return nil
	})
	if len(names) > 0 {
		return fmt.Errorf("bolt: %s: %w: no meta bucket, but buckets %q: not an mqttd store",
			s.path, ErrSchema, names)
	}
	*fresh = true
	return nil
}

// guard turns a panic or memory fault inside bbolt, which is how it meets
// most damage past the meta pages, into ErrCorrupt: a damaged file must
// give an error, never take the broker down. Callers defer it right after
// deferring the restore of debug.SetPanicOnFault(true), without which a
// fault on the memory map kills the process instead of panicking.
func (s *Store) guard(err *error) {
	if p := recover(); p != nil {
		*err = fmt.Errorf("bolt: %s: %w: %v", s.path, ErrCorrupt, p)
	}
}

// Close stops the background fsync, fsyncs what it had not (Interval),
// and closes the file. Calling it again returns the first result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		if s.wal != nil {
			close(s.walStop)
			<-s.walStopped
			if p := s.walErr.Load(); p != nil {
				errs = append(errs, *p)
			} else {
				s.amu.Lock()
				errs = append(errs, s.checkpointLocked(0))
				s.amu.Unlock()
			}
			errs = append(errs, s.wal.f.Close())
		}
		if s.stop != nil {
			close(s.stop)
			<-s.stopped
			if s.dirty.Swap(false) {
				errs = append(errs, s.db.Sync())
			}
		}
		if p := s.syncErr.Load(); p != nil {
			errs = append(errs, *p)
		}
		errs = append(errs, s.db.Close())
		if err := errors.Join(errs...); err != nil {
			s.closeErr = fmt.Errorf("bolt: close %s: %w", s.path, err)
		}
	})
	return s.closeErr
}

// syncLoop fsyncs a while after the first unsynced commit. It sleeps on
// kick between, rather than ticking, so that an idle broker does not wake
// up at all.
func (s *Store) syncLoop() {
	defer close(s.stopped)
	t := time.NewTimer(s.opts.syncEvery)
	t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-s.kick:
		}
		t.Reset(s.opts.syncEvery)
		select {
		case <-s.stop:
			t.Stop()
			return // Close syncs
		case <-t.C:
		}
		// db.Sync fsyncs whether or not there is anything to flush.
		if s.dirty.Swap(false) {
			if err := s.db.Sync(); err != nil {
				err = fmt.Errorf("bolt: %s: background fsync: %w", s.path, err)
				s.syncErr.CompareAndSwap(nil, &err)
			}
			s.syncs.Add(1)
		}
	}
}

// committed notes a commit that Interval has to fsync.
func (s *Store) committed() {
	if s.kick != nil && !s.dirty.Swap(true) {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

// syncDir fsyncs a directory so that a file created or renamed in it
// stays there after a power cut.
func syncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil // directories cannot be fsynced there; NTFS journals them
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
