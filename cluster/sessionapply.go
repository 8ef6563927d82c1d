package cluster

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"mqttd/persistence"
)

// errClosed is Apply on a closed SessionStore.
var errClosed = errors.New("cluster: session store closed")

// Apply makes b's changes: the sessions' in one atomic write to the
// stream (several, in order, past maxAtomic messages), retained
// messages' in the local store, at the same time. It returns once both
// hold them, or with the first error; then the index is as before the
// batch. A write whose answers were lost is sent again until one is
// answered (publishAtomic); one never answered (errUnsettled) may have
// left in the stream what the index no longer says: the broker does not
// acknowledge what the batch held, its client sends it again, and a
// node that takes the session over may deliver such a message twice.
func (s *SessionStore) Apply(b *persistence.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	tx := sessionTx{s: s, at: make(map[string]int)}
	for i := range b.Ops {
		if err := tx.apply(&b.Ops[i]); err != nil {
			tx.Rollback()
			return err
		}
	}
	if err := tx.writeRecords(); err != nil {
		tx.Rollback()
		return err
	}
	if err := s.write(tx.out, &tx.local); err != nil {
		tx.Rollback()
		return err
	}
	tx.collect()
	return nil
}

// write sends the stream's messages and applies the local batch, each
// when not empty, at the same time.
func (s *SessionStore) write(out []stateMsg, local *persistence.Batch) error {
	switch {
	case local.Len() == 0 && len(out) == 0:
		return nil
	case local.Len() == 0:
		return publishAtomic(s.nc, s.batchID, out, s.cfg.Timeout, &s.writes)
	case len(out) == 0:
		return s.local.Apply(local)
	}
	var wg sync.WaitGroup
	var localErr error
	wg.Go(func() { localErr = s.local.Apply(local) })
	err := publishAtomic(s.nc, s.batchID, out, s.cfg.Timeout, &s.writes)
	wg.Wait()
	return errors.Join(err, localErr)
}

// sessionTx is one batch being applied to the index (Undo reverts it).
type sessionTx struct {
	persistence.Undo
	s *SessionStore
	// out is what the batch writes to the stream, one message per
	// subject: at maps a subject to its message's index, and a later
	// write of the subject replaces the earlier.
	out []stateMsg
	at  map[string]int
	// dirty are the sessions whose rec record is written at the end.
	dirty []string
	// local is the retained messages' part of the batch.
	local     persistence.Batch
	localMsgs map[uint64]bool
	// released are the messages whose count went down, or that were put:
	// those at 0 at the end of the batch are dropped then.
	released []uint64
}

func (tx *sessionTx) collect() {
	for _, id := range tx.released {
		if m := tx.s.msgs[id]; m != nil && m.refs == 0 {
			delete(tx.s.msgs, id)
		}
	}
}

func (tx *sessionTx) emit(subject string, data []byte) { tx.emitTTL(subject, data, "") }

// emitTTL is emit of a record that expires after ttl (Nats-TTL's
// format); "": never, or a deleted record's tombstoneTTL.
func (tx *sessionTx) emitTTL(subject string, data []byte, ttl string) {
	if i, ok := tx.at[subject]; ok {
		tx.out[i].data, tx.out[i].ttl = data, ttl
		return
	}
	tx.at[subject] = len(tx.out)
	tx.out = append(tx.out, stateMsg{subject: subject, data: data, ttl: ttl})
}

func (tx *sessionTx) apply(op *persistence.Op) error {
	if err := op.Valid(); err != nil {
		return err
	}
	switch op.Kind {
	case persistence.OpPutMessage:
		return tx.putMessage(op.Message)
	case persistence.OpPutSession:
		tx.putSession(op.Session)
		return nil
	case persistence.OpDeleteSession:
		tx.deleteSession(op.SessionID)
		return nil
	case persistence.OpPutRetained:
		return tx.putRetained(op.Topic, op.MessageID)
	case persistence.OpDeleteRetained:
		tx.deleteRetained(op.Topic)
		return nil
	}
	ss := tx.s.sessions[op.SessionID]
	if ss == nil {
		return persistence.ErrNoSession
	}
	switch op.Kind {
	case persistence.OpPutSubscription:
		sub := op.Subscription
		sub.Filter = strings.Clone(sub.Filter)
		persistence.SetUndo(&tx.Undo, ss.rec.subs, sub.Filter, sub, true)
		tx.markDirty(op.SessionID)
	case persistence.OpDeleteSubscription:
		if _, ok := ss.rec.subs[op.Filter]; ok {
			persistence.SetUndo(&tx.Undo, ss.rec.subs, op.Filter, persistence.Subscription{}, false)
			tx.markDirty(op.SessionID)
		}
	case persistence.OpPutOutbound:
		return tx.putOutbound(ss, op.Outbound)
	case persistence.OpDeleteOutbound:
		if old, ok := ss.entries[op.Seq]; ok {
			persistence.SetUndo(&tx.Undo, ss.entries, op.Seq, persistence.Outbound{}, false)
			tx.unref(old.MessageID)
			tx.emit(ss.subj.entry(op.Seq), nil)
		}
	case persistence.OpPutAwaitingRel:
		return tx.putRel(ss, op)
	case persistence.OpDeleteAwaitingRel:
		if _, ok := ss.rels[op.PacketID]; ok {
			persistence.SetUndo(&tx.Undo, ss.rels, op.PacketID, nil, false)
			tx.emit(ss.subj.rel(op.PacketID), nil)
		}
	case persistence.OpPutStamp:
		tx.putStamp(ss, op.Stamp.Stamp, op.Stamp.Expiry)
	case persistence.OpPutWill:
		w := *op.Will
		w.Message = cloneMessage(&op.Will.Message)
		tx.setWill(ss, &w)
	case persistence.OpDeleteWill:
		if ss.rec.will != nil {
			tx.setWill(ss, nil)
		}
	}
	return nil
}

