package packets

import (
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"
	"unsafe"
)

// MaxRemainingLength is the largest remaining length a fixed header can
// carry: four variable-byte-integer bytes (§1.5.5, 3.1.1 §2.2.3).
const MaxRemainingLength = 268_435_455

// ErrEncode is wrapped by every error Append returns: the packet value
// cannot be put on the wire (unsupported version, field too long, QoS 3).
var ErrEncode = errors.New("mqtt: cannot encode packet")

func encodeErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrEncode}, args...)...)
}

// AppendVarInt appends n as an MQTT variable byte integer (§1.5.5), using
// the minimum number of bytes. n must be in [0, MaxRemainingLength]; larger
// values are the caller's bug and are truncated to their low 28 bits.
func AppendVarInt(dst []byte, n int) []byte {
	for {
		b := byte(n & 0x7F)
		n >>= 7
		if n == 0 {
			return append(dst, b)
		}
		dst = append(dst, b|0x80)
	}
}

// VarIntSize reports how many bytes AppendVarInt uses for n.
func VarIntSize(n int) int {
	switch {
	case n < 1<<7:
		return 1
	case n < 1<<14:
		return 2
	case n < 1<<21:
		return 3
	default:
		return 4
	}
}

// ValidUTF8String reports whether s is an MQTT UTF-8 Encoded String body:
// well-formed UTF-8 (no overlong forms, no surrogates U+D800-U+DFFF, nothing
// above U+10FFFF) [MQTT-1.5.4-1] and no U+0000 [MQTT-1.5.4-2]. A BOM
// (U+FEFF) is an ordinary character and is accepted [MQTT-1.5.4-3]. The
// length limit of 65,535 bytes is the framing's concern, not checked here.
func ValidUTF8String(s string) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c == 0 {
			return false
		}
		if c < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n <= 1 {
			return false
		}
		i += n
	}
	return true
}

// decoder walks a packet body. Strings and byte slices it returns alias
// the body, which the decoded packet owns.
type decoder struct {
	b []byte
	i int
	// maxUser, when positive, is the most user properties kept per
	// property list (Limits.MaxUserProperties).
	maxUser int
}

func (d *decoder) left() int { return len(d.b) - d.i }

func truncated(what string) *Error {
	return malformed("§1.5", "packet truncated in "+what)
}

func (d *decoder) byte1(what string) (byte, error) {
	if d.i >= len(d.b) {
		return 0, truncated(what)
	}
	c := d.b[d.i]
	d.i++
	return c, nil
}

func (d *decoder) uint16(what string) (uint16, error) {
	if d.left() < 2 {
		return 0, truncated(what)
	}
	v := uint16(d.b[d.i])<<8 | uint16(d.b[d.i+1])
	d.i += 2
	return v, nil
}

func (d *decoder) uint32(what string) (uint32, error) {
	if d.left() < 4 {
		return 0, truncated(what)
	}
	b := d.b[d.i : d.i+4]
	d.i += 4
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]), nil
}

// varint decodes a variable byte integer; non-minimal encodings (such as
// 80 00) are malformed [MQTT-1.5.5-1]. We reject them in 3.1.1 too: no
// conforming client sends them and accepting two spellings of a number
// only helps smuggling.
func (d *decoder) varint(what string) (int, error) {
	n, used, err := parseVarInt(d.b[d.i:])
	if err != nil {
		if used == 0 {
			return 0, truncated(what)
		}
		return 0, err
	}
	d.i += used
	return n, nil
}

// parseVarInt decodes a variable byte integer from the front of b. On a
// short buffer it returns used == 0 and a non-nil error.
func parseVarInt(b []byte) (n, used int, err error) {
	shift := 0
	for i := 0; i < 4; i++ {
		if i >= len(b) {
			return 0, 0, truncated("variable byte integer")
		}
		c := b[i]
		n |= int(c&0x7F) << shift
		if c&0x80 == 0 {
			if i > 0 && c == 0 {
				return 0, i + 1, malformed("[MQTT-1.5.5-1]", "variable byte integer not minimally encoded")
			}
			return n, i + 1, nil
		}
		shift += 7
	}
	return 0, 4, malformed("§1.5.5", "variable byte integer longer than 4 bytes")
}

// binary reads a two-byte length and that many bytes. A zero length gives
// nil so that decoded values compare equal to literals without the field.
func (d *decoder) binary(what string) ([]byte, error) {
	n, err := d.uint16(what)
	if err != nil {
		return nil, err
	}
	if d.left() < int(n) {
		return nil, truncated(what)
	}
	if n == 0 {
		return nil, nil
	}
	j := d.i + int(n)
	b := d.b[d.i:j:j]
	d.i = j
	return b, nil
}

// str reads a UTF-8 Encoded String and validates it [MQTT-1.5.4-1/2].
func (d *decoder) str(what string) (string, error) {
	b, err := d.binary(what)
	if err != nil {
		return "", err
	}
	s := aliasString(b)
	if !ValidUTF8String(s) {
		return "", malformed("[MQTT-1.5.4-1]", what+" is not valid MQTT UTF-8")
	}
	return s, nil
}

// aliasString makes a string that shares b's memory. Safe because decoded
// packets own their body and nothing writes to it afterwards.
func aliasString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

func appendUint16(dst []byte, v uint16) []byte { return append(dst, byte(v>>8), byte(v)) }

func appendUint32(dst []byte, v uint32) []byte {
	return append(dst, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

func appendString(dst []byte, s string) []byte {
	dst = appendUint16(dst, uint16(len(s)))
	return append(dst, s...)
}

func appendBinary(dst []byte, b []byte) []byte {
	dst = appendUint16(dst, uint16(len(b)))
	return append(dst, b...)
}

// checkLen reports an encode error for a string or binary field that does
// not fit its two-byte length prefix.
func checkLen(what string, n int) error {
	if n > 0xFFFF {
		return encodeErr("%s is %d bytes, more than 65535", what, n)
	}
	return nil
}

// appendFixed checks the remaining length, grows dst once for the whole
// frame and appends the fixed header.
func appendFixed(dst []byte, first byte, remaining int) ([]byte, error) {
	if remaining > MaxRemainingLength {
		return dst, encodeErr("remaining length %d exceeds %d", remaining, MaxRemainingLength)
	}
	dst = slices.Grow(dst, frameSize(remaining))
	return AppendVarInt(append(dst, first), remaining), nil
}

// checkVersion rejects versions Append cannot encode.
func checkVersion(v Version) error {
	if v != V31 && v != V311 && v != V5 {
		return encodeErr("unsupported protocol version %d", v)
	}
	return nil
}

// frameSize is the size of a whole packet with the given remaining length.
func frameSize(remaining int) int { return 1 + VarIntSize(remaining) + remaining }
