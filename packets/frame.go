package packets

import "fmt"

// ParseFixedHeader parses the fixed header at the front of b, for readers
// that manage their own buffers. n is the header's length; n == 0 with a
// nil error means b does not hold a whole header yet. The same checks as
// ReadPacket apply, before the body is looked at: with v == 0 only CONNECT
// is accepted [MQTT-3.1.0-1], and a frame larger than maxSize (when
// positive) gives PacketTooLarge.
func ParseFixedHeader(b []byte, v Version, maxSize int) (fh FixedHeader, n int, err error) {
	if len(b) == 0 {
		return fh, 0, nil
	}
	t := Type(b[0] >> 4)
	if err := checkFirst(t, v); err != nil {
		return fh, 0, err
	}
	rem, used, err := parseVarInt(b[1:])
	if used == 0 {
		return fh, 0, nil // the length is not all here yet
	}
	if err != nil {
		return fh, 0, err
	}
	if err := checkSize(t, rem, maxSize); err != nil {
		return fh, 0, err
	}
	return FixedHeader{Type: t, Flags: b[0] & 0x0F, Remaining: rem}, 1 + used, nil
}

// checkFirst refuses anything but CONNECT while the version is unknown,
// before the remaining length is read (CVE-2023-0809).
func checkFirst(t Type, v Version) error {
	if v == 0 && t != TypeConnect {
		return protocolErr("[MQTT-3.1.0-1]", "first packet is "+t.String()+", not CONNECT")
	}
	return nil
}

// checkSize applies the maximum packet size to the whole frame.
func checkSize(t Type, remaining, maxSize int) error {
	if maxSize > 0 && frameSize(remaining) > maxSize {
		return &Error{Code: PacketTooLarge, Ref: "§3.1.2.11.4", Size: frameSize(remaining),
			Msg: fmt.Sprintf("%s of %d bytes exceeds the maximum packet size %d", t, frameSize(remaining), maxSize)}
	}
	return nil
}
