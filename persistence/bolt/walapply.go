package bolt

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/bbolt"

	"mqttd/persistence"
)

// The log's applier: it applies what the log holds to the bbolt file
// walApplyAfter after the first record, or once the log is half full (a
// checkpoint, which Apply waits for), a chunk per transaction.

// kickApplier wakes the applier: after walApplyAfter, or at once when the
// log is half full.
func (s *Store) kickApplier(hurry bool) {
	ch := s.walKick
	if hurry {
		ch = s.walHurry
	}
	select {
	case ch <- struct{}{}:
	default:
	}
}

// walLoop applies the log to the file a while after records come.
func (s *Store) walLoop() {
	defer close(s.walStopped)
	t := time.NewTimer(walApplyAfter)
	t.Stop()
	for {
		select {
		case <-s.walStop:
			return
		case <-s.walKick:
			t.Reset(walApplyAfter)
			select {
			case <-s.walStop:
				t.Stop()
				return // Close applies the rest
			case <-t.C:
			case <-s.walHurry:
				t.Stop()
			}
		case <-s.walHurry:
		}
		// A failure leaves the records in the log, which is durable; the
		// next checkpoint tries again, and Apply fails once the log is
		// full and a checkpoint cannot empty it.
		_ = s.checkpoint(0)
	}
}

// checkpoint applies the whole log to the file. When the log is half
// full, or has no room for a record of need bytes, it starts over, at the
// size sizeFor gives.
func (s *Store) checkpoint(need int) error {
	s.amu.Lock()
	defer s.amu.Unlock()
	// After a failure (a full disk) the next tries wait a while: each is a
	// whole bbolt transaction, and every Apply asks for one once the log
	// is half full.
	if s.failErr != nil && time.Since(s.failAt) < walRetryAfter {
		return s.failErr
	}
	err := s.checkpointLocked(need)
	s.failErr, s.failAt = err, time.Now()
	// A burst's scratch is not kept: the read buffer only up to the log's
	// initial size.
	if cap(s.wal.rbuf) > walInitialSize {
		s.wal.rbuf = nil
	}
	s.canc.trim()
	return err
}

