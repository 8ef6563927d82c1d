package packets

// Type reports TypeDisconnect.
func (p *Disconnect) Type() Type { return TypeDisconnect }

func decodeDisconnect(d *decoder, v Version) (Packet, error) {
	p := &Disconnect{}
	if v != V5 {
		return result(p, emptyBody(d, TypeDisconnect))
	}
	return result(p, decodeReasonProps(d, v, TypeDisconnect, &p.ReasonCode, &p.Properties))
}

// decodeReasonProps decodes the 5.0 DISCONNECT / AUTH body: an optional
// reason code (absent means Success) and optional properties.
func decodeReasonProps(d *decoder, v Version, t Type, rc *ReasonCode, props *Properties) error {
	if d.left() == 0 {
		return nil
	}
	var err error
	if *rc, err = decodeReason(d, v, t); err != nil {
		return err
	}
	if d.left() == 0 {
		return nil
	}
	if err := props.decode(d, t, false); err != nil {
		return err
	}
	return noTrailing(d, t)
}

// reasonPropsRemaining picks the shortest 5.0 form: nothing for Success
// without properties, the reason code alone without properties.
func reasonPropsRemaining(rc ReasonCode, props *Properties) int {
	n := props.bodyLen()
	switch {
	case n > 0:
		return 1 + VarIntSize(n) + n
	case rc != Success:
		return 1
	default:
		return 0
	}
}

func appendReasonProps(dst []byte, v Version, t Type, rc ReasonCode, props *Properties) ([]byte, error) {
	rem := reasonPropsRemaining(rc, props)
	dst, err := appendFixed(dst, byte(t)<<4, rem)
	if err != nil || rem == 0 {
		return dst, err
	}
	dst = append(dst, byte(rc))
	if rem > 1 {
		return props.Append(dst)
	}
	return dst, nil
}

// Size reports the encoded size for version v.
func (p *Disconnect) Size(v Version) int {
	if v != V5 {
		return 2
	}
	return frameSize(reasonPropsRemaining(p.ReasonCode, &p.Properties))
}

// Append appends the DISCONNECT for version v; reason code and properties
// only for 5.0, in the shortest form.
func (p *Disconnect) Append(dst []byte, v Version) ([]byte, error) {
	if err := checkVersion(v); err != nil {
		return dst, err
	}
	if v != V5 {
		return append(dst, byte(TypeDisconnect)<<4, 0), nil
	}
	return appendReasonProps(dst, v, TypeDisconnect, p.ReasonCode, &p.Properties)
}
