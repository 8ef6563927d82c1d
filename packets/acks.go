package packets

import "fmt"

// PUBACK, PUBREC, PUBREL and PUBCOMP share one layout (§3.4-§3.7): packet
// identifier, then in 5.0 an optional reason code and optional properties.
// They share the code below; each type has its own methods.

func decodeAck(d *decoder, v Version, t Type, id *uint16, rc *ReasonCode, props *Properties) error {
	var err error
	if *id, err = decodePacketID(d, v, t); err != nil {
		return err
	}
	if v != V5 {
		return noTrailing(d, t)
	}
	return decodeReasonProps(d, v, t, rc, props)
}

// ackRemaining is the packet identifier plus, in 5.0, the shortest form of
// reason code and properties (see reasonPropsRemaining).
func ackRemaining(v Version, rc ReasonCode, props *Properties) int {
	if v != V5 {
		return 2
	}
	return 2 + reasonPropsRemaining(rc, props)
}

func appendAck(dst []byte, v Version, first byte, id uint16, rc ReasonCode, props *Properties) ([]byte, error) {
	if err := checkVersion(v); err != nil {
		return dst, err
	}
	rem := ackRemaining(v, rc, props)
	dst, err := appendFixed(dst, first, rem)
	if err != nil {
		return dst, err
	}
	dst = appendUint16(dst, id)
	if rem > 2 {
		dst = append(dst, byte(rc))
	}
	if rem > 3 {
		return props.Append(dst)
	}
	return dst, nil
}

// Type reports TypePuback.
func (p *Puback) Type() Type { return TypePuback }

// Size reports the encoded size for version v.
func (p *Puback) Size(v Version) int { return frameSize(ackRemaining(v, p.ReasonCode, &p.Properties)) }

// Append appends the PUBACK for version v, in its shortest 5.0 form.
func (p *Puback) Append(dst []byte, v Version) ([]byte, error) {
	return appendAck(dst, v, byte(TypePuback)<<4, p.PacketID, p.ReasonCode, &p.Properties)
}

// Type reports TypePubrec.
func (p *Pubrec) Type() Type { return TypePubrec }

// Size reports the encoded size for version v.
func (p *Pubrec) Size(v Version) int { return frameSize(ackRemaining(v, p.ReasonCode, &p.Properties)) }

// Append appends the PUBREC for version v, in its shortest 5.0 form.
func (p *Pubrec) Append(dst []byte, v Version) ([]byte, error) {
	return appendAck(dst, v, byte(TypePubrec)<<4, p.PacketID, p.ReasonCode, &p.Properties)
}

// Type reports TypePubrel.
func (p *Pubrel) Type() Type { return TypePubrel }

// Size reports the encoded size for version v.
func (p *Pubrel) Size(v Version) int { return frameSize(ackRemaining(v, p.ReasonCode, &p.Properties)) }

// Append appends the PUBREL (fixed-header flags 0010) for version v, in
// its shortest 5.0 form.
func (p *Pubrel) Append(dst []byte, v Version) ([]byte, error) {
	return appendAck(dst, v, byte(TypePubrel)<<4|0x02, p.PacketID, p.ReasonCode, &p.Properties)
}

// Type reports TypePubcomp.
func (p *Pubcomp) Type() Type { return TypePubcomp }

// Size reports the encoded size for version v.
func (p *Pubcomp) Size(v Version) int { return frameSize(ackRemaining(v, p.ReasonCode, &p.Properties)) }

// Append appends the PUBCOMP for version v, in its shortest 5.0 form.
func (p *Pubcomp) Append(dst []byte, v Version) ([]byte, error) {
	return appendAck(dst, v, byte(TypePubcomp)<<4, p.PacketID, p.ReasonCode, &p.Properties)
}

// Ack is what PUBACK, PUBREC, PUBREL and PUBCOMP carry; Type says which.
// DecodeAck and AppendAck work on it in place, so that the commonest
// packets after PUBLISH cost the broker no allocation.
type Ack struct {
	Type       Type
	PacketID   uint16
	ReasonCode ReasonCode
	Properties Properties
}

// IsAck reports whether t is PUBACK, PUBREC, PUBREL or PUBCOMP.
func IsAck(t Type) bool { return t >= TypePuback && t <= TypePubcomp }

// DecodeAck is Decode for a frame of one of the four acknowledgements
// (IsAck), decoded into a. As with Decode, the strings of a.Properties
// share body's memory; a body of 4 bytes or less has no properties.
func (l Limits) DecodeAck(fh FixedHeader, body []byte, v Version, a *Ack) error {
	if !IsAck(fh.Type) || len(body) != fh.Remaining {
		return malformed("§2.1.4", "not a whole acknowledgement frame")
	}
	if v == 0 {
		return protocolErr("[MQTT-3.1.0-1]", "first packet is "+fh.Type.String()+", not CONNECT")
	}
	if err := checkFlags(fh, v); err != nil {
		return err
	}
	*a = Ack{Type: fh.Type}
	return decodeAck(&decoder{b: body, maxUser: l.MaxUserProperties}, v, fh.Type, &a.PacketID, &a.ReasonCode, &a.Properties)
}

// Packet returns a as the packet of its type.
func (a *Ack) Packet() Packet {
	switch a.Type {
	case TypePubrec:
		return &Pubrec{a.PacketID, a.ReasonCode, a.Properties}
	case TypePubrel:
		return &Pubrel{a.PacketID, a.ReasonCode, a.Properties}
	case TypePubcomp:
		return &Pubcomp{a.PacketID, a.ReasonCode, a.Properties}
	}
	return &Puback{a.PacketID, a.ReasonCode, a.Properties}
}

// Append appends the acknowledgement for version v, as its packet's
// Append does.
func (a *Ack) Append(dst []byte, v Version) ([]byte, error) {
	first := byte(a.Type) << 4
	switch a.Type {
	case TypePubrel:
		first |= 0x02
	case TypePuback, TypePubrec, TypePubcomp:
	default:
		return dst, fmt.Errorf("packets: %s is not an acknowledgement", a.Type)
	}
	return appendAck(dst, v, first, a.PacketID, a.ReasonCode, &a.Properties)
}