func (tx *sessionTx) markDirty(id string) {
	if !slices.Contains(tx.dirty, id) {
		tx.dirty = append(tx.dirty, id)
	}
}

func (tx *sessionTx) putMessage(m *persistence.Message) error {
	if _, ok := tx.s.msgs[m.ID]; ok {
		return nil
	}
	enc, err := persistence.AppendMessage(nil, m)
	if err != nil {
		return err
	}
	persistence.SetUndo(&tx.Undo, tx.s.msgs, m.ID, &storedMessage{enc: enc}, true)
	tx.released = append(tx.released, m.ID)
	return nil
}

func (tx *sessionTx) putSession(rec persistence.Session) {
	rec.ID = strings.Clone(rec.ID)
	rec.Username = strings.Clone(rec.Username)
	rec.Listener = strings.Clone(rec.Listener)
	if ss := tx.s.sessions[rec.ID]; ss != nil {
		// Only the record is replaced: what the session holds stays.
		old := ss.rec.session
		ss.rec.session = rec
		tx.Push(func() { ss.rec.session = old })
	} else {
		persistence.SetUndo(&tx.Undo, tx.s.sessions, rec.ID, &storedSession{
			subj:    subjectsOf(tx.s.cfg.Cluster, rec.ID),
			rec:     sessionRec{session: rec, node: tx.s.cfg.Node, subs: make(map[string]persistence.Subscription)},
			entries: make(map[uint64]persistence.Outbound),
			rels:    make(map[uint16]*persistence.Forward),
			stamps:  make(map[persistence.Stamp]int64),
		}, true)
	}
	tx.markDirty(rec.ID)
}

// deleteSession takes the session out whole, writing a tombstone on each
// of its subjects, the record's first: a session read back without its
// record is no session, whatever entries of it a batch cut in several
// writes left.
func (tx *sessionTx) deleteSession(id string) {
	ss := tx.s.sessions[id]
	if ss == nil {
		return
	}
	persistence.SetUndo(&tx.Undo, tx.s.sessions, id, nil, false)
	tx.emit(ss.subj.rec(), nil)
	for seq, o := range ss.entries {
		tx.unref(o.MessageID)
		tx.emit(ss.subj.entry(seq), nil)
	}
	for pid := range ss.rels {
		tx.emit(ss.subj.rel(pid), nil)
	}
	now := time.Now().UnixNano()
	for stamp, expiry := range ss.stamps {
		if expiry > now { // the stream dropped the others
			tx.emit(ss.subj.stamp(stamp), nil)
		}
	}
}

// putStamp records a stamp of ss, its record expiring with it: the
// stream drops it then, whatever happens to the session. Every 256th
// stamp the session takes, the index lets go of its expired ones (the
// stream has dropped them), so that it holds no more than the stream.
func (tx *sessionTx) putStamp(ss *storedSession, stamp persistence.Stamp, expiry int64) {
	now := time.Now()
	if len(ss.stamps)%256 == 255 {
		for st, e := range ss.stamps {
			if e <= now.UnixNano() {
				persistence.SetUndo(&tx.Undo, ss.stamps, st, 0, false)
			}
		}
	}
	persistence.SetUndo(&tx.Undo, ss.stamps, stamp, expiry, true)
	ttl := max(1, (time.Unix(0, expiry).Sub(now)+time.Second-1)/time.Second)
	tx.emitTTL(ss.subj.stamp(stamp), appendStamp(nil, expiry), strconv.FormatInt(int64(ttl), 10)+"s")
}

