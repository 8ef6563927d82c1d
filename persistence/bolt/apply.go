package bolt

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"runtime/debug"
	"slices"

	"go.etcd.io/bbolt"

	"mqttd/persistence"
)

// Apply makes the batch's changes in one bbolt transaction, so one fsync
// under Sync however many ops it holds. An op that does not hold together
// returns its error from inside the transaction, which bbolt then rolls
// back: nothing of the batch is applied.
func (s *Store) Apply(b *persistence.Batch) (err error) {
	if p := s.syncErr.Load(); p != nil {
		return fmt.Errorf("%w; commits since may be lost, so the store takes no more", *p)
	}
	if b.Len() == 0 {
		return nil // no transaction: bbolt writes a meta page even for an empty one
	}
	if !s.hashedSchema.Load() && holdsHashed(b) {
		if err := s.markHashed(); err != nil {
			return err
		}
	}
	if s.wal != nil {
		return s.logApply(b)
	}
	err = s.update(func(a *applier) error {
		for i := range b.Ops {
			op := &b.Ops[i]
			if err := a.apply(op); err != nil {
				return fmt.Errorf("bolt: op %d (%s): %w", i, kindName(op.Kind), err)
			}
		}
		return nil
	})
	if err == nil {
		s.committed()
	}
	return err
}

// holdsHashed reports whether b puts a key that holds a hash (see
// maxPlainKey); an op on a session whose key does follows its PutSession.
func holdsHashed(b *persistence.Batch) bool {
	for i := range b.Ops {
		op := &b.Ops[i]
		switch op.Kind {
		case persistence.OpPutSession:
			if len(op.Session.ID) > maxPlainKey {
				return true
			}
		case persistence.OpPutSubscription:
			if hashedName(op.Subscription.Filter) {
				return true
			}
		case persistence.OpPutRetained:
			if hashedName(op.Topic) {
				return true
			}
		}
	}
	return false
}

// markHashed marks the file schemaHashed, in a transaction of its own
// before the first batch that holds a hashed key reaches the file or the
// log: a build that cannot read such keys then refuses both.
func (s *Store) markHashed() error {
	err := s.updateTx(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keyVersion, []byte{schemaHashed})
	})
	if err == nil {
		s.hashedSchema.Store(true)
	}
	return err
}

// update runs fn in one bbolt transaction and writes the counts it
// changed.
func (s *Store) update(fn func(a *applier) error) error {
	return s.updateTx(func(tx *bbolt.Tx) error {
		a := newApplier(tx, s.path)
		if err := fn(a); err != nil {
			return err
		}
		return a.finish()
	})
}

// updateTx runs fn in one bbolt transaction, damage met there being
// ErrCorrupt.
func (s *Store) updateTx(fn func(tx *bbolt.Tx) error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer s.guard(&err)
	return s.db.Update(fn)
}

// applier is one batch being applied, or the records of a log's chunk
// one after another (next).
type applier struct {
	messages, refs, retained, sessions, subs, out, rel, wills *bbolt.Bucket
	// Lookups go through a cursor per bucket, kept for the transaction:
	// a Get makes a cursor and grows its stack from nothing each time.
	msgC, refsC, outC *bbolt.Cursor

	path string // for errors
	// counts are the reference counts the batch touched, read on first
	// use and written once at the end; a message still at 0 then (or put
	// and never referred to) is deleted then and not at once, as a later op
	// of the batch may refer to it again.
	counts map[uint64]*count
	// added are the messages the batch put, written at finish only if
	// something refers to them then: a message delivered and acknowledged
	// within one batch costs no write.
	added map[uint64][]byte // encoded
	ids   []uint64          // finish's scratch
}

type count struct{ was, now uint64 }

