package packets

import "fmt"

// Connect flag bits (§3.1.2.3).
const (
	connFlagReserved   = 0x01
	connFlagCleanStart = 0x02
	connFlagWill       = 0x04
	connFlagWillRetain = 0x20
	connFlagPassword   = 0x40
	connFlagUsername   = 0x80
)

// bridgeBit is the protocol level's bit by which a bridge says it is one.
const bridgeBit = 0x80

// Type reports TypeConnect.
func (c *Connect) Type() Type { return TypeConnect }

// protocolName is the name each level must carry.
func protocolName(v Version) string {
	if v == V31 {
		return "MQIsdp"
	}
	return "MQTT"
}

// DecodeConnect is Decode for a CONNECT frame, decoded into c, which it
// first makes the zero Connect, so that a caller may decode every CONNECT
// into one it reuses. decoded reports whether c was read as far as its
// protocol level: Decode returns c then, with or without an error, and
// no packet otherwise. What c holds aliases body, as Decode's packets do.
func (l Limits) DecodeConnect(fh FixedHeader, body []byte, c *Connect) (decoded bool, err error) {
	*c = Connect{}
	if fh.Type != TypeConnect || len(body) != fh.Remaining {
		return false, malformed("§2.1.4", "not a whole CONNECT frame")
	}
	decoded, err = decodeConnect(body, l, c)
	// Checked after the body so that a flags error comes with the level.
	if ferr := checkFlags(fh, 0); ferr != nil {
		return decoded, ferr
	}
	return decoded, err
}

// decodeConnect decodes a CONNECT body into c, zero; see DecodeConnect.
func decodeConnect(body []byte, l Limits, c *Connect) (decoded bool, err error) {
	d := &decoder{b: body, maxUser: l.MaxUserProperties}
	name, err := d.str("protocol name")
	if err != nil {
		return false, err
	}
	level, err := d.byte1("protocol level")
	if err != nil {
		return false, err
	}
	c.ProtocolName, c.ProtocolVersion = name, Version(level)
	if level&bridgeBit != 0 && Version(level&^bridgeBit) != V5 {
		c.Bridge, c.ProtocolVersion = true, Version(level&^bridgeBit)
	}
	if err := checkProtocol(name, c.ProtocolVersion); err != nil {
		return true, err
	}
	return true, c.decodeRest(d)
}

// checkProtocol matches the protocol name against the level. An unknown
// name is reported before an unknown level: the bytes are then probably
// not MQTT at all. A known name with a level it does not go with is an
// unsupported level.
func checkProtocol(name string, v Version) error {
	if name != "MQTT" && name != "MQIsdp" {
		return protocolErr("[MQTT-3.1.2-1]", fmt.Sprintf("protocol name %q is not MQTT", name))
	}
	if v != V31 && v != V311 && v != V5 {
		return &Error{Code: UnsupportedProtocolVersion, Ref: "[MQTT-3.1.2-2]",
			Msg: fmt.Sprintf("unsupported protocol level %d", byte(v))}
	}
	if name != protocolName(v) {
		// A level this name never had (MQTT.js sends "MQTT" with level 3
		// when asked for 3.1) is a level the server does not support under
		// that name: the client is told so rather than met with silence.
		return &Error{Code: UnsupportedProtocolVersion, Ref: "[MQTT-3.1.2-1]",
			Msg: fmt.Sprintf("protocol name %q does not match level %d", name, byte(v))}
	}
	return nil
}

func (c *Connect) decodeRest(d *decoder) error {
	v := c.ProtocolVersion
	flags, err := d.byte1("connect flags")
	if err != nil {
		return err
	}
	if err := c.setFlags(flags); err != nil {
		return err
	}
	if c.KeepAlive, err = d.uint16("keep alive"); err != nil {
		return err
	}
	if v == V5 {
		if err := c.Properties.decode(d, TypeConnect, false); err != nil {
			return err
		}
	}
	if c.ClientID, err = d.str("client identifier"); err != nil {
		return err
	}
	if c.WillFlag {
		if v == V5 {
			if err := c.WillProperties.decode(d, TypeConnect, true); err != nil {
				return err
			}
		}
		if c.WillTopic, err = d.str("will topic"); err != nil {
			return err
		}
		if c.WillPayload, err = d.binary("will payload"); err != nil {
			return err
		}
	}
	if c.UsernameFlag {
		if c.Username, err = d.str("user name"); err != nil {
			return err
		}
	}
	if c.PasswordFlag {
		if c.Password, err = d.binary("password"); err != nil {
			return err
		}
	}
	return noTrailing(d, TypeConnect)
}

