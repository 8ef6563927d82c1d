package cluster

import (
	"fmt"

	"mqttd/persistence"
)

// readSession is one session as the stream holds it, read by collect.
type readSession struct {
	rec     *sessionRec
	entries map[uint64]storedEntry
	rels    map[uint16]*persistence.Forward
	stamps  map[persistence.Stamp]int64
}

type storedEntry struct {
	o   persistence.Outbound
	msg []byte // the message's encoding
}

// collect adds a message of the stream to the sessions being read. An
// empty message is a record deleted; a damaged one is an error.
func collect(found map[string]*readSession, prefix, subject string, data []byte) error {
	key, kind, n, stamp := parseSubject(prefix, subject)
	if kind == kindUnknown {
		return fmt.Errorf("%w: subject %q", errRecord, subject)
	}
	st := found[key]
	if st == nil {
		st = &readSession{entries: make(map[uint64]storedEntry), rels: make(map[uint16]*persistence.Forward),
			stamps: make(map[persistence.Stamp]int64)}
		found[key] = st
	}
	if len(data) == 0 {
		switch kind {
		case kindRec:
			st.rec = nil
		case kindEntry:
			delete(st.entries, n)
		case kindRel:
			delete(st.rels, uint16(n))
		case kindStamp:
			delete(st.stamps, stamp)
		}
		return nil
	}
	switch kind {
	case kindRec:
		r, err := decodeRec(data)
		if err != nil {
			return fmt.Errorf("%w: %s", err, subject)
		}
		if ownerKey(r.session.ID) != key {
			return fmt.Errorf("%w: %s holds the session of another id", errRecord, subject)
		}
		st.rec = r
	case kindEntry:
		o, _, err := decodeEntry(n, data)
		if err != nil {
			return fmt.Errorf("%w: %s", err, subject)
		}
		st.entries[n] = storedEntry{o: o, msg: entryMessage(data)}
	case kindRel:
		f, err := decodeRel(uint16(n), data)
		if err != nil {
			return fmt.Errorf("%w: %s", err, subject)
		}
		st.rels[uint16(n)] = f
	case kindStamp:
		expiry, err := decodeStamp(data)
		if err != nil {
			return fmt.Errorf("%w: %s", err, subject)
		}
		st.stamps[stamp] = expiry
	}
	return nil
}

// entryMessage is the message's part of an entry record that
// decodeEntry read.
func entryMessage(data []byte) []byte {
	d := decoder{b: data[2:]}
	d.uvarint()
	d.uvarint()
	for n := d.uvarint(); n > 0; n-- {
		d.uvarint()
	}
	return d.b
}
