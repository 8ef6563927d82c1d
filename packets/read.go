package packets

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

var typeNames = [...]string{
	"Reserved", "CONNECT", "CONNACK", "PUBLISH", "PUBACK", "PUBREC", "PUBREL", "PUBCOMP",
	"SUBSCRIBE", "SUBACK", "UNSUBSCRIBE", "UNSUBACK", "PINGREQ", "PINGRESP", "DISCONNECT", "AUTH",
}

// String returns the packet type's name as the specification spells it.
func (t Type) String() string {
	if int(t) < len(typeNames) {
		return typeNames[t]
	}
	return fmt.Sprintf("Type(%d)", byte(t))
}

// SentByClient reports whether a client may send packets of type t to a
// server. A server receiving CONNACK, SUBACK, UNSUBACK or PINGRESP must
// treat it as a protocol violation (checklist row 22, CVE-2021-28166).
func (t Type) SentByClient() bool {
	switch t {
	case TypeConnack, TypeSuback, TypeUnsuback, TypePingresp, TypeReserved:
		return false
	}
	return t <= TypeAuth
}

// bodyChunk bounds how much ReadPacket allocates ahead of the bytes that
// have actually arrived: a peer that declares a large remaining length and
// then goes silent costs at most this much (CVE-2017-7651).
const bodyChunk = 64 << 10

// ReadFixedHeader reads the first byte and the remaining length of a
// frame. A remaining length with a fifth continuation byte, or one not
// minimally encoded, is a Malformed Packet (§1.5.5, [MQTT-1.5.5-1]; the
// latter rejected in 3.1.1 too). I/O errors are returned unwrapped: io.EOF
// before the first byte, io.ErrUnexpectedEOF after it.
func ReadFixedHeader(r *bufio.Reader) (FixedHeader, error) {
	b, err := r.ReadByte()
	if err != nil {
		return FixedHeader{}, err
	}
	n, err := readRemaining(r)
	if err != nil {
		return FixedHeader{}, err
	}
	return FixedHeader{Type: Type(b >> 4), Flags: b & 0x0F, Remaining: n}, nil
}

func readRemaining(r *bufio.Reader) (int, error) {
	var buf [4]byte
	for i := range buf {
		c, err := r.ReadByte()
		if err != nil {
			return 0, noEOF(err)
		}
		buf[i] = c
		if c&0x80 == 0 {
			n, _, err := parseVarInt(buf[:i+1])
			return n, err
		}
	}
	_, _, err := parseVarInt(buf[:])
	return 0, err
}

// noEOF turns io.EOF in the middle of a frame into io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// ReadPacket reads and decodes one whole frame for protocol version v: it
// is ReadFrame followed by Decode. For CONNECT, see Decode: a partial
// *Connect may come back together with the error.
func ReadPacket(r *bufio.Reader, v Version, maxSize int) (Packet, error) {
	fh, body, err := ReadFrame(r, v, maxSize)
	if err != nil {
		return nil, err
	}
	return Decode(fh, body, v)
}

// ReadFrame reads one whole frame for protocol version v without decoding
// its body.
//
// When v is 0 the version is not known yet: only CONNECT is accepted and
// any other first byte gives a Protocol Error at once, before the
// remaining length is even read [MQTT-3.1.0-1] (CVE-2023-0809).
//
// maxSize, when positive, limits the whole packet (fixed header included,
// as the 5.0 Maximum Packet Size does); it is checked against the fixed
// header before any allocation, and a larger frame gives PacketTooLarge
// without reading its body. maxSize 0 means only the protocol limit.
//
// The body is read into a fresh slice that the caller owns, never r's
// buffer. I/O errors come back unwrapped (io.EOF only when no byte of the
// frame was read); codec errors are *Error.
func ReadFrame(r *bufio.Reader, v Version, maxSize int) (FixedHeader, []byte, error) {
	fh, err := ReadFrameHeader(r, v, maxSize)
	if err != nil {
		return FixedHeader{}, nil, err
	}
	body, err := ReadBody(r, fh.Remaining)
	if err != nil {
		return FixedHeader{}, nil, err
	}
	return fh, body, nil
}

