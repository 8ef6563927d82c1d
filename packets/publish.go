package packets

import "strings"

// Type reports TypePublish.
func (p *Publish) Type() Type { return TypePublish }

// decodePublish decodes a PUBLISH. A Subscription Identifier is not a
// decode error here even though a client must not send one
// [MQTT-3.3.4-6]: the broker sees it in Properties (Has(PropSubscriptionID))
// and answers 0x82 itself, while PUBLISHes from a server legitimately carry it.
// A Payload Format Indicator of 1 is not checked against the payload
// either; that is the broker's policy (§3.3.2.3.2).
func decodePublish(flags byte, d *decoder, v Version) (Packet, error) {
	p := &Publish{}
	if err := p.decode(flags, d, v); err != nil {
		return nil, err
	}
	return p, nil
}

// DecodePublish decodes a PUBLISH frame into *p, overwriting every field,
// for a reader that reuses one Publish for many frames: then decoding
// allocates nothing. As with Decode, p's strings and slices alias body,
// which the caller hands over. v must be a known version (not 0).
func DecodePublish(fh FixedHeader, body []byte, v Version, p *Publish) error {
	return Limits{}.DecodePublish(fh, body, v, p)
}

// DecodePublish is the package's DecodePublish, keeping no more than l
// allows.
func (l Limits) DecodePublish(fh FixedHeader, body []byte, v Version, p *Publish) error {
	if fh.Type != TypePublish || len(body) != fh.Remaining {
		return malformed("§2.1.4", "not a whole PUBLISH frame")
	}
	p.Reset()
	return p.decode(fh.Flags, &decoder{b: body, maxUser: l.MaxUserProperties}, v)
}

// Reset makes p the zero Publish, writing only the fields that are not
// zero: clearing the whole struct costs a write barrier for each of its
// pointers while the GC runs (a tenth of the broker's CPU in a fan-in
// profile, at two clears per message), and most PUBLISH packets carry no
// properties.
func (p *Publish) Reset() {
	if !p.Properties.IsZero() {
		p.Properties = Properties{}
	}
	p.Dup, p.QoS, p.Retain, p.PacketID = false, 0, false, 0
	if p.Topic != "" {
		p.Topic = ""
	}
	if p.Payload != nil {
		p.Payload = nil
	}
}

func (p *Publish) decode(flags byte, d *decoder, v Version) error {
	p.Dup, p.QoS, p.Retain = flags&0x08 != 0, flags>>1&0x03, flags&0x01 != 0
	if p.QoS == 3 {
		return malformed("[MQTT-3.3.1-4]", "PUBLISH with both QoS bits set")
	}
	if p.Dup && p.QoS == 0 {
		// Policy: [MQTT-3.3.1-2] binds the sender; we treat a violation as malformed.
		return malformed("[MQTT-3.3.1-2]", "DUP set on a QoS 0 PUBLISH")
	}
	var err error
	if p.Topic, err = d.str("topic name"); err != nil {
		return err
	}
	if hasWildcard(p.Topic) {
		return &Error{Code: TopicNameInvalid, Ref: "[MQTT-3.3.2-2]", Msg: "topic name contains a wildcard"}
	}
	if p.QoS > 0 {
		if p.PacketID, err = decodePacketID(d, v, TypePublish); err != nil {
			return err
		}
	}
	if v == V5 {
		if err := p.Properties.decode(d, TypePublish, false); err != nil {
			return err
		}
	}
	if p.Topic == "" && !(v == V5 && p.Properties.Has(PropTopicAlias)) {
		return protocolErr("[MQTT-4.7.3-1]", "empty topic name without a Topic Alias")
	}
	if n := len(d.b); d.i < n {
		p.Payload = d.b[d.i:n:n]
	}
	return nil
}

// hasWildcard reports a + or # in s; two byte scans beat
// strings.ContainsAny, which builds a set on every call.
func hasWildcard(s string) bool {
	return strings.IndexByte(s, '+') >= 0 || strings.IndexByte(s, '#') >= 0
}

// decodePacketID reads a packet identifier, which must not be 0
// (3.1.1 [MQTT-2.3.1-1]; 5.0 [MQTT-2.2.1-3]).
func decodePacketID(d *decoder, v Version, t Type) (uint16, error) {
	id, err := d.uint16("packet identifier")
	if err != nil {
		return 0, err
	}
	if id == 0 {
		return 0, protocolErr(pick(v == V5, "[MQTT-2.2.1-3]", "[MQTT-2.3.1-1]"), t.String()+" with packet identifier 0")
	}
	return id, nil
}

func (p *Publish) remaining(v Version) int {
	return publishRemaining(v, p.QoS, len(p.Topic), &p.Properties, len(p.Payload))
}

// publishRemaining is the remaining length of a PUBLISH; props nil stands
// for none.
func publishRemaining(v Version, qos byte, topic int, props *Properties, payload int) int {
	n := 2 + topic + payload
	if qos > 0 {
		n += 2
	}
	if v == V5 {
		if props != nil {
			n += props.Size()
		} else {
			n++ // property length 0
		}
	}
	return n
}

// Size reports the encoded size for version v.
func (p *Publish) Size(v Version) int { return frameSize(p.remaining(v)) }

// Append appends the PUBLISH for version v; properties only for 5.0, and
// the packet identifier only for QoS 1 and 2. Into a dst with enough
// capacity it does not allocate.
func (p *Publish) Append(dst []byte, v Version) ([]byte, error) {
	return appendPublish(dst, v, p.Dup, p.QoS, p.Retain, p.Topic, p.PacketID, &p.Properties, p.Payload)
}

// AppendPublishPlain appends what Publish.Append does for a PUBLISH with
// these fields and no properties, without a Publish to fill: its
// Properties are most of its size, and zeroing them for every delivery
// showed in qos1's profile (docs/perf-log.md).
func AppendPublishPlain(dst []byte, v Version, dup bool, qos byte, retain bool, topic string, id uint16, payload []byte) ([]byte, error) {
	return appendPublish(dst, v, dup, qos, retain, topic, id, nil, payload)
}

// appendPublish is Publish.Append of its fields; props nil stands for
// none.
func appendPublish(dst []byte, v Version, dup bool, qos byte, retain bool, topic string, id uint16, props *Properties, payload []byte) ([]byte, error) {
	if err := checkVersion(v); err != nil {
		return dst, err
	}
	if qos > 2 {
		return dst, encodeErr("PUBLISH QoS %d", qos)
	}
	if err := checkLen("topic name", len(topic)); err != nil {
		return dst, err
	}
	first := byte(TypePublish)<<4 | qos<<1
	if dup {
		first |= 0x08
	}
	if retain {
		first |= 0x01
	}
	dst, err := appendFixed(dst, first, publishRemaining(v, qos, len(topic), props, len(payload)))
	if err != nil {
		return dst, err
	}
	dst = appendString(dst, topic)
	if qos > 0 {
		dst = appendUint16(dst, id)
	}
	if v == V5 {
		if props == nil {
			dst = append(dst, 0)
		} else if dst, err = props.Append(dst); err != nil {
			return dst, err
		}
	}
	return append(dst, payload...), nil
}