func newApplier(tx *bbolt.Tx, path string) *applier {
	a := &applier{
		path:     path,
		messages: tx.Bucket(bucketMessages),
		refs:     tx.Bucket(bucketRefs),
		retained: tx.Bucket(bucketRetained),
		sessions: tx.Bucket(bucketSessions),
		subs:     tx.Bucket(bucketSubs),
		out:      tx.Bucket(bucketOut),
		rel:      tx.Bucket(bucketRel),
		wills:    tx.Bucket(bucketWills),
		counts:   make(map[uint64]*count),
		added:    make(map[uint64][]byte),
	}
	a.msgC, a.refsC, a.outC = a.messages.Cursor(), a.refs.Cursor(), a.out.Cursor()
	// Their keys grow (message IDs, and Seqs within a session): bbolt's
	// default split leaves such pages half full, which doubled the pages
	// a queued message costs to write.
	a.messages.FillPercent, a.refs.FillPercent, a.out.FillPercent = 1, 1, 1
	return a
}

// next readies a for the next batch of the same transaction, once the
// last is finished.
func (a *applier) next() {
	clear(a.counts)
	clear(a.added)
}

// get is Bucket.Get through c, a cursor of the bucket. The buckets hold
// no buckets, so a key found has its value.
func get(c *bbolt.Cursor, key []byte) []byte {
	if k, v := c.Seek(key); bytes.Equal(k, key) {
		return v
	}
	return nil
}

// validOp is op.Valid for this store, which keeps neither Forwards nor
// stamps: only a cluster's replicated store does (persistence.ForwardKeeper).
func validOp(op *persistence.Op) error {
	if op.Kind == persistence.OpPutStamp || op.Kind == persistence.OpPutAwaitingRel && op.Message != nil {
		return fmt.Errorf("%w: a bbolt store keeps no forwards or stamps", persistence.ErrBadOp)
	}
	return op.Valid()
}

func (a *applier) apply(op *persistence.Op) error {
	if err := validOp(op); err != nil {
		return err
	}
	switch op.Kind {
	case persistence.OpPutMessage:
		return a.putMessage(op.Message)
	case persistence.OpPutSession:
		return a.putSession(&op.Session)
	case persistence.OpDeleteSession:
		return a.deleteSession(op.SessionID)
	case persistence.OpPutRetained:
		return a.putRetained(op.Topic, op.MessageID)
	case persistence.OpDeleteRetained:
		return a.deleteRetained(op.Topic)
	}
	if op.Kind < persistence.OpPutSubscription || op.Kind > persistence.OpDeleteWill {
		return persistence.ErrBadOp
	}
	sk := sessKey(op.SessionID, 0)
	if a.sessions.Get(sk) == nil {
		return persistence.ErrNoSession
	}
	return a.applyToSession(op)
}

// applyToSession does the ops on a session known to exist.
func (a *applier) applyToSession(op *persistence.Op) error {
	id := op.SessionID
	switch op.Kind {
	case persistence.OpPutSubscription:
		v, err := encodeSubscription(&op.Subscription)
		if err != nil {
			return err
		}
		return a.subs.Put(subKey(id, op.Subscription.Filter), v)
	case persistence.OpDeleteSubscription:
		return a.subs.Delete(subKey(id, op.Filter))
	case persistence.OpPutOutbound:
		return a.putOutbound(id, &op.Outbound)
	case persistence.OpDeleteOutbound:
		return a.deleteOutbound(outKey(id, op.Seq))
	case persistence.OpPutAwaitingRel:
		return a.rel.Put(relKey(id, op.PacketID), []byte{})
	case persistence.OpDeleteAwaitingRel:
		return a.rel.Delete(relKey(id, op.PacketID))
	case persistence.OpPutWill:
		if op.Will == nil {
			return persistence.ErrBadOp
		}
		v, err := encodeWill(op.Will)
		if err != nil {
			return err
		}
		return a.wills.Put(sessKey(id, 0), v)
	default: // OpDeleteWill
		return a.wills.Delete(sessKey(id, 0))
	}
}