// setFlags unpacks and validates the Connect Flags byte.
func (c *Connect) setFlags(f byte) error {
	v5 := c.ProtocolVersion == V5
	if f&connFlagReserved != 0 {
		return malformed("[MQTT-3.1.2-3]", "CONNECT reserved flag is set")
	}
	c.CleanStart = f&connFlagCleanStart != 0
	c.WillFlag = f&connFlagWill != 0
	c.WillQoS = f >> 3 & 0x03
	c.WillRetain = f&connFlagWillRetain != 0
	c.PasswordFlag = f&connFlagPassword != 0
	c.UsernameFlag = f&connFlagUsername != 0
	if !c.WillFlag && c.WillQoS != 0 {
		return malformed(pick(v5, "[MQTT-3.1.2-11]", "[MQTT-3.1.2-13]"), "will QoS set without the will flag")
	}
	if !c.WillFlag && c.WillRetain {
		return malformed(pick(v5, "[MQTT-3.1.2-13]", "[MQTT-3.1.2-15]"), "will retain set without the will flag")
	}
	if c.WillQoS == 3 {
		return malformed(pick(v5, "[MQTT-3.1.2-12]", "[MQTT-3.1.2-14]"), "will QoS 3")
	}
	// 5.0 §3.1.2.9 allows a password without a user name; 3.1 and 3.1.1 do not.
	if !v5 && c.PasswordFlag && !c.UsernameFlag {
		return malformed("[MQTT-3.1.2-22]", "password flag set without the user name flag")
	}
	return nil
}

func pick(cond bool, a, b string) string {
	if cond {
		return a
	}
	return b
}

func (c *Connect) flags() byte {
	f := c.WillQoS << 3
	for _, b := range [...]struct {
		on  bool
		bit byte
	}{
		{c.CleanStart, connFlagCleanStart}, {c.WillFlag, connFlagWill}, {c.WillRetain, connFlagWillRetain},
		{c.PasswordFlag, connFlagPassword}, {c.UsernameFlag, connFlagUsername},
	} {
		if b.on {
			f |= b.bit
		}
	}
	return f
}

func (c *Connect) remaining(v Version) int {
	n := 2 + len(protocolName(v)) + 1 + 1 + 2 + 2 + len(c.ClientID)
	if v == V5 {
		n += c.Properties.Size()
	}
	if c.WillFlag {
		n += 4 + len(c.WillTopic) + len(c.WillPayload)
		if v == V5 {
			n += c.WillProperties.Size()
		}
	}
	if c.UsernameFlag {
		n += 2 + len(c.Username)
	}
	if c.PasswordFlag {
		n += 2 + len(c.Password)
	}
	return n
}

// Size reports the encoded size for version v.
func (c *Connect) Size(v Version) int { return frameSize(c.remaining(v)) }

// Append appends the CONNECT for version v, whose level and protocol name
// ("MQIsdp" for 3.1, "MQTT" otherwise) it uses in place of ProtocolName
// and ProtocolVersion. The flag fields decide which optional fields are
// written.
func (c *Connect) Append(dst []byte, v Version) ([]byte, error) {
	if err := checkVersion(v); err != nil {
		return dst, err
	}
	if c.WillQoS > 2 {
		return dst, encodeErr("will QoS %d", c.WillQoS)
	}
	for _, f := range [...]struct {
		name string
		n    int
	}{
		{"client identifier", len(c.ClientID)}, {"will topic", len(c.WillTopic)}, {"will payload", len(c.WillPayload)},
		{"user name", len(c.Username)}, {"password", len(c.Password)},
	} {
		if err := checkLen(f.name, f.n); err != nil {
			return dst, err
		}
	}
	rem := c.remaining(v)
	dst, err := appendFixed(dst, byte(TypeConnect)<<4, rem)
	if err != nil {
		return dst, err
	}
	level := byte(v)
	if c.Bridge && v != V5 {
		level |= bridgeBit
	}
	dst = append(appendString(dst, protocolName(v)), level, c.flags())
	dst = appendUint16(dst, c.KeepAlive)
	if v == V5 {
		if dst, err = c.Properties.Append(dst); err != nil {
			return dst, err
		}
	}
	dst = appendString(dst, c.ClientID)
	if c.WillFlag {
		if v == V5 {
			if dst, err = c.WillProperties.Append(dst); err != nil {
				return dst, err
			}
		}
		dst = appendBinary(appendString(dst, c.WillTopic), c.WillPayload)
	}
	if c.UsernameFlag {
		dst = appendString(dst, c.Username)
	}
	if c.PasswordFlag {
		dst = appendBinary(dst, c.Password)
	}
	return dst, nil
}
