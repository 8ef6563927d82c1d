package bolt

import (
	"encoding/binary"
	"fmt"

	"go.etcd.io/bbolt"

	"mqttd/persistence"
)

// shadow is what Apply needs of the store's state to answer a batch at
// once, while the batch itself reaches the bbolt file later (see wal.go):
// which sessions exist, which message each outbound entry and retained
// topic refers to, and the messages' reference counts. It holds keys and
// numbers only, no records, and mirrors the applier's rules exactly, so
// that a batch it takes is one the applier takes too.
type shadow struct {
	sessions map[string]map[uint64]uint64 // session → Seq → message ID
	refs     map[uint64]uint64            // stored message → references
	retained map[string]uint64            // topic → message ID

	// One batch: what to undo if it fails, and the messages it touched,
	// which are dropped at its end if nothing refers to them.
	undo    []undo
	touched map[uint64]struct{}
	// overwrote is set when the batch puts an outbound entry over one
	// the store holds (see wal.over).
	overwrote bool
}

type undoKind uint8

const (
	undoSession  undoKind = iota // sessions[key] was old (nil: absent)
	undoOut                      // sessions[key][seq] was id (had)
	undoRef                      // refs[id] was n (had)
	undoRetained                 // retained[key] was id (had)
)

type undo struct {
	kind    undoKind
	had     bool
	key     string
	seq, id uint64
	n       uint64
	old     map[uint64]uint64
}

func newShadow() *shadow {
	return &shadow{
		sessions: make(map[string]map[uint64]uint64),
		refs:     make(map[uint64]uint64),
		retained: make(map[string]uint64),
		touched:  make(map[uint64]struct{}),
	}
}

