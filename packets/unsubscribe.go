package packets

// Type reports TypeUnsubscribe.
func (u *Unsubscribe) Type() Type { return TypeUnsubscribe }

func decodeUnsubscribe(d *decoder, v Version) (Packet, error) {
	u := &Unsubscribe{}
	var err error
	if u.PacketID, err = decodePacketID(d, v, TypeUnsubscribe); err != nil {
		return nil, err
	}
	if v == V5 {
		if err := u.Properties.decode(d, TypeUnsubscribe, false); err != nil {
			return nil, err
		}
	}
	if d.left() == 0 {
		return nil, protocolErr("[MQTT-3.10.3-2]", "UNSUBSCRIBE without topic filters")
	}
	for d.left() > 0 {
		f, err := d.str("topic filter")
		if err != nil {
			return nil, err
		}
		u.Filters = append(u.Filters, f)
	}
	return u, nil
}

func (u *Unsubscribe) remaining(v Version) int {
	n := 2
	if v == V5 {
		n += u.Properties.Size()
	}
	for _, f := range u.Filters {
		n += 2 + len(f)
	}
	return n
}

// Size reports the encoded size for version v.
func (u *Unsubscribe) Size(v Version) int { return frameSize(u.remaining(v)) }

// Append appends the UNSUBSCRIBE (fixed-header flags 0010) for version v.
func (u *Unsubscribe) Append(dst []byte, v Version) ([]byte, error) {
	if err := checkVersion(v); err != nil {
		return dst, err
	}
	for _, f := range u.Filters {
		if err := checkLen("topic filter", len(f)); err != nil {
			return dst, err
		}
	}
	dst, err := appendFixed(dst, byte(TypeUnsubscribe)<<4|0x02, u.remaining(v))
	if err != nil {
		return dst, err
	}
	dst = appendUint16(dst, u.PacketID)
	if v == V5 {
		if dst, err = u.Properties.Append(dst); err != nil {
			return dst, err
		}
	}
	for _, f := range u.Filters {
		dst = appendString(dst, f)
	}
	return dst, nil
}
