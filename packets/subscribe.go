package packets

// Type reports TypeSubscribe.
func (s *Subscribe) Type() Type { return TypeSubscribe }

// decodeSubscribe decodes a SUBSCRIBE. Topic filter syntax (wildcard
// placement, shared subscriptions) is not checked here: a bad filter gets a
// failure code in the SUBACK, not a closed connection (checklist row 41).
func decodeSubscribe(d *decoder, v Version) (Packet, error) {
	s := &Subscribe{}
	var err error
	if s.PacketID, err = decodePacketID(d, v, TypeSubscribe); err != nil {
		return nil, err
	}
	if v == V5 {
		if err := s.Properties.decode(d, TypeSubscribe, false); err != nil {
			return nil, err
		}
	}
	if d.left() == 0 {
		return nil, protocolErr(pick(v == V5, "[MQTT-3.8.3-2]", "[MQTT-3.8.3-3]"), "SUBSCRIBE without topic filters")
	}
	for d.left() > 0 {
		var sub Subscription
		if sub.Filter, err = d.str("topic filter"); err != nil {
			return nil, err
		}
		o, err := d.byte1("subscription options")
		if err != nil {
			return nil, err
		}
		if sub.Options, err = decodeSubOptions(o, v); err != nil {
			return nil, err
		}
		s.Subscriptions = append(s.Subscriptions, sub)
	}
	return s, nil
}

func decodeSubOptions(o byte, v Version) (SubOptions, error) {
	opts := SubOptions{QoS: o & 0x03}
	if v != V5 {
		if o&0xFC != 0 {
			return opts, malformed("[MQTT-3-8.3-4]", "SUBSCRIBE reserved option bits are set")
		}
	} else {
		if o&0xC0 != 0 {
			return opts, malformed("[MQTT-3.8.3-5]", "SUBSCRIBE reserved option bits are set")
		}
		opts.NoLocal = o&0x04 != 0
		opts.RetainAsPublished = o&0x08 != 0
		opts.RetainHandling = o >> 4 & 0x03
		if opts.RetainHandling == 3 {
			return opts, protocolErr("§3.8.3.1", "SUBSCRIBE Retain Handling 3")
		}
	}
	if opts.QoS == 3 {
		return opts, malformed(pick(v == V5, "§3.8.3.1", "[MQTT-3-8.3-4]"), "SUBSCRIBE requested QoS 3")
	}
	return opts, nil
}

func (o SubOptions) byte(v Version) byte {
	b := o.QoS
	if v != V5 {
		return b
	}
	if o.NoLocal {
		b |= 0x04
	}
	if o.RetainAsPublished {
		b |= 0x08
	}
	return b | o.RetainHandling<<4
}

func (s *Subscribe) remaining(v Version) int {
	n := 2
	if v == V5 {
		n += s.Properties.Size()
	}
	for _, sub := range s.Subscriptions {
		n += 3 + len(sub.Filter)
	}
	return n
}

// Size reports the encoded size for version v.
func (s *Subscribe) Size(v Version) int { return frameSize(s.remaining(v)) }

// Append appends the SUBSCRIBE (fixed-header flags 0010) for version v.
// Before 5.0 only each filter's QoS is written.
func (s *Subscribe) Append(dst []byte, v Version) ([]byte, error) {
	if err := checkVersion(v); err != nil {
		return dst, err
	}
	for _, sub := range s.Subscriptions {
		if err := checkLen("topic filter", len(sub.Filter)); err != nil {
			return dst, err
		}
		if sub.Options.QoS > 2 || sub.Options.RetainHandling > 2 {
			return dst, encodeErr("subscription options %+v", sub.Options)
		}
	}
	dst, err := appendFixed(dst, byte(TypeSubscribe)<<4|0x02, s.remaining(v))
	if err != nil {
		return dst, err
	}
	dst = appendUint16(dst, s.PacketID)
	if v == V5 {
		if dst, err = s.Properties.Append(dst); err != nil {
			return dst, err
		}
	}
	for _, sub := range s.Subscriptions {
		dst = append(appendString(dst, sub.Filter), sub.Options.byte(v))
	}
	return dst, nil
}
