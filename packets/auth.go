package packets

// Type reports TypeAuth.
func (p *Auth) Type() Type { return TypeAuth }

func decodeAuth(d *decoder) (Packet, error) {
	p := &Auth{}
	return result(p, decodeReasonProps(d, V5, TypeAuth, &p.ReasonCode, &p.Properties))
}

// Size reports the encoded size; AUTH exists only in 5.0.
func (p *Auth) Size(Version) int { return frameSize(reasonPropsRemaining(p.ReasonCode, &p.Properties)) }

// Append appends the AUTH packet; any version but 5.0 is an error.
func (p *Auth) Append(dst []byte, v Version) ([]byte, error) {
	if v != V5 {
		return dst, encodeErr("AUTH needs MQTT 5.0, not version %d", v)
	}
	return appendReasonProps(dst, v, TypeAuth, p.ReasonCode, &p.Properties)
}
