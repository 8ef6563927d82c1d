package persistence

import (
	"encoding/binary"
	"errors"
	"fmt"

	"mqttd/packets"
)

// A message's encoding, shared by the stores that write messages as
// bytes (persistence/bolt's records and log, the cluster's replicated
// sessions), so that a property added to packets is kept by each without
// a change:
//
//	flags (QoS in bits 0-1, then msgRetain, ...), varint Expiry,
//	str Topic, str Origin, [uvarint Properties.Present, properties],
//	payload
//
// str is a uvarint length and the bytes. The payload comes last with no
// length: it is the rest of the bytes. Properties.Present is kept beside
// the properties so that a bit set with nothing to encode (a slice
// property left empty) comes back as it was. The ID is not in it: each
// store keys or frames it as it needs.

// Message flags. Bits 0-1 are the QoS.
const (
	msgRetain     = 1 << 2
	msgProps      = 1 << 3 // properties follow
	msgWillProps  = 1 << 4 // they decode as Will Properties, not PUBLISH ones
	msgEmptyBytes = 1 << 5 // the payload is empty but not nil
)

// ErrRecord is what decoding damaged bytes returns; the caller says
// where they came from.
var ErrRecord = errors.New("damaged record")

// AppendMessage appends m's encoding to dst. It returns ErrBadOp for a
// message that would not read back (a QoS over 3, properties that do not
// decode).
func AppendMessage(dst []byte, m *Message) ([]byte, error) {
	if m.QoS > 3 {
		return nil, fmt.Errorf("%w: message %d has QoS %d", ErrBadOp, m.ID, m.QoS)
	}
	flags := m.QoS
	if m.Retain {
		flags |= msgRetain
	}
	if m.Payload != nil && len(m.Payload) == 0 {
		flags |= msgEmptyBytes
	}
	props, willMode, err := encodeProps(&m.Properties)
	if err != nil {
		return nil, fmt.Errorf("%w: message %d: %v", ErrBadOp, m.ID, err)
	}
	if props != nil {
		flags |= msgProps
		if willMode {
			flags |= msgWillProps
		}
	}
	dst = append(dst, flags)
	dst = binary.AppendVarint(dst, m.Expiry)
	dst = appendStr(dst, m.Topic)
	dst = appendStr(dst, m.Origin)
	if props != nil {
		dst = binary.AppendUvarint(dst, m.Properties.Present)
		dst = append(dst, props...)
	}
	// Last and without a length: it is the rest.
	return append(dst, m.Payload...), nil
}

// encodeProps writes p with the packets codec. The codec's decoder checks
// which properties a packet may carry, and a will's may hold Will Delay
// Interval, which a PUBLISH may not: the encoding is checked by decoding
// it now, as a PUBLISH's or else as Will Properties, so that what a store
// writes it can always read. nil means no properties.
func encodeProps(p *packets.Properties) ([]byte, bool, error) {
	if p.Present == 0 && len(p.User) == 0 && len(p.SubscriptionIDs) == 0 {
		return nil, false, nil
	}
	b, err := p.Append(nil)
	if err != nil {
		return nil, false, err
	}
	var check packets.Properties
	if _, err = check.Decode(b, packets.TypePublish, false); err == nil {
		return b, false, nil
	}
	check = packets.Properties{}
	if _, werr := check.Decode(b, packets.TypePublish, true); werr == nil {
		return b, true, nil
	}
	return nil, false, fmt.Errorf("properties do not read back: %v", err)
}

func appendStr(dst []byte, s string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
}

// DecodeMessage decodes b, all of it, into m (whose ID it leaves alone).
// The payload and the properties' strings share b's memory: the caller
// passes bytes of their own. Damage is ErrRecord; it never panics.
func DecodeMessage(b []byte, m *Message) error {
	if len(b) == 0 {
		return ErrRecord
	}
	flags := b[0]
	b = b[1:]
	m.QoS = flags & 3
	m.Retain = flags&msgRetain != 0
	var ok bool
	if m.Expiry, b, ok = cutVarint(b); !ok {
		return ErrRecord
	}
	var topic, origin []byte
	if topic, b, ok = cutStr(b); !ok {
		return ErrRecord
	}
	if origin, b, ok = cutStr(b); !ok {
		return ErrRecord
	}
	m.Topic, m.Origin = string(topic), string(origin)
	if flags&msgProps != 0 {
		var present uint64
		if present, b, ok = cutUvarint(b); !ok {
			return ErrRecord
		}
		n, err := m.Properties.Decode(b, packets.TypePublish, flags&msgWillProps != 0)
		if err != nil {
			return fmt.Errorf("%w: properties: %v", ErrRecord, err)
		}
		m.Properties.Present = present
		b = b[n:]
	}
	if len(b) > 0 {
		m.Payload = b[:len(b):len(b)]
	} else if flags&msgEmptyBytes != 0 {
		m.Payload = []byte{}
	}
	return nil
}

func cutUvarint(b []byte) (uint64, []byte, bool) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, false
	}
	return v, b[n:], true
}

func cutVarint(b []byte) (int64, []byte, bool) {
	v, n := binary.Varint(b)
	if n <= 0 {
		return 0, nil, false
	}
	return v, b[n:], true
}

func cutStr(b []byte) ([]byte, []byte, bool) {
	n, rest, ok := cutUvarint(b)
	if !ok || n > uint64(len(rest)) {
		return nil, nil, false
	}
	return rest[:n:n], rest[n:], true
}