// checkpointLocked is checkpoint; the caller holds s.amu.
func (s *Store) checkpointLocked(need int) error {
	w := s.wal
	// Most of it without holding up Apply, until what comes meanwhile is
	// little; then the rest.
	for {
		s.wmu.Lock()
		end := w.off
		s.wmu.Unlock()
		if end-w.applied.Load() < walSmallRest {
			break
		}
		if err := s.applyLog(end, true); err != nil {
			return err
		}
	}
	// A larger log is written (grow) before Apply is held up: records go
	// only below w.size meanwhile.
	s.wmu.Lock()
	due, from, to := w.due(need), w.size, w.sizeFor(need)
	s.wmu.Unlock()
	if due && to > from {
		if err := w.grow(from, to); err != nil && walHeaderSize+int64(need) > from {
			return err // too large for the log as it is
		} else if err == nil {
			s.wmu.Lock()
			w.size = to
			s.wmu.Unlock()
		}
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.applyLog(w.off, false); err != nil {
		return err
	}
	if !due {
		// Starting over costs an fdatasync; while the log has room (it
		// may have started over while this call waited for s.amu), new
		// records follow the applied ones.
		return nil
	}
	if walHeaderSize+int64(need) > w.size {
		return fmt.Errorf("bolt: %s: a record of %d bytes does not fit the log", w.path, need)
	}
	if err := w.startOver(); err != nil {
		s.walErr.CompareAndSwap(nil, &err)
		return err
	}
	return nil
}

// applyLog applies the records up to end to the file, in transactions of
// at most walApplyChunk bytes of records (or one longer record), each
// read when it is applied. With yield it lets other goroutines run every
// walYieldEvery (not while it holds up Apply: they would wait for it).
// The caller holds s.amu.
func (s *Store) applyLog(end int64, yield bool) error {
	w := s.wal
	s.yield.start(yield)
	for from := w.applied.Load(); from < end; from = w.applied.Load() {
		buf, err := w.read(from, min(end-from, walApplyChunk))
		if err != nil {
			return err
		}
		var recs [][]byte
		var last uint64
		off := int64(0)
		for off < int64(len(buf)) {
			seq, payload, next := readRecord(buf, off, w.salt, w.gen)
			if next == 0 {
				break // cut by the chunk, or not a record: the next pass tells
			}
			recs, last, off = append(recs, payload), seq, next
		}
		if len(recs) == 0 {
			// A record longer than a chunk: read it whole.
			if len(buf) < walRecordHeader {
				return fmt.Errorf("bolt: %s: %w: a record written at %d does not read back", w.path, ErrCorrupt, from)
			}
			size := walRecordHeader + int64(binary.LittleEndian.Uint32(buf[0:4]))
			if size <= int64(len(buf)) || size > end-from {
				return fmt.Errorf("bolt: %s: %w: a record written at %d does not read back", w.path, ErrCorrupt, from)
			}
			if buf, err = w.read(from, size); err != nil {
				return err
			}
			seq, payload, next := readRecord(buf, 0, w.salt, w.gen)
			if next == 0 {
				return fmt.Errorf("bolt: %s: %w: a record written at %d does not read back", w.path, ErrCorrupt, from)
			}
			recs, last, off = [][]byte{payload}, seq, next
		}
		if err := s.applyRecords(w, recs, last, w.overwrites(last-uint64(len(recs))+1, last)); err != nil {
			return err
		}
		w.applied.Store(from + off)
		w.appliedSeq = last
		w.dropOverwrites(last)
	}
	return nil
}

// noteOverwrite lists record seq, just written, as one that puts an
// outbound entry over one the store held.
func (w *wal) noteOverwrite(seq uint64) {
	w.omu.Lock()
	w.over = append(w.over, seq)
	w.omu.Unlock()
}

// overwrites returns, for the records first to last, whether record i of
// them (counted from 0) puts an outbound entry over one the store held.
func (w *wal) overwrites(first, last uint64) func(i int) bool {
	w.omu.Lock()
	defer w.omu.Unlock()
	lo, _ := slices.BinarySearch(w.over, first)
	hi, _ := slices.BinarySearch(w.over, last+1)
	if lo == hi {
		return func(int) bool { return false }
	}
	over := slices.Clone(w.over[lo:hi])
	return func(i int) bool {
		_, found := slices.BinarySearch(over, first+uint64(i))
		return found
	}
}

// dropOverwrites forgets the records up to last, applied.
func (w *wal) dropOverwrites(last uint64) {
	w.omu.Lock()
	n, _ := slices.BinarySearch(w.over, last+1)
	w.over = append(w.over[:0], w.over[n:]...)
	w.omu.Unlock()
}

// read reads n bytes of the log at off into w.rbuf, which it keeps for
// the next read (see trim).
func (w *wal) read(off, n int64) ([]byte, error) {
	if int64(cap(w.rbuf)) < n {
		w.rbuf = make([]byte, n)
	}
	buf := w.rbuf[:n]
	if _, err := w.f.ReadAt(buf, off); err != nil {
		return nil, fmt.Errorf("bolt: read %s: %w", w.path, err)
	}
	return buf, nil
}

// applyRecords applies records, the last of which is last, in one bbolt
// transaction that also records last. Each record is finished (its counts
// written, the messages it left unreferenced dropped) before the next, so
// that the next meets the state Apply checked it against. overwrites is
// as cancelled has it.
func (s *Store) applyRecords(w *wal, recs [][]byte, last uint64, overwrites func(i int) bool) error {
	skip := s.canc.cancelled(recs, overwrites, s.yield.maybe)
	err := s.updateTx(func(tx *bbolt.Tx) error {
		n := int32(0) // the op's place among the chunk's, as cancelled counts them
		skipped := func() bool {
			n++
			if len(skip) > 0 && skip[0] == n {
				skip = skip[1:]
				return true
			}
			return false
		}
		a := newApplier(tx, s.path)
		for _, rec := range recs {
			s.yield.maybe()
			a.next()
			err := eachOp(rec, skipped, func(op *walOp) error {
				var err error
				if op.op.Kind == persistence.OpPutMessage {
					err = a.putEncodedMessage(op.id, op.raw)
				} else {
					err = a.apply(&op.op)
				}
				if err != nil {
					return fmt.Errorf("bolt: log op (%s): %w", kindName(op.op.Kind), err)
				}
				return nil
			})
			if errors.Is(err, errRecord) {
				return fmt.Errorf("bolt: %s: %w: %v", w.path, ErrCorrupt, err)
			}
			if err == nil {
				err = a.finish()
			}
			if err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(keyWALSeq, binary.AppendUvarint(nil, last))
	})
	if err != nil && (errors.Is(err, ErrCorrupt) || persistence.Malformed(err)) {
		// The shadow took what the file refuses: they disagree, and no
		// later record can be trusted to apply either.
		s.walErr.CompareAndSwap(nil, &err)
	}
	return err
}

// canceller is cancelled's scratch, kept from one chunk to the next of a
// checkpoint (a chunk of 4 MiB holds tens of thousands of entries), and
// the sizes the last checkpoint needed, to make the next one's at once:
// grown from nothing by appends, they took a third of the pass.
type canceller struct {
	sessions map[string]int32
	puts     []cancelEntry
	dels     []cancelEntry
	messages []cancelEntry // their at and msg
	msgs     map[uint64]cancelUses
	skip     []int32
	// used is the most of each a chunk took in this checkpoint, need what
	// the next one makes room for.
	used, need [3]int
}

// An entry is its session's number and its Seq; the deletes, sorted, are
// searched for each put, where maps keyed by strings took most of the
// pass.
type cancelEntry struct {
	sess int32
	seq  uint64
	at   int32
	made bool // a put Apply took with no entry in the store (see cancelled)
	msg  uint64
}

type cancelUses struct{ refs, undone int32 } // refs: by what is applied

// keptCancelEntries is the most room for entries the scratch keeps
// between checkpoints (~100 KB).
const keptCancelEntries = 4096

// trim ends a checkpoint: a burst's scratch is not kept, only its sizes,
// which a smaller checkpoint between two bursts halves (one that found
// nothing to apply leaves them).
func (c *canceller) trim() {
	if c.used != [3]int{} {
		for i := range c.need {
			c.need[i] = max(c.used[i], c.need[i]/2)
		}
	}
	c.used = [3]int{}
	if cap(c.puts)+cap(c.dels)+cap(c.messages) > keptCancelEntries {
		*c = canceller{need: c.need}
	}
}

// room returns s emptied, with room for n entries.
func room(s []cancelEntry, n int) []cancelEntry {
	if cap(s) < n {
		return make([]cancelEntry, 0, n)
	}
	return s[:0]
}

// cancelled returns, in order, the places (counted from 1 across recs) of
// the operations a chunk need not apply: the entries of a message put and
// deleted again within the chunk (a message its subscribers, or a
// bridge's remote, acknowledged within walApplyAfter), and the message,
// when nothing else in the chunk refers to it. The file ends as it would
// have, and so does every record in between, as far as the records that
// follow can tell: the message's count goes up and down by the same puts
// and deletes, and no record finds it missing that would have found it
// (each record is finished before the next, and a message nothing refers
// to at the end of a record is dropped).
//
// A delete runs, for an entry the file may hold, unless the last put or
// delete of its entry before it in the chunk is a put cancelled here that
// made the entry (the store held none when Apply took it): then the file
// holds none, and the delete would only look. That holds by induction
// over the chunk's operations: where Apply's state has no entry the file
// has none either, as a put cancelled only leaves one out, a delete that
// runs or a DeleteSession removes it, and a delete cancelled meets none.
// overwrites(i) reports whether record i may hold a put over an entry
// the store held; nil when that is not known (a replay): no delete is
// cancelled then.
//
// nil when nothing is cancelled. It reads the records without decoding
// what it does not need: a chunk's worth of records is read again for the
// apply. The result is valid until the next call.
//
// between, if not nil, is called after each record is read.
func (c *canceller) cancelled(recs [][]byte, overwrites func(i int) bool, between func()) []int32 {
	if c.sessions == nil {
		c.sessions = make(map[string]int32)
		c.msgs = make(map[uint64]cancelUses)
	}
	clear(c.sessions)
	clear(c.msgs)
	puts, dels, messages := room(c.puts, c.need[0]), room(c.dels, c.need[1]), room(c.messages, c.need[2])
	defer func() {
		c.puts, c.dels, c.messages = puts, dels, messages
		c.used = [3]int{max(c.used[0], len(puts)), max(c.used[1], len(dels)), max(c.used[2], len(messages))}
	}()
	// A chunk's entries are mostly of a few sessions, in runs.
	var last []byte
	lastN := int32(-1)
	number := func(b []byte) int32 {
		if lastN >= 0 && string(b) == string(last) {
			return lastN
		}
		n, ok := c.sessions[string(b)]
		if !ok {
			n = int32(len(c.sessions))
			c.sessions[string(b)] = n
		}
		last, lastN = b, n
		return n
	}
	n := int32(0)
	for i, rec := range recs {
		made := overwrites != nil && !overwrites(i)
		scanOps(rec, func(o *opScan) {
			n++
			switch o.kind {
			case persistence.OpDeleteOutbound:
				dels = append(dels, cancelEntry{sess: number(o.session), seq: o.seq, at: n})
			case persistence.OpPutOutbound:
				puts = append(puts, cancelEntry{sess: number(o.session), seq: o.seq, at: n, msg: o.msg, made: made})
			case persistence.OpPutRetained:
				u := c.msgs[o.msg]
				u.refs++
				c.msgs[o.msg] = u
			case persistence.OpPutMessage:
				messages = append(messages, cancelEntry{at: n, msg: o.msg})
			}
		})
		if between != nil {
			between()
		}
	}
	if len(dels) == 0 {
		return nil
	}
	byKey := func(a, b cancelEntry) int {
		if c := cmp.Compare(a.sess, b.sess); c != 0 {
			return c
		}
		if c := cmp.Compare(a.seq, b.seq); c != 0 {
			return c
		}
		return cmp.Compare(a.at, b.at)
	}
	// Both in key order (a queue's puts are already), walked side by side.
	slices.SortFunc(dels, byKey)
	slices.SortFunc(puts, byKey)
	j := 0
	for _, p := range puts {
		// The last delete of p's entry is the last of its run.
		for j < len(dels) && (dels[j].sess < p.sess || dels[j].sess == p.sess && dels[j].seq <= p.seq) {
			j++
		}
		undone := j > 0 && dels[j-1].sess == p.sess && dels[j-1].seq == p.seq && dels[j-1].at > p.at
		u := c.msgs[p.msg]
		if undone {
			u.undone++
		} else {
			u.refs++
		}
		c.msgs[p.msg] = u
	}
	skip := c.skip[:0]
	gone := func(id uint64) bool { u := c.msgs[id]; return u.undone > 0 && u.refs == 0 }
	for _, p := range puts {
		if gone(p.msg) {
			skip = append(skip, p.at)
		}
	}
	for _, m := range messages {
		if gone(m.msg) {
			skip = append(skip, m.at)
		}
	}
	if overwrites != nil {
		k := 0
		for i, d := range dels {
			// puts[k-1] is the last put before d, of d's entry or another.
			for k < len(puts) && byKey(puts[k], d) < 0 {
				k++
			}
			if k == 0 {
				continue
			}
			p := puts[k-1]
			if p.sess != d.sess || p.seq != d.seq || !p.made || !gone(p.msg) {
				continue
			}
			if i > 0 && dels[i-1].sess == d.sess && dels[i-1].seq == d.seq && dels[i-1].at > p.at {
				continue // a delete between them
			}
			skip = append(skip, d.at)
		}
	}
	slices.Sort(skip)
	c.skip = skip
	if len(skip) == 0 {
		return nil
	}
	return skip
}

// opScan is what cancelled reads of one operation of a record.
type opScan struct {
	kind    persistence.OpKind
	session []byte // of an outbound entry
	seq     uint64 // its Seq
	msg     uint64 // the message a PutMessage, PutOutbound or PutRetained is of
}

// scanOps reads a record's operations as eachOp does, without decoding
// (or copying) more than opScan holds. A record eachOp cannot read ends
// the scan where it fails; the apply then reports it.
func scanOps(rec []byte, fn func(o *opScan)) {
	r := reader{b: rec}
	var o opScan
	for len(r.b) > 0 {
		if scanOp(&r, &o) != nil {
			return
		}
		fn(&o)
	}
}

// scanOp reads the next operation of r into o; an error when it does not
// read.
func scanOp(r *reader, o *opScan) error {
	*o = opScan{kind: persistence.OpKind(r.byte())}
	switch o.kind {
	case persistence.OpPutMessage:
		o.msg = r.uvarint()
		r.bytes()
	case persistence.OpPutSession, persistence.OpPutWill:
		r.bytes()
		r.bytes()
	case persistence.OpPutRetained:
		r.bytes()
		o.msg = r.uvarint()
	case persistence.OpDeleteRetained, persistence.OpDeleteSession, persistence.OpDeleteWill:
		r.bytes()
	case persistence.OpPutSubscription:
		r.bytes()
		r.bytes()
		r.bytes()
	case persistence.OpDeleteSubscription:
		r.bytes()
		r.bytes()
	case persistence.OpPutOutbound:
		o.session = r.bytes()
		o.seq = r.uvarint()
		v := reader{b: r.bytes()}
		v.byte() // the record format
		v.byte() // flags
		o.msg = v.uvarint()
		if v.err != nil {
			return v.err
		}
	case persistence.OpDeleteOutbound:
		o.session = r.bytes()
		o.seq = r.uvarint()
	case persistence.OpPutAwaitingRel, persistence.OpDeleteAwaitingRel:
		r.bytes()
		r.uvarint()
	default:
		return fmt.Errorf("%w: operation kind %d", errRecord, o.kind)
	}
	return r.err
}
