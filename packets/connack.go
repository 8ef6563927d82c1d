package packets

// Type reports TypeConnack.
func (c *Connack) Type() Type { return TypeConnack }

func decodeConnack(d *decoder, v Version) (Packet, error) {
	flags, err := d.byte1("connect acknowledge flags")
	if err != nil {
		return nil, err
	}
	if flags&^0x01 != 0 {
		return nil, malformed("§3.2.2.1", "CONNACK reserved flags are set")
	}
	c := &Connack{SessionPresent: flags&0x01 != 0}
	if c.ReasonCode, err = decodeReason(d, v, TypeConnack); err != nil {
		return nil, err
	}
	if v == V5 {
		if err := c.Properties.decode(d, TypeConnack, false); err != nil {
			return nil, err
		}
	}
	return result(c, noTrailing(d, TypeConnack))
}

func (c *Connack) remaining(v Version) int {
	if v == V5 {
		return 2 + c.Properties.Size()
	}
	return 2
}

// Size reports the encoded size for version v.
func (c *Connack) Size(v Version) int { return frameSize(c.remaining(v)) }

// Append appends the CONNACK for version v; ReasonCode is the 3.1/3.1.1
// return code before 5.0.
func (c *Connack) Append(dst []byte, v Version) ([]byte, error) {
	if err := checkVersion(v); err != nil {
		return dst, err
	}
	dst, err := appendFixed(dst, byte(TypeConnack)<<4, c.remaining(v))
	if err != nil {
		return dst, err
	}
	var flags byte
	if c.SessionPresent {
		flags = 0x01
	}
	dst = append(dst, flags, byte(c.ReasonCode))
	if v == V5 {
		return c.Properties.Append(dst)
	}
	return dst, nil
}
