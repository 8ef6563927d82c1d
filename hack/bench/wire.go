package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// MQTT 3.1.1 control packet types (the high nibble of the first header byte).
const (
	typeConnect    = 1
	typeConnack    = 2
	typePublish    = 3
	typePuback     = 4
	typePubrec     = 5
	typePubrel     = 6
	typePubcomp    = 7
	typeSubscribe  = 8
	typeSuback     = 9
	typePingreq    = 12
	typePingresp   = 13
	typeDisconnect = 14
)

// maxFrame bounds the frames the generator accepts; it only ever receives
// small frames, so anything larger means the stream is out of sync.
const maxFrame = 1 << 20

var errFrameTooLarge = errors.New("frame larger than 1 MiB")

func appendVarint(b []byte, n int) []byte {
	for {
		d := byte(n & 0x7f)
		n >>= 7
		if n > 0 {
			d |= 0x80
		}
		b = append(b, d)
		if n == 0 {
			return b
		}
	}
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// appendConnect appends an MQTT 3.1.1 CONNECT with a clean session and no
// will, user name or password.
//
// With persistent, the session is kept (clean session 0).
func appendConnect(b []byte, clientID string, keepalive uint16, persistent bool) []byte {
	body := 10 + 2 + len(clientID)
	b = append(b, typeConnect<<4)
	b = appendVarint(b, body)
	b = appendString(b, "MQTT")
	flags := byte(0x02)
	if persistent {
		flags = 0
	}
	b = append(b, 4, flags)
	b = binary.BigEndian.AppendUint16(b, keepalive)
	return appendString(b, clientID)
}

func appendSubscribe(b []byte, id uint16, filter string, qos byte) []byte {
	b = append(b, typeSubscribe<<4|0x02)
	b = appendVarint(b, 2+2+len(filter)+1)
	b = binary.BigEndian.AppendUint16(b, id)
	b = appendString(b, filter)
	return append(b, qos)
}

// appendAck appends one of the two-byte acknowledgements (PUBACK, PUBREC,
// PUBREL, PUBCOMP).
func appendAck(b []byte, typ byte, id uint16) []byte {
	first := typ << 4
	if typ == typePubrel {
		first |= 0x02 // [MQTT-3.6.1-1]
	}
	return append(b, first, 2, byte(id>>8), byte(id))
}

// publishTemplate is a PUBLISH frame encoded once; sending it only copies
// the bytes and patches the packet id and the first eight payload bytes.
type publishTemplate struct {
	frame      []byte
	idOff      int
	payloadOff int
}

// newPublishTemplate encodes a PUBLISH of payloadLen bytes (at least 8, for
// the stamp) to topic at qos.
func newPublishTemplate(topic string, qos byte, payloadLen int) publishTemplate {
	payloadLen = max(payloadLen, minPayload)
	body := 2 + len(topic) + payloadLen
	if qos > 0 {
		body += 2
	}
	f := append([]byte(nil), typePublish<<4|qos<<1)
	f = appendVarint(f, body)
	f = appendString(f, topic)
	t := publishTemplate{idOff: -1}
	if qos > 0 {
		t.idOff = len(f)
		f = append(f, 0, 0)
	}
	t.payloadOff = len(f)
	for i := range payloadLen {
		f = append(f, byte('a'+i%26))
	}
	t.frame = f
	return t
}

// appendFrame appends the frame with packet id (ignored at QoS 0) and
// stamp written big-endian into the first eight payload bytes.
func (t *publishTemplate) appendFrame(b []byte, id uint16, stamp int64) []byte {
	n := len(b)
	b = append(b, t.frame...)
	if t.idOff >= 0 {
		binary.BigEndian.PutUint16(b[n+t.idOff:], id)
	}
	binary.BigEndian.PutUint64(b[n+t.payloadOff:], uint64(stamp))
	return b
}

// frame is one control packet as read: the body aliases the reader's buffer
// and is valid only until the next call to next.
type frame struct {
	typ   byte
	flags byte
	body  []byte
}

// frameReader splits a byte stream into MQTT frames with one buffer and
// no allocation per frame.
type frameReader struct {
	rd    io.Reader
	buf   []byte
	r, w  int
	reads int // reads that returned bytes
}

func newFrameReader(rd io.Reader, size int) *frameReader {
	return &frameReader{rd: rd, buf: make([]byte, size)}
}

// buffered reports how many bytes are already read but not yet returned;
// zero means the next call to next may block on the socket.
func (f *frameReader) buffered() int { return f.w - f.r }

// next returns the next whole frame, reading from the stream as needed.
func (f *frameReader) next() (frame, error) {
	for {
		total, hdr, err := f.header()
		if err != nil {
			return frame{}, err
		}
		if total > 0 && f.w-f.r >= total {
			fr := frame{
				typ:   f.buf[f.r] >> 4,
				flags: f.buf[f.r] & 0x0f,
				body:  f.buf[f.r+hdr : f.r+total],
			}
			f.r += total
			return fr, nil
		}
		if err := f.fill(total); err != nil {
			return frame{}, err
		}
	}
}

// header decodes the fixed header at the read position. It returns total 0
// when more bytes are needed to know the frame's size.
func (f *frameReader) header() (total, hdr int, err error) {
	avail := f.buf[f.r:f.w]
	n, shift := 0, 0
	for i := 1; i < len(avail); i++ {
		if i > 4 {
			return 0, 0, errors.New("malformed remaining length")
		}
		n |= int(avail[i]&0x7f) << shift
		shift += 7
		if avail[i]&0x80 == 0 {
			if 1+i+n > maxFrame {
				return 0, 0, errFrameTooLarge
			}
			return 1 + i + n, 1 + i, nil
		}
	}
	return 0, 0, nil
}

// fill reads at least one more byte, first making room for a frame of
// total bytes (0 when not yet known) at the start of the buffer.
func (f *frameReader) fill(total int) error {
	if total > len(f.buf) {
		nb := make([]byte, max(total, 2*len(f.buf)))
		f.w = copy(nb, f.buf[f.r:f.w])
		f.r = 0
		f.buf = nb
	} else if f.r > 0 && (f.w == len(f.buf) || f.r+total > len(f.buf)) {
		f.w = copy(f.buf, f.buf[f.r:f.w])
		f.r = 0
	}
	n, err := f.rd.Read(f.buf[f.w:])
	f.w += n
	if n > 0 {
		f.reads++
		return nil
	}
	switch {
	case err == nil:
		err = io.ErrNoProgress
	case err == io.EOF && f.w > f.r:
		err = io.ErrUnexpectedEOF
	}
	return err
}

// packetID returns the packet id of an acknowledgement frame.
func packetID(fr frame) (uint16, error) {
	if len(fr.body) < 2 {
		return 0, fmt.Errorf("packet type %d: body of %d bytes has no packet id", fr.typ, len(fr.body))
	}
	return binary.BigEndian.Uint16(fr.body), nil
}

// publishFields holds the parts of a received PUBLISH the generator uses.
type publishFields struct {
	qos     byte
	id      uint16
	topic   []byte
	payload []byte
}

func parsePublish(fr frame) (publishFields, error) {
	p := publishFields{qos: fr.flags >> 1 & 0x03}
	b := fr.body
	if len(b) < 2 {
		return p, errors.New("PUBLISH too short for a topic")
	}
	tl := int(binary.BigEndian.Uint16(b))
	if len(b) < 2+tl {
		return p, errors.New("PUBLISH topic runs past the frame")
	}
	p.topic = b[2 : 2+tl]
	b = b[2+tl:]
	if p.qos > 0 {
		if len(b) < 2 {
			return p, errors.New("PUBLISH too short for a packet id")
		}
		p.id = binary.BigEndian.Uint16(b)
		b = b[2:]
	}
	p.payload = b
	return p, nil
}
