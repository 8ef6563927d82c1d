package bolt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/bbolt"

	"mqttd/persistence"
)

// Under Sync an Apply is on stable storage when it returns. A bbolt
// commit gets there with two fdatasyncs (its pages, then its meta page)
// after B+tree work that grows with the batch: about 1 ms on the virtio
// disk here, on the path of every acknowledgement. So Apply does not
// commit to bbolt. It checks the batch against the shadow (shadow.go),
// writes it as one record into a log file whose blocks were written when
// it was made, and fdatasyncs that alone: an overwrite inside the file
// changes no metadata, and took ~130 µs here against ~300 µs for an
// append. A goroutine applies the log's records to the bbolt file later,
// many per transaction (which also drops what was put and deleted
// between two of them), and records in bbolt's meta bucket the sequence
// number of the last one; once everything in the log is in the file, the
// log starts over.
//
// The log file (the store's path + "-wal"):
//
//	header, at 0, a block of its own (walHeaderSize bytes, so that writing
//	records never rewrites it): magic, version, salt (8 bytes), generation
//	(8), CRC-32C of those (4); integers little-endian
//	records from walHeaderSize on, back to back: payload length (4), CRC-32C
//	of the salt, generation, sequence and payload (4), generation (8),
//	sequence number (8), payload (the batch, walcodec.go)
//
// The salt is random, made with the bbolt file and kept in its meta bucket
// ("walsalt"): a log that is not the file's own (left beside a file that
// was removed or moved aside) has another, and is not read. Being secret,
// it also keeps a payload a client chose, left in the file by an older
// generation, from reading as a record.
//
// A new generation starts the log over: the records of the last one that
// are still in the file are not of it, so reading stops at them. Reading
// also stops at a record whose CRC is wrong (a write cut short by a
// crash; it had not returned, so nothing it held was acknowledged) and at
// zeros.
const (
	walSuffix       = "-wal"
	walMagic        = "mqttdWAL"
	walVersion      = 1
	walHeaderSize   = 4096
	walRecordHeader = 24
	// The log is made walInitialSize long and doubles, up to walMaxSize,
	// while it fills faster than the applier empties it; a record longer
	// than that grows it to fit.
	walInitialSize = 1 << 20
	walMaxSize     = 64 << 20
	// walApplyAfter is how long the applier lets records gather after
	// the first: the fewer its transactions, the less bbolt writes (each
	// is two fdatasyncs). A device publishing every few seconds costs
	// about one fdatasync per message, not three.
	walApplyAfter = 5 * time.Second
	// walSmallRest is how much of the log a checkpoint applies while it
	// holds up Apply: what came while it applied the rest.
	walSmallRest = 64 << 10
	// walRetryAfter is how long a failed checkpoint's error stands before
	// the next one tries again.
	walRetryAfter = time.Second
)

// walApplyChunk bounds the records one bbolt transaction applies: a
// transaction holds every page it changes in memory until it commits,
// and half a full log applied at once held some 100 MB. Its commit
// (spill, a write a page, fdatasync) yields nowhere: with one P, a 4 MiB
// chunk's held the publishers up for 10-20 ms, where 1 MiB's costs a few
// (docs/perf-log.md, "twenty-fifth session"). A variable for the tests,
// which make logs of a few chunks.
var walApplyChunk int64 = 1 << 20

var (
	keyWALSeq  = []byte("walseq")
	keyWALSalt = []byte("walsalt")
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
)

// wal is the log file. off, seq and gen, and the shadow, change under
// Store.wmu; applied and appliedSeq under Store.amu.
type wal struct {
	f    *os.File
	path string
	size int64
	salt uint64
	gen  uint64
	off  int64  // where the next record goes
	seq  uint64 // the last record's sequence number
	buf  []byte // the record being built
	// reset is when the log last started over, to tell whether it fills
	// faster than the applier empties it.
	reset time.Time

	// applied is the offset before which the records are in the file;
	// atomic, as Apply reads it to tell when the log is half full.
	applied    atomic.Int64
	appliedSeq uint64
	rbuf       []byte

	// over lists, in order, the records written since the log was opened
	// and not yet applied that put an outbound entry over one the store
	// held: the checkpoint cancels the delete of an entry that a put it
	// cancels made only when it knows the put made it (see cancelled).
	// omu, a leaf, guards it: Apply adds to it under wmu, the checkpoint
	// reads it under amu alone.
	omu  sync.Mutex
	over []uint64
}

