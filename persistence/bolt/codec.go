package bolt

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"mqttd/packets"
	"mqttd/persistence"
)

// Record formats, version 1 (str is a uvarint length and the bytes):
//
//	message       1, flags, varint Expiry, str Topic, str Origin,
//	              [uvarint Properties.Present, properties], payload
//	will          1, varint At, uvarint message ID, then a message from flags on
//	session       2, str Username, Version, uvarint Expiry, varint ExpireAt,
//	              str Listener (version 1: without Listener; version 3,
//	              for an ID the key holds hashed: then str ID)
//	subscription  1, options byte, uvarint subscription ID (version 2,
//	              for a filter the key holds hashed: then str filter)
//	retained      message ID (8 bytes big-endian), then for a topic the
//	              key holds hashed the topic (no version byte)
//	outbound      1, flags, uvarint MessageID, uvarint PacketID,
//	              uvarint count, count × uvarint subscription ID
//
// The keys hold the rest (message ID, session ID, filter, Seq), but for
// a session ID, filter or topic too long to be a key (see maxPlainKey). The
// payload comes last with no length: it is the rest of the value.
// Properties.Present is kept beside the properties so that a bit set with
// nothing to encode (a slice property left empty) comes back as it was.

// Every record value starts with its format version, so that a later
// build can change one record's encoding and still read the old one
// without rewriting the file; the schema version in "meta" is for changes
// of layout (buckets and keys).
const recV1 = 1

// Outbound flags. Bits 0-1 are the QoS.
const (
	outRetain   = 1 << 2
	outReleased = 1 << 3
)

// Subscription option bits; the layout is the SUBSCRIBE options byte's
// (§3.8.3.1) so that a dump reads like the wire.
const (
	subNoLocal = 1 << 2
	subRAP     = 1 << 3
)

// errRecord is what decoding a damaged record returns; the caller adds
// the file, the bucket and the key.
var errRecord = errors.New("damaged record")

// maxPlainKey is the longest session ID, filter or retained topic a key
// holds as it is; a longer one is hashed. It is the bound earlier builds
// refused longer ones at, so that every key they wrote is still the key
// of its record, and a session key and a filter together stay under
// bbolt's 32 KiB.
const maxPlainKey = 16000

// hashMark starts the key of a hashed filter or retained topic. No UTF-8
// string starts with it, and a short one that does is hashed too, so that
// a plain key can never be taken for a hashed one.
const hashMark = 0xFF

// hashedName reports whether a filter or retained topic is keyed by its
// hash; its record then holds it whole.
func hashedName(s string) bool {
	return len(s) > maxPlainKey || len(s) > 0 && s[0] == hashMark
}

// appendName appends the key of a filter or retained topic: itself, or
// hashMark and its SHA-256.
func appendName(k []byte, s string) []byte {
	if !hashedName(s) {
		return append(k, s...)
	}
	h := sha256.Sum256([]byte(s))
	return append(append(k, hashMark), h[:]...)
}

// sessKey is the key prefix of everything a session holds: its length
// first, so that one session's keys can never be a prefix of another's
// and each session's entries are contiguous in every bucket. An ID longer
// than maxPlainKey is followed by its SHA-256 instead of itself: its
// length says which, and its session record holds it whole.
func sessKey(id string, extra int) []byte {
	if len(id) > maxPlainKey {
		k := make([]byte, 0, binary.MaxVarintLen64+sha256.Size+extra)
		h := sha256.Sum256([]byte(id))
		return append(binary.AppendUvarint(k, uint64(len(id))), h[:]...)
	}
	k := make([]byte, 0, binary.MaxVarintLen64+len(id)+extra)
	k = binary.AppendUvarint(k, uint64(len(id)))
	return append(k, id...)
}

func subKey(id, filter string) []byte {
	n := len(filter)
	if hashedName(filter) {
		n = 1 + sha256.Size
	}
	return appendName(sessKey(id, n), filter)
}

func outKey(id string, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(sessKey(id, 8), seq)
}

func relKey(id string, pid uint16) []byte {
	return binary.BigEndian.AppendUint16(sessKey(id, 2), pid)
}

// splitKey cuts a key made by sessKey into its session's part, sessKey's
// result, and the rest.
func splitKey(k []byte) (head, rest []byte, ok bool) {
	n, w := binary.Uvarint(k)
	if w <= 0 {
		return nil, nil, false
	}
	if n > maxPlainKey {
		n = sha256.Size
	}
	if n > uint64(len(k)-w) {
		return nil, nil, false
	}
	end := w + int(n)
	return k[:end], k[end:], true
}

// plainID is the session ID a session key holds, unless it holds a hash.
func plainID(head []byte) (string, bool) {
	n, w := binary.Uvarint(head)
	if w <= 0 || n > maxPlainKey {
		return "", false
	}
	return string(head[w:]), true
}

