package packets

// Type reports TypeUnsuback.
func (u *Unsuback) Type() Type { return TypeUnsuback }

// decodeUnsuback decodes an UNSUBACK: before 5.0 only a packet identifier.
func decodeUnsuback(d *decoder, v Version) (Packet, error) {
	u := &Unsuback{}
	var err error
	if v != V5 {
		if u.PacketID, err = decodePacketID(d, v, TypeUnsuback); err != nil {
			return nil, err
		}
		return result(u, noTrailing(d, TypeUnsuback))
	}
	if u.PacketID, u.ReasonCodes, err = decodeAckList(d, v, TypeUnsuback, &u.Properties); err != nil {
		return nil, err
	}
	return u, nil
}

// Size reports the encoded size for version v.
func (u *Unsuback) Size(v Version) int {
	if v != V5 {
		return 4
	}
	return frameSize(ackListRemaining(v, &u.Properties, u.ReasonCodes))
}

// Append appends the UNSUBACK for version v; ReasonCodes and Properties
// are written only for 5.0.
func (u *Unsuback) Append(dst []byte, v Version) ([]byte, error) {
	if v != V5 {
		return appendAckList(dst, v, byte(TypeUnsuback)<<4, u.PacketID, &u.Properties, nil)
	}
	return appendAckList(dst, v, byte(TypeUnsuback)<<4, u.PacketID, &u.Properties, u.ReasonCodes)
}