// openWAL opens the log, or makes it, and applies to the bbolt file what
// it holds that the file does not. keep is false under another durability
// than Sync, which does not write the log: then a log that a Sync run
// left is applied and removed, the file synced first.
func (s *Store) openWAL(keep bool) (err error) {
	path := s.path + walSuffix
	salt, applied, err := s.walMeta(keep)
	if err != nil {
		return err
	}
	flag := os.O_RDWR
	if keep {
		flag |= os.O_CREATE
	}
	f, err := os.OpenFile(path, flag, 0o600)
	if !keep && errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("bolt: open %s: %w", path, err)
	}
	defer func() {
		if err != nil || !keep {
			_ = f.Close()
		}
	}()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("bolt: %s: %w", path, err)
	}
	w := &wal{f: f, path: path, size: st.Size(), salt: salt, reset: time.Now()}
	w.seq, w.appliedSeq = applied, applied
	goOn := false
	if salt != 0 && w.size > 0 {
		if goOn, err = s.replay(w); err != nil {
			return err
		}
	}
	if !keep {
		if salt == 0 {
			return nil // not this file's log: nothing of it is read
		}
		if err := s.db.Sync(); err != nil {
			return fmt.Errorf("bolt: %s: fsync after replaying %s: %w", s.path, path, err)
		}
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("bolt: remove %s once applied: %w", path, err)
		}
		return syncDir(filepath.Dir(path))
	}
	if w.size < walInitialSize {
		goOn = false
		if err := w.grow(w.size, walInitialSize); err != nil {
			return err
		}
		w.size = walInitialSize
		if err := syncDir(filepath.Dir(path)); err != nil {
			return fmt.Errorf("bolt: %s: %w", path, err)
		}
	}
	if !goOn {
		if err := w.startOver(); err != nil {
			return err
		}
	}
	s.wal = w
	return nil
}

// walMeta reads the file's log salt and the sequence number of the last
// record it holds. A file without a salt gets one when make is set; else
// salt is 0: the file has had no log.
func (s *Store) walMeta(make bool) (salt, seq uint64, err error) {
	err = s.db.View(func(tx *bbolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if v := meta.Get(keyWALSalt); v != nil {
			if len(v) != 8 {
				return fmt.Errorf("bolt: %s: %w: bad walsalt in meta", s.path, ErrCorrupt)
			}
			salt = binary.LittleEndian.Uint64(v)
		}
		if v := meta.Get(keyWALSeq); v != nil {
			var n int
			if seq, n = uvarint(v); n <= 0 {
				return fmt.Errorf("bolt: %s: %w: bad walseq in meta", s.path, ErrCorrupt)
			}
		}
		return nil
	})
	if err != nil || salt != 0 || !make {
		return salt, seq, err
	}
	for salt == 0 {
		salt = rand.Uint64()
	}
	err = s.db.Update(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keyWALSalt, binary.LittleEndian.AppendUint64(nil, salt))
	})
	return salt, seq, err
}

// startWAL opens the log (openWAL), reads the shadow and starts the
// applier.
func (s *Store) startWAL() error {
	if err := s.openWAL(true); err != nil {
		return err
	}
	if err := s.readShadow(); err != nil {
		_ = s.wal.f.Close()
		return err
	}
	s.walKick = make(chan struct{}, 1)
	s.walHurry = make(chan struct{}, 1)
	s.walStop = make(chan struct{})
	s.walStopped = make(chan struct{})
	go s.walLoop()
	return nil
}

// readShadow reads the shadow, with damage ErrCorrupt as Load has it.
func (s *Store) readShadow() (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer s.guard(&err)
	return s.db.View(func(tx *bbolt.Tx) error {
		var err error
		s.shadow, err = loadShadow(tx, s.path)
		return err
	})
}

