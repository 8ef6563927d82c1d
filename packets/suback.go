package packets

// Type reports TypeSuback.
func (s *Suback) Type() Type { return TypeSuback }

func decodeSuback(d *decoder, v Version) (Packet, error) {
	s := &Suback{}
	var err error
	if s.PacketID, s.ReasonCodes, err = decodeAckList(d, v, TypeSuback, &s.Properties); err != nil {
		return nil, err
	}
	return s, nil
}

// decodeAckList decodes the shared SUBACK / 5.0 UNSUBACK layout: packet
// identifier, 5.0 properties, then one reason code per topic filter.
func decodeAckList(d *decoder, v Version, t Type, props *Properties) (uint16, []ReasonCode, error) {
	id, err := decodePacketID(d, v, t)
	if err != nil {
		return 0, nil, err
	}
	if v == V5 {
		if err := props.decode(d, t, false); err != nil {
			return 0, nil, err
		}
	}
	if d.left() == 0 {
		return 0, nil, protocolErr(pick(t == TypeSuback, "§3.9.3", "§3.11.3"), t.String()+" without reason codes")
	}
	codes := make([]ReasonCode, 0, d.left())
	for d.left() > 0 {
		c, err := decodeReason(d, v, t)
		if err != nil {
			return 0, nil, err
		}
		codes = append(codes, c)
	}
	return id, codes, nil
}

func appendAckList(dst []byte, v Version, first byte, id uint16, props *Properties, codes []ReasonCode) ([]byte, error) {
	if err := checkVersion(v); err != nil {
		return dst, err
	}
	dst, err := appendFixed(dst, first, ackListRemaining(v, props, codes))
	if err != nil {
		return dst, err
	}
	dst = appendUint16(dst, id)
	if v == V5 {
		if dst, err = props.Append(dst); err != nil {
			return dst, err
		}
	}
	for _, c := range codes {
		dst = append(dst, byte(c))
	}
	return dst, nil
}

func ackListRemaining(v Version, props *Properties, codes []ReasonCode) int {
	n := 2 + len(codes)
	if v == V5 {
		n += props.Size()
	}
	return n
}

// Size reports the encoded size for version v.
func (s *Suback) Size(v Version) int {
	return frameSize(ackListRemaining(v, &s.Properties, s.ReasonCodes))
}

// noProperties is the empty property list, read only.
var noProperties Properties

// AppendSuback appends the SUBACK without properties for version v, as
// Suback.Append does, without a Suback to build: its properties make one
// ~300 bytes, on the heap or on a reader's stack.
func AppendSuback(dst []byte, v Version, id uint16, codes []ReasonCode) ([]byte, error) {
	return appendAckList(dst, v, byte(TypeSuback)<<4, id, &noProperties, codes)
}

// Append appends the SUBACK for version v.
func (s *Suback) Append(dst []byte, v Version) ([]byte, error) {
	return appendAckList(dst, v, byte(TypeSuback)<<4, s.PacketID, &s.Properties, s.ReasonCodes)
}
