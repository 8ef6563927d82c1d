package cluster

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"mqttd/packets"
	"mqttd/persistence"
)

// The records of the replicated sessions (sessions.go), one NATS message
// each on a subject of the session-state stream, keyed by client id so
// that any node can take a session over:
//
//	mqttd.<cluster>.ss.<key>.rec        the session: its record, node,
//	                                    subscriptions and delayed will
//	mqttd.<cluster>.ss.<key>.m.<seq>    an outbound entry with its message
//	mqttd.<cluster>.ss.<key>.rel.<pid>  an inbound QoS 2 id awaiting PUBREL
//	mqttd.<cluster>.ss.<key>.st.<stamp> a stamp of a message it stored
//	                                    (32 hex digits: node, then seq)
//
// <key> is ownerKey's (base64url of the id, or a hash of a long one, whose
// record then holds the id). A record's new state is a new message on its
// subject (the stream keeps one per subject); a deleted one is an empty
// message that expires (tombstoneTTL).
//
// Each record starts with its format version (ssVersion). Then, with str
// a uvarint length and the bytes:
//
//	rec    str ID, str Username, Version, uvarint Expiry, varint ExpireAt,
//	       str Listener, str node, uvarint n, n × (str Filter, options
//	       byte, uvarint subscription ID), then a will or nothing:
//	       varint At, uvarint message ID, message (persistence's encoding)
//	entry  flags (QoS in bits 0-1, retain, released), uvarint MessageID,
//	       uvarint PacketID, uvarint n, n × uvarint subscription ID, then
//	       the message (persistence's encoding)
//	rel    nothing more; or, a Forward: the stamp (node, seq: 8 bytes
//	       each, big-endian), then the message (persistence's encoding)
//	st     varint Expiry; the record expires with it (Nats-TTL)

// ssVersion is every record's first byte; a node refuses another.
const ssVersion = 1

// Entry flags. Bits 0-1 are the QoS.
const (
	entryRetain   = 1 << 2
	entryReleased = 1 << 3
)

// Subscription option bits, as the SUBSCRIBE options byte (§3.8.3.1).
const (
	subNoLocal = 1 << 2
	subRAP     = 1 << 3
)

// errRecord is what every damaged record decodes to.
var errRecord = errors.New("cluster: damaged session record")

func sessionsPrefix(cluster string) string { return "mqttd." + cluster + ".ss." }

func sessionsStream(cluster string) string { return "mqttd_" + cluster + "_sessions" }

// sessionSubjects names the subjects of one session.
type sessionSubjects string // mqttd.<cluster>.ss.<key>.

func subjectsOf(cluster, id string) sessionSubjects {
	return sessionSubjects(sessionsPrefix(cluster) + ownerKey(id) + ".")
}

func (p sessionSubjects) rec() string           { return string(p) + "rec" }
func (p sessionSubjects) all() string           { return string(p) + ">" }
func (p sessionSubjects) entry(s uint64) string { return string(p) + "m." + strconv.FormatUint(s, 10) }
func (p sessionSubjects) rel(id uint16) string {
	return string(p) + "rel." + strconv.FormatUint(uint64(id), 10)
}
func (p sessionSubjects) stamp(s persistence.Stamp) string {
	b := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(make([]byte, 0, 16), s.Node), s.Seq)
	return string(p) + "st." + hex.EncodeToString(b)
}

// recordKind is what a subject of the stream holds.
type recordKind uint8

const (
	kindUnknown recordKind = iota
	kindRec
	kindEntry
	kindRel
	kindStamp
)

