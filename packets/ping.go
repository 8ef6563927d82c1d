package packets

// Type reports TypePingreq.
func (*Pingreq) Type() Type { return TypePingreq }

// Size reports the encoded size, 2 bytes in every version.
func (*Pingreq) Size(Version) int { return 2 }

// Append appends the PINGREQ.
func (*Pingreq) Append(dst []byte, v Version) ([]byte, error) {
	if err := checkVersion(v); err != nil {
		return dst, err
	}
	return append(dst, byte(TypePingreq)<<4, 0), nil
}

// Type reports TypePingresp.
func (*Pingresp) Type() Type { return TypePingresp }

// Size reports the encoded size, 2 bytes in every version.
func (*Pingresp) Size(Version) int { return 2 }

// Append appends the PINGRESP.
func (*Pingresp) Append(dst []byte, v Version) ([]byte, error) {
	if err := checkVersion(v); err != nil {
		return dst, err
	}
	return append(dst, byte(TypePingresp)<<4, 0), nil
}