func (a *applier) putMessage(m *persistence.Message) error {
	if m == nil {
		return persistence.ErrBadOp
	}
	if a.stored(m.ID) {
		return nil // the first stays
	}
	v, err := encodeMessageRecord(m)
	if err != nil {
		return err
	}
	return a.putEncodedMessage(m.ID, v)
}

// putEncodedMessage is putMessage of a message record already encoded.
func (a *applier) putEncodedMessage(id uint64, v []byte) error {
	if a.stored(id) {
		return nil
	}
	a.added[id] = v
	// Counted from 0, so that finish drops it if nothing refers to it.
	a.counts[id] = &count{}
	return nil
}

// stored reports whether message id is in the store or put by the batch.
func (a *applier) stored(id uint64) bool {
	return a.added[id] != nil || get(a.msgC, idKey(id)) != nil
}

func (a *applier) putSession(s *persistence.Session) error {
	if s.ID == "" {
		return persistence.ErrBadOp
	}
	// Only the record is replaced: what the session holds stays.
	return a.sessions.Put(sessKey(s.ID, 0), encodeSession(s))
}

func (a *applier) deleteSession(id string) error {
	sk := sessKey(id, 0)
	if a.sessions.Get(sk) == nil {
		return nil
	}
	err := deletePrefix(a.out, sk, func(k, v []byte) error {
		o, err := decodeOutbound(0, v)
		if err != nil {
			return recordErr(a.path, bucketOut, k, err)
		}
		return a.unref(o.MessageID)
	})
	if err != nil {
		return err
	}
	if err := deletePrefix(a.subs, sk, nil); err != nil {
		return err
	}
	if err := deletePrefix(a.rel, sk, nil); err != nil {
		return err
	}
	if err := a.wills.Delete(sk); err != nil {
		return err
	}
	return a.sessions.Delete(sk)
}