// parseSubject splits a subject of the stream (under prefix) into its
// session key, kind and number (seq or packet id), or stamp.
func parseSubject(prefix, subject string) (key string, kind recordKind, n uint64, stamp persistence.Stamp) {
	rest, ok := strings.CutPrefix(subject, prefix)
	if !ok {
		return "", kindUnknown, 0, stamp
	}
	key, rest, ok = strings.Cut(rest, ".")
	if !ok || key == "" {
		return "", kindUnknown, 0, stamp
	}
	if rest == "rec" {
		return key, kindRec, 0, stamp
	}
	what, num, ok := strings.Cut(rest, ".")
	if !ok {
		return "", kindUnknown, 0, stamp
	}
	if what == "st" {
		b, err := hex.DecodeString(num)
		if err != nil || len(b) != 16 || strings.ToLower(num) != num {
			return "", kindUnknown, 0, stamp
		}
		stamp = persistence.Stamp{Node: binary.BigEndian.Uint64(b), Seq: binary.BigEndian.Uint64(b[8:])}
		if stamp.IsZero() {
			return "", kindUnknown, 0, stamp
		}
		return key, kindStamp, 0, stamp
	}
	v, err := strconv.ParseUint(num, 10, 64)
	switch {
	case err != nil:
		return "", kindUnknown, 0, stamp
	case what == "m":
		return key, kindEntry, v, stamp
	case what == "rel" && v > 0 && v <= 65535:
		return key, kindRel, v, stamp
	}
	return "", kindUnknown, 0, stamp
}

// appendRel appends an inbound QoS 2 id's record: f's stamp and message
// when it is a Forward (not nil).
func appendRel(b []byte, f *persistence.Forward) ([]byte, error) {
	b = append(b, ssVersion)
	if f == nil {
		return b, nil
	}
	b = binary.BigEndian.AppendUint64(b, f.Stamp.Node)
	b = binary.BigEndian.AppendUint64(b, f.Stamp.Seq)
	return persistence.AppendMessage(b, &f.Message)
}

// decodeRel decodes the record of id: nil for a plain one. b is the
// record's own memory, which the message's payload keeps.
func decodeRel(id uint16, b []byte) (*persistence.Forward, error) {
	d := decoder{b: b}
	d.version()
	if d.bad {
		return nil, errRecord
	}
	if len(d.b) == 0 {
		return nil, nil
	}
	if len(d.b) < 16 {
		return nil, errRecord
	}
	f := &persistence.Forward{PacketID: id,
		Stamp: persistence.Stamp{Node: binary.BigEndian.Uint64(d.b), Seq: binary.BigEndian.Uint64(d.b[8:])}}
	if f.Stamp.IsZero() {
		return nil, errRecord
	}
	if err := persistence.DecodeMessage(d.b[16:], &f.Message); err != nil {
		return nil, fmt.Errorf("%w: %w", errRecord, err)
	}
	return f, nil
}

// appendStamp appends a stamp's record.
func appendStamp(b []byte, expiry int64) []byte {
	return binary.AppendVarint(append(b, ssVersion), expiry)
}

// decodeStamp decodes a stamp's record into its expiry.
func decodeStamp(b []byte) (int64, error) {
	d := decoder{b: b}
	d.version()
	expiry := d.varint()
	if d.bad || len(d.b) != 0 {
		return 0, errRecord
	}
	return expiry, nil
}

// sessionRec is what a rec record holds.
type sessionRec struct {
	session persistence.Session
	node    string
	subs    map[string]persistence.Subscription
	will    *persistence.Will
}