// replay applies the records after the file's last. goOn reports a log
// that new records can follow as it is (w.off set), so that an idle
// broker's restart writes nothing; otherwise it must start over.
func (s *Store) replay(w *wal) (goOn bool, err error) {
	buf := make([]byte, w.size)
	if _, err := w.f.ReadAt(buf, 0); err != nil {
		return false, fmt.Errorf("bolt: read %s: %w", w.path, err)
	}
	salt, gen, ok := readWALHeader(buf)
	if !ok || salt != w.salt {
		// Another file's log, or a header cut short by a crash while the
		// log started over, which it does only once the file holds all of
		// it: nothing to replay.
		return false, nil
	}
	w.gen = gen
	var recs [][]byte
	last, end := uint64(0), int64(walHeaderSize)
	for {
		seq, payload, next := readRecord(buf, end, salt, gen)
		if next == 0 || (last != 0 && seq != last+1) {
			break
		}
		last, end = seq, next
		if seq > w.appliedSeq {
			recs = append(recs, payload)
		}
	}
	if len(recs) > 0 {
		if from := last - uint64(len(recs)) + 1; from != w.appliedSeq+1 {
			return false, fmt.Errorf("bolt: %s: %w: the log goes on from record %d, the file stops at %d",
				w.path, ErrCorrupt, from, w.appliedSeq)
		}
		// In transactions of at most walApplyChunk, as applyLog applies.
		for len(recs) > 0 {
			n, size := 1, len(recs[0])
			for n < len(recs) && int64(size+len(recs[n])) <= walApplyChunk {
				size += len(recs[n])
				n++
			}
			// Not knowing which records put over an entry, it cancels
			// no delete.
			if err := s.applyRecords(w, recs[:n], w.appliedSeq+uint64(n), nil); err != nil {
				return false, fmt.Errorf("bolt: %s: replaying the log: %w", w.path, err)
			}
			w.appliedSeq += uint64(n)
			recs = recs[n:]
		}
	}
	if last != 0 && last != w.appliedSeq {
		return false, nil // the file is ahead of a log that is not its own
	}
	w.seq = w.appliedSeq
	w.off = end
	w.applied.Store(end)
	return true, nil
}

// walHeader is the log's header for salt and gen.
func walHeader(salt, gen uint64) []byte {
	h := make([]byte, walHeaderSize)
	copy(h, walMagic)
	h[8] = walVersion
	binary.LittleEndian.PutUint64(h[9:17], salt)
	binary.LittleEndian.PutUint64(h[17:25], gen)
	binary.LittleEndian.PutUint32(h[25:29], crc32.Checksum(h[:25], castagnoli))
	return h
}

func readWALHeader(b []byte) (salt, gen uint64, ok bool) {
	if len(b) < walHeaderSize || string(b[:8]) != walMagic || b[8] != walVersion ||
		crc32.Checksum(b[:25], castagnoli) != binary.LittleEndian.Uint32(b[25:29]) {
		return 0, 0, false
	}
	return binary.LittleEndian.Uint64(b[9:17]), binary.LittleEndian.Uint64(b[17:25]), true
}

// recordSum is a record's CRC: of the salt, its header after the CRC, and
// its payload.
func recordSum(salt uint64, rec []byte) uint32 {
	sum := crc32.Checksum(binary.LittleEndian.AppendUint64(make([]byte, 0, 8), salt), castagnoli)
	return crc32.Update(sum, castagnoli, rec[8:])
}

// readRecord reads the record of generation gen at off in b; next is 0
// where there is none.
func readRecord(b []byte, off int64, salt, gen uint64) (seq uint64, payload []byte, next int64) {
	if off+walRecordHeader > int64(len(b)) {
		return 0, nil, 0
	}
	h := b[off : off+walRecordHeader]
	n := int64(binary.LittleEndian.Uint32(h[0:4]))
	if n == 0 || n > int64(len(b))-off-walRecordHeader || binary.LittleEndian.Uint64(h[8:16]) != gen {
		return 0, nil, 0
	}
	end := off + walRecordHeader + n
	if recordSum(salt, b[off:end]) != binary.LittleEndian.Uint32(h[4:8]) {
		return 0, nil, 0
	}
	return binary.LittleEndian.Uint64(h[16:24]), b[off+walRecordHeader : end], end
}

// due reports whether the log is to start over: it is half full, or has
// no room for a record of need bytes. The caller holds s.wmu.
func (w *wal) due(need int) bool {
	return w.off-walHeaderSize >= w.size/2 || w.off+int64(need) > w.size
}

// sizeFor is how long the log is to be when it starts over for a record
// of need bytes: twice as long when it filled within a second of its last
// start, and long enough for that record. The caller holds s.wmu.
func (w *wal) sizeFor(need int) int64 {
	size := w.size
	if time.Since(w.reset) < time.Second {
		size = min(2*size, walMaxSize)
	}
	for walHeaderSize+int64(need) > size {
		size *= 2
	}
	return size
}

// grow writes the log's blocks from from to to, so that records written
// there later change no metadata, and fsyncs it; the caller then sets
// w.size.
func (w *wal) grow(from, to int64) error {
	zeros := make([]byte, 1<<20)
	for at := from; at < to; {
		n := min(int64(len(zeros)), to-at)
		if _, err := w.f.WriteAt(zeros[:n], at); err != nil {
			_ = w.f.Truncate(from)
			return fmt.Errorf("bolt: grow %s to %d bytes: %w", w.path, to, err)
		}
		at += n
	}
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("bolt: grow %s: fsync: %w", w.path, err)
	}
	return nil
}