// deletePrefix deletes the keys starting with prefix, calling each first
// if it is not nil. It collects the keys before deleting them, because a
// bbolt cursor may skip the entry after one it deleted.
func deletePrefix(b *bbolt.Bucket, prefix []byte, each func(k, v []byte) error) error {
	var keys [][]byte
	c := b.Cursor()
	for k, v := c.Seek(prefix); k != nil && hasPrefix(k, prefix); k, v = c.Next() {
		if each != nil {
			if err := each(k, v); err != nil {
				return err
			}
		}
		keys = append(keys, append([]byte(nil), k...))
	}
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

func hasPrefix(k, prefix []byte) bool {
	return len(k) >= len(prefix) && string(k[:len(prefix)]) == string(prefix)
}

func (a *applier) putOutbound(id string, o *persistence.Outbound) error {
	if !a.stored(o.MessageID) {
		return persistence.ErrNoMessage
	}
	v, err := encodeOutbound(o)
	if err != nil {
		return err
	}
	k := outKey(id, o.Seq)
	old := get(a.outC, k)
	var oldID uint64
	if old != nil {
		prev, err := decodeOutbound(o.Seq, old)
		if err != nil {
			return recordErr(a.path, bucketOut, k, err)
		}
		oldID = prev.MessageID
	}
	if err := a.out.Put(k, v); err != nil {
		return err
	}
	if err := a.ref(o.MessageID); err != nil {
		return err
	}
	if old != nil {
		return a.unref(oldID)
	}
	return nil
}

func (a *applier) deleteOutbound(k []byte) error {
	v := get(a.outC, k)
	if v == nil {
		return nil
	}
	o, err := decodeOutbound(0, v)
	if err != nil {
		return recordErr(a.path, bucketOut, k, err)
	}
	// At the entry already: no second search.
	if err := a.outC.Delete(); err != nil {
		return err
	}
	return a.unref(o.MessageID)
}

func (a *applier) putRetained(topic string, id uint64) error {
	if topic == "" {
		return persistence.ErrBadOp // bbolt has no empty keys; MQTT no empty topics
	}
	if !a.stored(id) {
		return persistence.ErrNoMessage
	}
	k := appendName(nil, topic)
	old := a.retained.Get(k)
	var oldID uint64
	if old != nil {
		var err error
		if _, oldID, err = decodeRetained(k, old); err != nil {
			return recordErr(a.path, bucketRetained, k, err)
		}
	}
	if err := a.retained.Put(k, encodeRetained(topic, id)); err != nil {
		return err
	}
	if err := a.ref(id); err != nil {
		return err
	}
	if old != nil {
		return a.unref(oldID)
	}
	return nil
}

func (a *applier) deleteRetained(topic string) error {
	if topic == "" {
		return nil
	}
	k := appendName(nil, topic)
	old := a.retained.Get(k)
	if old == nil {
		return nil
	}
	_, id, err := decodeRetained(k, old)
	if err != nil {
		return recordErr(a.path, bucketRetained, k, err)
	}
	if err := a.retained.Delete(k); err != nil {
		return err
	}
	return a.unref(id)
}

func (a *applier) count(id uint64) (*count, error) {
	if c := a.counts[id]; c != nil {
		return c, nil
	}
	k := idKey(id)
	n, err := decodeCount(get(a.refsC, k))
	if err != nil {
		return nil, recordErr(a.path, bucketRefs, k, err)
	}
	c := &count{was: n, now: n}
	a.counts[id] = c
	return c, nil
}

func (a *applier) ref(id uint64) error {
	c, err := a.count(id)
	if err == nil {
		c.now++
	}
	return err
}

func (a *applier) unref(id uint64) error {
	c, err := a.count(id)
	if err != nil {
		return err
	}
	if c.now == 0 {
		return recordErr(a.path, bucketRefs, idKey(id), fmt.Errorf("%w: count below zero", errRecord))
	}
	c.now--
	return nil
}

// finish writes the counts the batch changed and drops the messages left
// without references, in the order of their keys: puts of new messages
// then append where bbolt's node ends rather than shift it.
func (a *applier) finish() error {
	a.ids = a.ids[:0]
	for id := range a.counts {
		a.ids = append(a.ids, id)
	}
	slices.Sort(a.ids)
	for _, id := range a.ids {
		c := a.counts[id]
		k := idKey(id)
		var err error
		v := a.added[id]
		switch {
		case v != nil && c.now == 0:
			continue // put and let go within the batch: never written
		case v != nil:
			if err = a.messages.Put(k, v); err == nil {
				err = a.refs.Put(k, binary.AppendUvarint(nil, c.now))
			}
		case c.now == 0:
			if err = a.messages.Delete(k); err == nil {
				err = a.refs.Delete(k)
			}
		case c.now != c.was:
			err = a.refs.Put(k, binary.AppendUvarint(nil, c.now))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// recordErr names the bucket and key of a damaged record, for a look
// with the bbolt tool.
func recordErr(path string, bucket, key []byte, err error) error {
	return fmt.Errorf("bolt: %s: %w: bucket %s, key %x: %v", path, ErrCorrupt, bucket, key, err)
}

var kindNames = [...]string{
	persistence.OpPutMessage:         "PutMessage",
	persistence.OpPutSession:         "PutSession",
	persistence.OpDeleteSession:      "DeleteSession",
	persistence.OpPutSubscription:    "PutSubscription",
	persistence.OpDeleteSubscription: "DeleteSubscription",
	persistence.OpPutOutbound:        "PutOutbound",
	persistence.OpDeleteOutbound:     "DeleteOutbound",
	persistence.OpPutAwaitingRel:     "PutAwaitingRel",
	persistence.OpDeleteAwaitingRel:  "DeleteAwaitingRel",
	persistence.OpPutRetained:        "PutRetained",
	persistence.OpDeleteRetained:     "DeleteRetained",
	persistence.OpPutWill:            "PutWill",
	persistence.OpDeleteWill:         "DeleteWill",
	persistence.OpPutStamp:           "PutStamp",
}

func kindName(k persistence.OpKind) string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("kind %d", k)
}
