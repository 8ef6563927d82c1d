package bolt

import (
	"encoding/binary"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"

	"go.etcd.io/bbolt"

	"mqttd/persistence"
)

// Load reads everything back in one read transaction, copying every value
// out of bbolt's memory map, which is gone once the transaction ends.
// Sessions come sorted by ID, subscriptions by filter, outbound entries
// by Seq and packet ids in order, as Memory gives them. Damage it meets
// (a record it cannot decode, an entry of no session, a reference to a
// missing message) is ErrCorrupt naming the file.
func (s *Store) Load() (snap *persistence.Snapshot, err error) {
	if s.wal != nil {
		if err := s.checkpoint(0); err != nil {
			return nil, err
		}
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer s.guard(&err)
	err = s.db.View(func(tx *bbolt.Tx) error {
		l := loader{tx: tx, path: s.path, index: make(map[string]int)}
		var err error
		snap, err = l.load()
		return err
	})
	if err != nil {
		return nil, err
	}
	return snap, nil
}

type loader struct {
	tx    *bbolt.Tx
	path  string
	snap  persistence.Snapshot
	index map[string]int // session key (sessKey) → position in snap.Sessions
}

func (l *loader) load() (*persistence.Snapshot, error) {
	steps := []func() error{l.sessions, l.subs, l.outbound, l.rel, l.wills, l.messages, l.retained}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	if err := l.checkRefs(); err != nil {
		return nil, err
	}
	slices.SortFunc(l.snap.Sessions, func(a, b persistence.SessionState) int {
		return strings.Compare(a.Session.ID, b.Session.ID)
	})
	return &l.snap, nil
}

func (l *loader) corrupt(bucket, key []byte, err error) error {
	return recordErr(l.path, bucket, key, err)
}

// each calls fn for every entry of a bucket.
func (l *loader) each(name []byte, fn func(k, v []byte) error) error {
	b := l.tx.Bucket(name)
	if b == nil {
		return fmt.Errorf("bolt: %s: %w: bucket %q is missing", l.path, ErrCorrupt, name)
	}
	return b.ForEach(func(k, v []byte) error {
		// A damaged page can give a length of up to 4 GB, which copying
		// would try to allocate: no key or value is longer than the file.
		if int64(len(k))+int64(len(v)) > l.tx.Size() {
			return l.corrupt(name, nil, fmt.Errorf("%w: a record longer than the file", errRecord))
		}
		if err := fn(k, v); err != nil {
			return l.corrupt(name, k, err)
		}
		return nil
	})
}

// session finds the state a key made by sessKey belongs to, and the rest
// of the key.
func (l *loader) session(k []byte) (*persistence.SessionState, []byte, error) {
	head, rest, ok := splitKey(k)
	if !ok {
		return nil, nil, fmt.Errorf("%w: bad session key", errRecord)
	}
	i, ok := l.index[string(head)]
	if !ok {
		if id, plain := plainID(head); plain {
			return nil, nil, fmt.Errorf("%w: entry of no session (%q)", errRecord, id)
		}
		return nil, nil, fmt.Errorf("%w: entry of no session (key %x)", errRecord, head)
	}
	return &l.snap.Sessions[i], rest, nil
}

func (l *loader) sessions() error {
	return l.each(bucketSessions, func(k, v []byte) error {
		s, err := sessionRecord(k, v)
		if err != nil {
			return err
		}
		l.index[string(k)] = len(l.snap.Sessions)
		l.snap.Sessions = append(l.snap.Sessions, persistence.SessionState{Session: s})
		return nil
	})
}

// sessionRecord decodes the record v of the session key k, whose ID is
// in the key or, for a key holding its hash, in the record.
func sessionRecord(k, v []byte) (persistence.Session, error) {
	head, rest, ok := splitKey(k)
	if !ok || len(rest) != 0 {
		return persistence.Session{}, fmt.Errorf("%w: bad session key", errRecord)
	}
	id, _ := plainID(head)
	s, err := decodeSession(id, v)
	if err == nil && string(sessKey(s.ID, 0)) != string(k) {
		err = fmt.Errorf("%w: session ID does not match its key", errRecord)
	}
	return s, err
}

func (l *loader) subs() error {
	return l.each(bucketSubs, func(k, v []byte) error {
		st, filter, err := l.session(k)
		if err != nil {
			return err
		}
		sub, err := decodeSubscription(string(filter), v)
		if err != nil {
			return err
		}
		if hashedName(sub.Filter) && string(appendName(nil, sub.Filter)) != string(filter) {
			return fmt.Errorf("%w: filter does not match its key", errRecord)
		}
		st.Subscriptions = append(st.Subscriptions, sub)
		return nil
	})
}

// outbound relies on the key order: a session's entries are contiguous
// and in Seq order, Seq being big-endian.
func (l *loader) outbound() error {
	return l.each(bucketOut, func(k, v []byte) error {
		st, rest, err := l.session(k)
		if err != nil {
			return err
		}
		if len(rest) != 8 {
			return fmt.Errorf("%w: bad outbound key", errRecord)
		}
		o, err := decodeOutbound(binary.BigEndian.Uint64(rest), v)
		if err != nil {
			return err
		}
		st.Outbound = append(st.Outbound, o)
		return nil
	})
}

func (l *loader) rel() error {
	return l.each(bucketRel, func(k, _ []byte) error {
		st, rest, err := l.session(k)
		if err != nil {
			return err
		}
		if len(rest) != 2 {
			return fmt.Errorf("%w: bad packet id key", errRecord)
		}
		st.AwaitingRel = append(st.AwaitingRel, binary.BigEndian.Uint16(rest))
		return nil
	})
}

func (l *loader) wills() error {
	return l.each(bucketWills, func(k, v []byte) error {
		st, rest, err := l.session(k)
		if err != nil {
			return err
		}
		if len(rest) != 0 {
			return fmt.Errorf("%w: bad will key", errRecord)
		}
		st.Will, err = decodeWill(v)
		return err
	})
}

func (l *loader) messages() error {
	l.snap.Messages = make(map[uint64]*persistence.Message)
	return l.each(bucketMessages, func(k, v []byte) error {
		id, err := decodeID(k)
		if err != nil {
			return err
		}
		m, err := decodeMessageRecord(id, v)
		if err != nil {
			return err
		}
		l.snap.Messages[id] = m
		return nil
	})
}

func (l *loader) retained() error {
	l.snap.Retained = make(map[string]uint64)
	return l.each(bucketRetained, func(k, v []byte) error {
		topic, id, err := decodeRetained(k, v)
		if err != nil {
			return err
		}
		l.snap.Retained[topic] = id
		return nil
	})
}

// checkRefs makes sure every reference has its message, so that the
// broker never meets a dangling one; a count gone wrong would otherwise
// show only as a message lost later.
func (l *loader) checkRefs() error {
	for _, st := range l.snap.Sessions {
		for _, o := range st.Outbound {
			if l.snap.Messages[o.MessageID] == nil {
				return fmt.Errorf("bolt: %s: %w: session %q entry %d refers to missing message %d",
					l.path, ErrCorrupt, st.Session.ID, o.Seq, o.MessageID)
			}
		}
	}
	for topic, id := range l.snap.Retained {
		if l.snap.Messages[id] == nil {
			return fmt.Errorf("bolt: %s: %w: retained %q refers to missing message %d",
				l.path, ErrCorrupt, topic, id)
		}
	}
	return nil
}