func idKey(id uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), id) }

// encodeMessageRecord is the value of a message in "messages"; the ID is
// the key.
func encodeMessageRecord(m *persistence.Message) ([]byte, error) {
	dst := make([]byte, 0, 16+len(m.Topic)+len(m.Origin)+len(m.Payload))
	return appendMessage(append(dst, recV1), m)
}

func appendMessage(dst []byte, m *persistence.Message) ([]byte, error) {
	return persistence.AppendMessage(dst, m)
}

func appendString(dst []byte, s string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
}

// reader decodes a record; the first error sticks and later reads return
// zero values, so that a decoder checks once at the end.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail() {
	if r.err == nil {
		r.err = errRecord
	}
	r.b = nil
}

func (r *reader) byte() byte {
	if len(r.b) == 0 {
		r.fail()
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail()
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) string() string { return string(r.bytes()) }

func (r *reader) version() {
	if v := r.byte(); v != recV1 && r.err == nil {
		r.err = fmt.Errorf("%w: record format %d, this build reads %d", errRecord, v, recV1)
	}
}

// decodeMessageRecord decodes a "messages" value. It copies v first:
// bbolt's values live in its memory map and are gone with the
// transaction. The payload and the properties' strings share that one
// copy.
func decodeMessageRecord(id uint64, v []byte) (*persistence.Message, error) {
	r := reader{b: bytes.Clone(v)}
	r.version()
	m := &persistence.Message{ID: id}
	decodeMessage(&r, m)
	return m, r.err
}

// decodeMessage decodes the rest of r as a message (persistence's
// encoding).
func decodeMessage(r *reader, m *persistence.Message) {
	if r.err != nil {
		return
	}
	if err := persistence.DecodeMessage(r.b, m); err != nil {
		r.err = fmt.Errorf("%w: %v", errRecord, err)
	}
	r.b = nil
}

// Session record formats: sessionV2 keeps the listener, sessionV3 also
// the ID, for a session whose key holds its hash.
const (
	sessionV2 = 2
	sessionV3 = 3
)

func encodeSession(s *persistence.Session) []byte {
	long := len(s.ID) > maxPlainKey
	format := byte(sessionV2)
	n := 24 + len(s.Username) + len(s.Listener)
	if long {
		format, n = sessionV3, n+len(s.ID)
	}
	dst := make([]byte, 0, n)
	dst = appendString(append(dst, format), s.Username)
	dst = append(dst, s.Version)
	dst = binary.AppendUvarint(dst, uint64(s.Expiry))
	dst = binary.AppendVarint(dst, s.ExpireAt)
	dst = appendString(dst, s.Listener)
	if long {
		dst = appendString(dst, s.ID)
	}
	return dst
}

// decodeSession decodes a session record; id is the ID its key holds,
// which a record of format 3 replaces with its own.
func decodeSession(id string, v []byte) (persistence.Session, error) {
	r := reader{b: v}
	format := r.byte()
	if (format < recV1 || format > sessionV3) && r.err == nil {
		r.err = fmt.Errorf("%w: session record format %d, this build reads 1 to %d", errRecord, format, sessionV3)
	}
	s := persistence.Session{ID: id, Username: r.string(), Version: r.byte()}
	s.Expiry = uint32(r.uvarint())
	s.ExpireAt = r.varint()
	if format >= sessionV2 {
		s.Listener = r.string()
	}
	if format == sessionV3 {
		s.ID = r.string()
	}
	return s, r.done()
}

// done reports an error, or trailing bytes, which a record of this
// version does not have.
func (r *reader) done() error {
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%w: %d trailing bytes", errRecord, len(r.b))
	}
	return r.err
}

// subV2 is the subscription record's format that holds its filter, for
// a filter its key holds hashed.
const subV2 = 2

func encodeSubscription(s *persistence.Subscription) ([]byte, error) {
	o := s.Options
	if o.QoS > 3 || o.RetainHandling > 3 {
		return nil, fmt.Errorf("%w: subscription %q options out of range", persistence.ErrBadOp, s.Filter)
	}
	b := o.QoS | o.RetainHandling<<4
	if o.NoLocal {
		b |= subNoLocal
	}
	if o.RetainAsPublished {
		b |= subRAP
	}
	if !hashedName(s.Filter) {
		return binary.AppendUvarint([]byte{recV1, b}, uint64(s.ID)), nil
	}
	dst := make([]byte, 0, 16+len(s.Filter))
	dst = binary.AppendUvarint(append(dst, subV2, b), uint64(s.ID))
	return appendString(dst, s.Filter), nil
}