// putRel records an inbound QoS 2 id, a Forward of its message when op
// carries one.
func (tx *sessionTx) putRel(ss *storedSession, op *persistence.Op) error {
	var f *persistence.Forward
	if op.Message != nil {
		f = &persistence.Forward{PacketID: op.PacketID, Stamp: op.Stamp.Stamp, Message: cloneMessage(op.Message)}
	}
	data, err := appendRel(nil, f)
	if err != nil {
		return err
	}
	if err := tx.fits(data, "awaiting-rel id", uint64(op.PacketID)); err != nil {
		return err
	}
	persistence.SetUndo(&tx.Undo, ss.rels, op.PacketID, f, true)
	tx.emit(ss.subj.rel(op.PacketID), data)
	return nil
}

// fits refuses a record larger than the NATS servers take in a message:
// the committer then fails its unit alone.
func (tx *sessionTx) fits(data []byte, what string, n uint64) error {
	// The batch's headers and subject take well under a kilobyte.
	if max := tx.s.nc.MaxPayload() - 1024; int64(len(data)) > max {
		return fmt.Errorf("%w: %s %d: %d bytes, over what the NATS servers take in a message (max_payload, less 1 KiB: %d)",
			persistence.ErrBadOp, what, n, len(data), max)
	}
	return nil
}

func (tx *sessionTx) putOutbound(ss *storedSession, o persistence.Outbound) error {
	m := tx.s.msgs[o.MessageID]
	if m == nil {
		return persistence.ErrNoMessage
	}
	data, err := appendEntry(make([]byte, 0, 16+len(m.enc)), &o, m.enc)
	if err != nil {
		return fmt.Errorf("%w: outbound %d", err, o.Seq)
	}
	if err := tx.fits(data, "outbound", o.Seq); err != nil {
		return err
	}
	o.SubIDs = slices.Clone(o.SubIDs)
	old, had := ss.entries[o.Seq]
	persistence.SetUndo(&tx.Undo, ss.entries, o.Seq, o, true)
	// The new message is counted before the old one is let go: they may
	// be the same.
	tx.ref(o.MessageID)
	if had {
		tx.unref(old.MessageID)
	}
	tx.emit(ss.subj.entry(o.Seq), data)
	return nil
}

func (tx *sessionTx) putRetained(topic string, id uint64) error {
	m := tx.s.msgs[id]
	if m == nil {
		return persistence.ErrNoMessage
	}
	if !tx.localMsgs[id] {
		// The local store needs the message in this batch, or to have it
		// already: this store cannot know which, and putting a message
		// it has is nothing.
		pm := &persistence.Message{ID: id}
		if err := persistence.DecodeMessage(m.enc, pm); err != nil {
			return err
		}
		if tx.localMsgs == nil {
			tx.localMsgs = make(map[uint64]bool)
		}
		tx.localMsgs[id] = true
		tx.local.PutMessage(pm)
	}
	topic = strings.Clone(topic)
	old, had := tx.s.retained[topic]
	persistence.SetUndo(&tx.Undo, tx.s.retained, topic, id, true)
	tx.ref(id)
	if had {
		tx.unref(old)
	}
	tx.local.PutRetained(topic, id)
	return nil
}

func (tx *sessionTx) deleteRetained(topic string) {
	old, had := tx.s.retained[topic]
	if !had {
		return
	}
	persistence.SetUndo(&tx.Undo, tx.s.retained, topic, 0, false)
	tx.unref(old)
	tx.local.DeleteRetained(topic)
}

func (tx *sessionTx) setWill(ss *storedSession, w *persistence.Will) {
	old := ss.rec.will
	ss.rec.will = w
	tx.Push(func() { ss.rec.will = old })
	tx.markDirty(ss.rec.session.ID)
}

// ref is called only for messages present: the callers checked, or hold
// a reference that kept it; unref also for an adopted entry's, which the
// index does not know.
func (tx *sessionTx) ref(id uint64) {
	m := tx.s.msgs[id]
	m.refs++
	tx.Push(func() { m.refs-- })
}

func (tx *sessionTx) unref(id uint64) {
	m := tx.s.msgs[id]
	if m == nil {
		return // an adopted entry's (Adopt)
	}
	m.refs--
	tx.Push(func() { m.refs++ })
	tx.released = append(tx.released, id)
}

// writeRecords writes the rec record of every session the batch changed
// and kept.
func (tx *sessionTx) writeRecords() error {
	for _, id := range tx.dirty {
		ss := tx.s.sessions[id]
		if ss == nil {
			continue
		}
		data, err := encodeRec(&ss.rec)
		if err != nil {
			return err
		}
		tx.emit(ss.subj.rec(), data)
	}
	return nil
}