// loadShadow reads the keys the shadow keeps from the file.
func loadShadow(tx *bbolt.Tx, path string) (*shadow, error) {
	sh := newShadow()
	hashed := make(map[string]string) // session key holding a hash → ID
	err := tx.Bucket(bucketSessions).ForEach(func(k, v []byte) error {
		head, rest, ok := splitKey(k)
		if !ok || len(rest) != 0 {
			return recordErr(path, bucketSessions, k, errRecord)
		}
		id, plain := plainID(head)
		if !plain {
			s, err := sessionRecord(k, v)
			if err != nil {
				return recordErr(path, bucketSessions, k, err)
			}
			id = s.ID
			hashed[string(k)] = id
		}
		sh.sessions[id] = make(map[uint64]uint64)
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = tx.Bucket(bucketOut).ForEach(func(k, v []byte) error {
		head, rest, ok := splitKey(k)
		id, plain := plainID(head)
		if !plain {
			id = hashed[string(head)]
		}
		if !ok || len(rest) != 8 || sh.sessions[id] == nil {
			return recordErr(path, bucketOut, k, errRecord)
		}
		seq := binary.BigEndian.Uint64(rest)
		o, err := decodeOutbound(seq, v)
		if err != nil {
			return recordErr(path, bucketOut, k, err)
		}
		sh.sessions[id][seq] = o.MessageID
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = tx.Bucket(bucketRefs).ForEach(func(k, v []byte) error {
		id, err := decodeID(k)
		if err == nil {
			sh.refs[id], err = decodeCount(v)
		}
		if err != nil {
			return recordErr(path, bucketRefs, k, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = tx.Bucket(bucketRetained).ForEach(func(k, v []byte) error {
		topic, id, err := decodeRetained(k, v)
		if err != nil {
			return recordErr(path, bucketRetained, k, err)
		}
		sh.retained[topic] = id
		return nil
	})
	return sh, err
}

// check takes op into the open batch, or says why the applier would
// refuse it. Valid was called.
func (sh *shadow) check(op *persistence.Op) error {
	switch op.Kind {
	case persistence.OpPutMessage:
		if _, ok := sh.refs[op.Message.ID]; !ok {
			sh.setRef(op.Message.ID, 0)
		}
		return nil
	case persistence.OpPutSession:
		if sh.sessions[op.Session.ID] == nil {
			sh.setSession(op.Session.ID, make(map[uint64]uint64))
		}
		return nil
	case persistence.OpDeleteSession:
		out := sh.sessions[op.SessionID]
		if out == nil {
			return nil
		}
		for _, id := range out {
			if err := sh.unref(id); err != nil {
				return err
			}
		}
		sh.setSession(op.SessionID, nil)
		return nil
	case persistence.OpPutRetained:
		return sh.putRetained(op.Topic, op.MessageID)
	case persistence.OpDeleteRetained:
		if old, had := sh.retained[op.Topic]; had {
			sh.undo = append(sh.undo, undo{kind: undoRetained, had: true, key: op.Topic, id: old})
			delete(sh.retained, op.Topic)
			return sh.unref(old)
		}
		return nil
	}
	out := sh.sessions[op.SessionID]
	if out == nil {
		return persistence.ErrNoSession
	}
	switch op.Kind {
	case persistence.OpPutOutbound:
		if _, ok := sh.refs[op.Outbound.MessageID]; !ok {
			return persistence.ErrNoMessage
		}
		old, had := out[op.Outbound.Seq]
		sh.setOut(op.SessionID, out, op.Outbound.Seq, op.Outbound.MessageID, true)
		sh.ref(op.Outbound.MessageID)
		if had {
			sh.overwrote = true
			return sh.unref(old)
		}
	case persistence.OpDeleteOutbound:
		if old, had := out[op.Seq]; had {
			sh.setOut(op.SessionID, out, op.Seq, 0, false)
			return sh.unref(old)
		}
	}
	return nil
}

func (sh *shadow) putRetained(topic string, id uint64) error {
	if _, ok := sh.refs[id]; !ok {
		return persistence.ErrNoMessage
	}
	old, had := sh.retained[topic]
	sh.undo = append(sh.undo, undo{kind: undoRetained, had: had, key: topic, id: old})
	sh.retained[topic] = id
	sh.ref(id)
	if had {
		return sh.unref(old)
	}
	return nil
}

func (sh *shadow) setSession(id string, out map[uint64]uint64) {
	sh.undo = append(sh.undo, undo{kind: undoSession, key: id, old: sh.sessions[id]})
	if out == nil {
		delete(sh.sessions, id)
	} else {
		sh.sessions[id] = out
	}
}

func (sh *shadow) setOut(session string, out map[uint64]uint64, seq, id uint64, put bool) {
	old, had := out[seq]
	sh.undo = append(sh.undo, undo{kind: undoOut, had: had, key: session, seq: seq, id: old})
	if put {
		out[seq] = id
	} else {
		delete(out, seq)
	}
}

func (sh *shadow) setRef(id, n uint64) {
	old, had := sh.refs[id]
	sh.undo = append(sh.undo, undo{kind: undoRef, had: had, id: id, n: old})
	sh.refs[id] = n
	sh.touched[id] = struct{}{}
}

func (sh *shadow) ref(id uint64) { sh.setRef(id, sh.refs[id]+1) }

func (sh *shadow) unref(id uint64) error {
	n, ok := sh.refs[id]
	if !ok || n == 0 {
		// The file holds a count that is off; the applier says the same.
		return fmt.Errorf("%w: message %d: count below zero", ErrCorrupt, id)
	}
	sh.setRef(id, n-1)
	return nil
}

// commit ends the batch: messages it left unreferenced are gone, as the
// applier's finish drops them.
func (sh *shadow) commit() {
	for id := range sh.touched {
		if sh.refs[id] == 0 {
			delete(sh.refs, id)
		}
	}
	clear(sh.touched)
	clear(sh.undo)
	sh.undo = sh.undo[:0]
	sh.overwrote = false
}

// rollback undoes the batch.
func (sh *shadow) rollback() {
	for i := len(sh.undo) - 1; i >= 0; i-- {
		u := &sh.undo[i]
		switch u.kind {
		case undoSession:
			if u.old == nil {
				delete(sh.sessions, u.key)
			} else {
				sh.sessions[u.key] = u.old
			}
		case undoOut:
			// The session's map is the one the entry was changed in: a
			// session deleted later in the batch was restored first.
			if out := sh.sessions[u.key]; out != nil {
				if u.had {
					out[u.seq] = u.id
				} else {
					delete(out, u.seq)
				}
			}
		case undoRef:
			if u.had {
				sh.refs[u.id] = u.n
			} else {
				delete(sh.refs, u.id)
			}
		case undoRetained:
			if u.had {
				sh.retained[u.key] = u.id
			} else {
				delete(sh.retained, u.key)
			}
		}
	}
	clear(sh.touched)
	clear(sh.undo)
	sh.undo = sh.undo[:0]
	sh.overwrote = false
}