// decodeSubscription decodes a subscription record; filter is what its
// key holds, which a record of format 2 replaces with its own.
func decodeSubscription(filter string, v []byte) (persistence.Subscription, error) {
	r := reader{b: v}
	format := r.byte()
	if format != recV1 && format != subV2 && r.err == nil {
		r.err = fmt.Errorf("%w: subscription record format %d, this build reads 1 and %d", errRecord, format, subV2)
	}
	b := r.byte()
	s := persistence.Subscription{Filter: filter, Options: packets.SubOptions{
		QoS:               b & 3,
		NoLocal:           b&subNoLocal != 0,
		RetainAsPublished: b&subRAP != 0,
		RetainHandling:    b >> 4 & 3,
	}}
	s.ID = uint32(r.uvarint())
	if format == subV2 {
		s.Filter = r.string()
	}
	return s, r.done()
}

func encodeOutbound(o *persistence.Outbound) ([]byte, error) {
	if o.QoS > 3 {
		return nil, fmt.Errorf("%w: outbound %d has QoS %d", persistence.ErrBadOp, o.Seq, o.QoS)
	}
	flags := o.QoS
	if o.Retain {
		flags |= outRetain
	}
	if o.Released {
		flags |= outReleased
	}
	dst := make([]byte, 0, 16+5*len(o.SubIDs))
	dst = binary.AppendUvarint(append(dst, recV1, flags), o.MessageID)
	dst = binary.AppendUvarint(dst, uint64(o.PacketID))
	dst = binary.AppendUvarint(dst, uint64(len(o.SubIDs)))
	for _, id := range o.SubIDs {
		dst = binary.AppendUvarint(dst, uint64(id))
	}
	return dst, nil
}

func decodeOutbound(seq uint64, v []byte) (persistence.Outbound, error) {
	r := reader{b: v}
	r.version()
	flags := r.byte()
	o := persistence.Outbound{
		Seq:      seq,
		QoS:      flags & 3,
		Retain:   flags&outRetain != 0,
		Released: flags&outReleased != 0,
	}
	o.MessageID = r.uvarint()
	o.PacketID = uint16(r.uvarint())
	// Each id takes at least a byte: a count beyond what is left is damage,
	// not a reason to allocate.
	if n := r.uvarint(); n > uint64(len(r.b)) {
		r.fail()
	} else if n > 0 {
		o.SubIDs = make([]uint32, n)
		for i := range o.SubIDs {
			o.SubIDs[i] = uint32(r.uvarint())
		}
	}
	return o, r.done()
}

func encodeWill(w *persistence.Will) ([]byte, error) {
	m := &w.Message
	return appendWill(make([]byte, 0, 32+len(m.Topic)+len(m.Origin)+len(m.Payload)), w)
}

func appendWill(dst []byte, w *persistence.Will) ([]byte, error) {
	dst = binary.AppendVarint(append(dst, recV1), w.At)
	dst = binary.AppendUvarint(dst, w.Message.ID)
	return appendMessage(dst, &w.Message)
}

func decodeWill(v []byte) (*persistence.Will, error) {
	r := reader{b: bytes.Clone(v)}
	r.version()
	w := &persistence.Will{At: r.varint()}
	w.Message.ID = r.uvarint()
	decodeMessage(&r, &w.Message)
	return w, r.err
}

// encodeRetained is the value of a retained topic: its message's ID,
// and the topic if its key holds it hashed.
func encodeRetained(topic string, id uint64) []byte {
	if !hashedName(topic) {
		return idKey(id)
	}
	return append(binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(topic)), id), topic...)
}

// decodeRetained decodes the value v of the retained key k into the topic
// and its message's ID, checking that k is the topic's key.
func decodeRetained(k, v []byte) (string, uint64, error) {
	if len(v) < 8 {
		return "", 0, errRecord
	}
	id := binary.BigEndian.Uint64(v)
	topic := string(k)
	if len(v) > 8 {
		topic = string(v[8:])
	}
	if hashedName(topic) && string(appendName(nil, topic)) != string(k) {
		return "", 0, fmt.Errorf("%w: retained topic does not match its key", errRecord)
	}
	return topic, id, nil
}

func decodeID(v []byte) (uint64, error) {
	if len(v) != 8 {
		return 0, errRecord
	}
	return binary.BigEndian.Uint64(v), nil
}

func decodeCount(v []byte) (uint64, error) {
	if v == nil {
		return 0, nil
	}
	r := reader{b: v}
	n := r.uvarint()
	return n, r.done()
}

// uvarint decodes a whole value as one uvarint; n <= 0 if it is not.
func uvarint(v []byte) (uint64, int) {
	x, n := binary.Uvarint(v)
	if n > 0 && n != len(v) {
		return 0, -1
	}
	return x, n
}