// ReadFrameHeader is the first half of ReadFrame: it reads the fixed
// header and checks it as ReadFrame does, leaving the body, fh.Remaining
// bytes, for ReadBody. A reader uses the two halves to treat a frame whose
// body has not arrived yet differently (a deadline for the rest, say).
func ReadFrameHeader(r *bufio.Reader, v Version, maxSize int) (FixedHeader, error) {
	b, err := r.ReadByte()
	if err != nil {
		return FixedHeader{}, err
	}
	t := Type(b >> 4)
	if err := checkFirst(t, v); err != nil {
		return FixedHeader{}, err
	}
	n, err := readRemaining(r)
	if err != nil {
		return FixedHeader{}, err
	}
	if err := checkSize(t, n, maxSize); err != nil {
		return FixedHeader{}, err
	}
	return FixedHeader{Type: t, Flags: b & 0x0F, Remaining: n}, nil
}

// ReadBody reads the n bytes of a frame's body into a new slice,
// allocating in step with what arrives once past bodyChunk so a lying
// length cannot reserve memory. EOF before the last byte is
// io.ErrUnexpectedEOF.
func ReadBody(r *bufio.Reader, n int) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	body := make([]byte, min(n, bodyChunk))
	got, err := io.ReadFull(r, body)
	for err == nil && got < n {
		want := min(n, 2*len(body))
		body = append(body, make([]byte, want-len(body))...)
		var m int
		m, err = io.ReadFull(r, body[got:])
		got += m
	}
	if err != nil {
		return nil, noEOF(err)
	}
	return body, nil
}

// Decode decodes one frame whose fixed header is fh and whose remaining
// bytes are body (len(body) must equal fh.Remaining), for protocol version
// v. The packet may alias body: the caller hands over ownership and must
// not modify body afterwards.
//
// For TypeConnect v is ignored and the version comes from the packet. An
// unsupported protocol level gives an *Error with Code
// UnsupportedProtocolVersion, and a protocol name that does not match the
// level gives a ProtocolError citing [MQTT-3.1.2-1]. In those cases and
// for any error found after the protocol level, the returned *Connect is
// non-nil, with ProtocolName and ProtocolVersion set (other fields partly
// filled), so the broker can answer with a CONNACK (3.1.1 return code
// 0x01, 5.0 reason code 0x84 or the error's code) in the form the client
// expects.
//
// For any other type, v == 0 gives a Protocol Error [MQTT-3.1.0-1].
func Decode(fh FixedHeader, body []byte, v Version) (Packet, error) {
	return Limits{}.Decode(fh, body, v)
}

// Limits bound what decoding keeps of a packet. The zero value keeps
// everything.
type Limits struct {
	// MaxUserProperties, when positive, is the most User Properties kept
	// per property list: the rest are checked and skipped, so a packet
	// carrying hundreds of thousands of them (a 1 MiB packet holds
	// 200,000) costs no more than this many decoded. A caller that must
	// tell a packet over its own limit n from one at it sets n+1 here
	// and looks for more than n.
	MaxUserProperties int
}

// Decode is the package's Decode, keeping no more than l allows.
func (l Limits) Decode(fh FixedHeader, body []byte, v Version) (Packet, error) {
	if len(body) != fh.Remaining {
		return nil, malformed("§2.1.4", "body length differs from the remaining length")
	}
	if fh.Type == TypeConnect {
		c := new(Connect)
		decoded, err := l.DecodeConnect(fh, body, c)
		if !decoded {
			return nil, err
		}
		return c, err
	}
	if v == 0 {
		return nil, protocolErr("[MQTT-3.1.0-1]", "first packet is "+fh.Type.String()+", not CONNECT")
	}
	if err := checkFlags(fh, v); err != nil {
		return nil, err
	}
	d := &decoder{b: body, maxUser: l.MaxUserProperties}
	switch fh.Type {
	case TypePublish:
		return decodePublish(fh.Flags, d, v)
	case TypePuback:
		p := &Puback{}
		return result(p, decodeAck(d, v, fh.Type, &p.PacketID, &p.ReasonCode, &p.Properties))
	case TypePubrec:
		p := &Pubrec{}
		return result(p, decodeAck(d, v, fh.Type, &p.PacketID, &p.ReasonCode, &p.Properties))
	case TypePubrel:
		p := &Pubrel{}
		return result(p, decodeAck(d, v, fh.Type, &p.PacketID, &p.ReasonCode, &p.Properties))
	case TypePubcomp:
		p := &Pubcomp{}
		return result(p, decodeAck(d, v, fh.Type, &p.PacketID, &p.ReasonCode, &p.Properties))
	}
	return decodeOther(fh, d, v)
}