// startOver begins a new generation. Everything the log holds must be in
// the file. Should it fail, the header on disk may be either generation's,
// so the caller takes no more records.
func (w *wal) startOver() error {
	gen := w.gen + 1
	if _, err := w.f.WriteAt(walHeader(w.salt, gen), 0); err != nil {
		return fmt.Errorf("bolt: write %s: %w", w.path, err)
	}
	// Durable before the first record of the generation is written: with
	// the old header, that record would not be read back.
	if err := fdatasync(w.f); err != nil {
		return fmt.Errorf("bolt: %s: fdatasync: %w", w.path, err)
	}
	w.gen = gen
	w.off = walHeaderSize
	w.applied.Store(walHeaderSize)
	w.reset = time.Now()
	return nil
}

// logApply is Apply under Sync.
func (s *Store) logApply(b *persistence.Batch) error {
	for {
		s.wmu.Lock()
		if p := s.walErr.Load(); p != nil {
			s.wmu.Unlock()
			return *p
		}
		rec, err := s.buildRecord(b)
		if err != nil || len(rec) == walRecordHeader {
			// Failed, or nothing to keep (messages already stored).
			s.shadow.rollback()
			s.wmu.Unlock()
			return err
		}
		w := s.wal
		if w.off+int64(len(rec)) <= w.size {
			err := w.write(rec)
			if err != nil {
				s.shadow.rollback()
				// After a failed fdatasync the kernel may have dropped
				// the pages: nothing written since can be trusted. The
				// record itself may yet be on disk and replayed at the
				// next start, as a bbolt commit whose fsync failed may
				// be: a failed Apply means "not known to be kept".
				err = fmt.Errorf("%w; commits since may be lost, so the store takes no more", err)
				s.walErr.CompareAndSwap(nil, &err)
				s.wmu.Unlock()
				return err
			}
			if s.shadow.overwrote {
				w.noteOverwrite(w.seq)
			}
			s.shadow.commit()
			hurry := w.off-w.applied.Load() >= w.size/2
			s.wmu.Unlock()
			s.kickApplier(hurry)
			return nil
		}
		s.shadow.rollback()
		s.wmu.Unlock()
		if err := s.checkpoint(len(rec)); err != nil {
			return err
		}
	}
}

// buildRecord checks b against the shadow and encodes it into w.buf. The
// caller holds s.wmu and commits or rolls back the shadow.
func (s *Store) buildRecord(b *persistence.Batch) ([]byte, error) {
	buf := append(s.wal.buf[:0], make([]byte, walRecordHeader)...)
	for i := range b.Ops {
		op := &b.Ops[i]
		err := validOp(op)
		if err == nil && op.Kind == persistence.OpPutMessage {
			if _, stored := s.shadow.refs[op.Message.ID]; stored {
				continue // the first stays, as the applier has it
			}
		}
		if err == nil {
			err = s.shadow.check(op)
		}
		if err == nil {
			var out []byte
			if out, err = appendOp(buf, op); err == nil {
				buf = out
			}
		}
		if err != nil {
			return nil, fmt.Errorf("bolt: op %d (%s): %w", i, kindName(op.Kind), err)
		}
	}
	s.wal.buf = buf
	return buf, nil
}

// write puts a record built by buildRecord at the log's end and makes it
// durable.
func (w *wal) write(rec []byte) error {
	h := rec[:walRecordHeader]
	binary.LittleEndian.PutUint32(h[0:4], uint32(len(rec)-walRecordHeader))
	binary.LittleEndian.PutUint64(h[8:16], w.gen)
	binary.LittleEndian.PutUint64(h[16:24], w.seq+1)
	binary.LittleEndian.PutUint32(h[4:8], recordSum(w.salt, rec))
	if _, err := w.f.WriteAt(rec, w.off); err != nil {
		return fmt.Errorf("bolt: write %s: %w", w.path, err)
	}
	if err := fdatasync(w.f); err != nil {
		return fmt.Errorf("bolt: %s: fdatasync: %w", w.path, err)
	}
	w.seq++
	w.off += int64(len(rec))
	if cap(w.buf) > 1<<20 {
		w.buf = nil // one large batch does not keep its buffer
	}
	return nil
}

// moveWALAside moves the log of a file moved aside along with it.
func moveWALAside(path, dst string) error {
	err := os.Rename(path+walSuffix, path+walSuffix+strings.TrimPrefix(dst, path))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