func appendStr(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func encodeRec(r *sessionRec) ([]byte, error) {
	s := &r.session
	b := make([]byte, 0, 64+len(s.ID)+len(s.Username)+len(r.subs)*32)
	b = appendStr(append(b, ssVersion), s.ID)
	b = appendStr(b, s.Username)
	b = append(b, s.Version)
	b = binary.AppendUvarint(b, uint64(s.Expiry))
	b = binary.AppendVarint(b, s.ExpireAt)
	b = appendStr(b, s.Listener)
	b = appendStr(b, r.node)
	b = binary.AppendUvarint(b, uint64(len(r.subs)))
	for _, f := range slices.Sorted(maps.Keys(r.subs)) {
		sub := r.subs[f]
		o := sub.Options
		if o.QoS > 3 || o.RetainHandling > 3 {
			return nil, persistence.ErrBadOp
		}
		opts := o.QoS | o.RetainHandling<<4
		if o.NoLocal {
			opts |= subNoLocal
		}
		if o.RetainAsPublished {
			opts |= subRAP
		}
		b = append(appendStr(b, f), opts)
		b = binary.AppendUvarint(b, uint64(sub.ID))
	}
	if r.will == nil {
		return b, nil
	}
	b = binary.AppendVarint(b, r.will.At)
	b = binary.AppendUvarint(b, r.will.Message.ID)
	return persistence.AppendMessage(b, &r.will.Message)
}

// decoder reads a record; the first error sticks, later reads give zero
// values, so that a decoder checks once at the end.
type decoder struct {
	b   []byte
	bad bool
}

func (d *decoder) byte() byte {
	if len(d.b) == 0 {
		d.bad = true
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.bad, d.b = true, nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.bad, d.b = true, nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) str() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.bad, d.b = true, nil
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// version reads the version byte.
func (d *decoder) version() {
	if d.byte() != ssVersion {
		d.bad = true
	}
}

// decodeRec decodes a rec record; b is the record's own memory.
func decodeRec(b []byte) (*sessionRec, error) {
	d := decoder{b: b}
	d.version()
	r := &sessionRec{subs: make(map[string]persistence.Subscription)}
	s := &r.session
	s.ID, s.Username, s.Version = d.str(), d.str(), d.byte()
	s.Expiry = uint32(d.uvarint())
	s.ExpireAt = d.varint()
	s.Listener, r.node = d.str(), d.str()
	n := d.uvarint()
	if n > uint64(len(d.b)) { // each takes 3 bytes at least
		return nil, errRecord
	}
	for range n {
		f := d.str()
		opts := d.byte()
		sub := persistence.Subscription{Filter: f, ID: uint32(d.uvarint()), Options: packets.SubOptions{
			QoS: opts & 3, NoLocal: opts&subNoLocal != 0, RetainAsPublished: opts&subRAP != 0, RetainHandling: opts >> 4 & 3,
		}}
		r.subs[f] = sub
	}
	if d.bad || s.ID == "" {
		return nil, errRecord
	}
	if len(d.b) == 0 {
		return r, nil
	}
	w := &persistence.Will{At: d.varint()}
	w.Message.ID = d.uvarint()
	if d.bad || persistence.DecodeMessage(d.b, &w.Message) != nil {
		return nil, errRecord
	}
	r.will = w
	return r, nil
}

// appendEntry appends an entry's record: o's state, then its message as
// persistence encodes it (msg).
func appendEntry(b []byte, o *persistence.Outbound, msg []byte) ([]byte, error) {
	if o.QoS > 3 {
		return nil, persistence.ErrBadOp
	}
	flags := o.QoS
	if o.Retain {
		flags |= entryRetain
	}
	if o.Released {
		flags |= entryReleased
	}
	b = append(b, ssVersion, flags)
	b = binary.AppendUvarint(b, o.MessageID)
	b = binary.AppendUvarint(b, uint64(o.PacketID))
	b = binary.AppendUvarint(b, uint64(len(o.SubIDs)))
	for _, id := range o.SubIDs {
		b = binary.AppendUvarint(b, uint64(id))
	}
	return append(b, msg...), nil
}

// decodeEntry decodes an entry record of seq into its state and message;
// b is the record's own memory, which the message's payload keeps.
func decodeEntry(seq uint64, b []byte) (persistence.Outbound, *persistence.Message, error) {
	d := decoder{b: b}
	d.version()
	flags := d.byte()
	o := persistence.Outbound{Seq: seq, QoS: flags & 3, Retain: flags&entryRetain != 0, Released: flags&entryReleased != 0}
	o.MessageID = d.uvarint()
	pid := d.uvarint()
	o.PacketID = uint16(pid)
	n := d.uvarint()
	if d.bad || pid > 65535 || flags>>4 != 0 || n > uint64(len(d.b)) {
		return o, nil, errRecord
	}
	if n > 0 {
		o.SubIDs = make([]uint32, n)
		for i := range o.SubIDs {
			v := d.uvarint()
			if v > 1<<28 {
				d.bad = true
			}
			o.SubIDs[i] = uint32(v)
		}
	}
	m := &persistence.Message{ID: o.MessageID}
	if d.bad || persistence.DecodeMessage(d.b, m) != nil {
		return o, nil, errRecord
	}
	return o, m, nil
}