func decodeOther(fh FixedHeader, d *decoder, v Version) (Packet, error) {
	switch fh.Type {
	case TypeConnack:
		return decodeConnack(d, v)
	case TypeSubscribe:
		return decodeSubscribe(d, v)
	case TypeSuback:
		return decodeSuback(d, v)
	case TypeUnsubscribe:
		return decodeUnsubscribe(d, v)
	case TypeUnsuback:
		return decodeUnsuback(d, v)
	case TypePingreq:
		return result(&Pingreq{}, emptyBody(d, fh.Type))
	case TypePingresp:
		return result(&Pingresp{}, emptyBody(d, fh.Type))
	case TypeDisconnect:
		return decodeDisconnect(d, v)
	case TypeAuth:
		if v != V5 {
			return nil, malformed("§2.1.2", "AUTH is reserved before MQTT 5.0")
		}
		return decodeAuth(d)
	}
	return nil, malformed("§2.1.2", "packet type 0 is reserved")
}

// result drops the packet when decoding it failed.
func result(p Packet, err error) (Packet, error) {
	if err != nil {
		return nil, err
	}
	return p, nil
}

// checkFlags enforces the reserved fixed-header flags of every type but
// PUBLISH: 0010 for PUBREL, SUBSCRIBE and UNSUBSCRIBE, 0000 otherwise
// (3.1.1 [MQTT-2.2.2-1/2]; 5.0 [MQTT-2.1.3-1]). MQTT 3.1 has DUP set on a
// PUBREL sent again (its §2.1: DUP marks a PUBREL being re-delivered),
// so 1010 is a 3.1 PUBREL too.
func checkFlags(fh FixedHeader, v Version) error {
	want := byte(0)
	switch fh.Type {
	case TypePublish:
		return nil
	case TypePubrel, TypeSubscribe, TypeUnsubscribe:
		want = 0x02
	}
	if fh.Flags == want || v == V31 && fh.Type == TypePubrel && fh.Flags == want|0x08 {
		return nil
	}
	ref := "[MQTT-2.2.2-1] / [MQTT-2.1.3-1]"
	switch v {
	case V5:
		ref = "[MQTT-2.1.3-1]"
	case V31, V311:
		ref = "[MQTT-2.2.2-1]"
	}
	switch fh.Type {
	case TypePubrel:
		ref = "[MQTT-3.6.1-1]"
	case TypeSubscribe:
		ref = "[MQTT-3.8.1-1]"
	case TypeUnsubscribe:
		ref = "[MQTT-3.10.1-1]"
	case TypeDisconnect:
		ref = "[MQTT-3.14.1-1]"
	}
	return malformed(ref, fmt.Sprintf("%s fixed-header flags %04b, want %04b", fh.Type, fh.Flags, want))
}

// emptyBody checks a packet that has no variable header or payload.
func emptyBody(d *decoder, t Type) error {
	if d.left() != 0 {
		return malformed("§2.1.4", t.String()+" has a non-zero remaining length")
	}
	return nil
}

// noTrailing rejects bytes left over after a packet's last field.
func noTrailing(d *decoder, t Type) error {
	if d.left() != 0 {
		return malformed("§2.1.4", fmt.Sprintf("%d unexpected bytes at the end of %s", d.left(), t))
	}
	return nil
}
