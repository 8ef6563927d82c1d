package main

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// stream is a hand-encoded sequence of broker-to-client frames.
var stream = [][]byte{
	{0x20, 0x02, 0x00, 0x00},                       // CONNACK, accepted
	{0x90, 0x03, 0x00, 0x01, 0x01},                 // SUBACK id 1, granted QoS 1
	{0x30, 0x05, 0x00, 0x01, 'a', 'h', 'i'},        // PUBLISH QoS 0 topic "a" payload "hi"
	{0x32, 0x06, 0x00, 0x01, 'b', 0x12, 0x34, 'x'}, // PUBLISH QoS 1 id 0x1234
	{0x62, 0x02, 0xff, 0xfe},                       // PUBREL id 0xfffe
	{0xd0, 0x00},                                   // PINGRESP
}

func joined() []byte { return bytes.Join(stream, nil) }

// readAll reads every frame of src and returns copies of their bodies with
// their first header bytes.
func readAll(t *testing.T, src io.Reader, bufSize int) (firsts []byte, bodies [][]byte) {
	t.Helper()
	fr := newFrameReader(src, bufSize)
	for {
		f, err := fr.next()
		if err == io.EOF {
			return firsts, bodies
		}
		if err != nil {
			t.Fatalf("frame %d: %v", len(firsts), err)
		}
		firsts = append(firsts, f.typ<<4|f.flags)
		bodies = append(bodies, bytes.Clone(f.body))
	}
}

func TestFrameReaderSplitReads(t *testing.T) {
	for _, tc := range []struct {
		name    string
		src     io.Reader
		bufSize int
	}{
		{"whole", bytes.NewReader(joined()), 4096},
		{"one byte per read", iotest.OneByteReader(bytes.NewReader(joined())), 4096},
		{"half reads, tiny buffer", iotest.HalfReader(bytes.NewReader(joined())), 5},
		{"one byte per read, tiny buffer", iotest.OneByteReader(bytes.NewReader(joined())), 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			firsts, bodies := readAll(t, tc.src, tc.bufSize)
			if len(firsts) != len(stream) {
				t.Fatalf("read %d frames, want %d", len(firsts), len(stream))
			}
			for i, want := range stream {
				if firsts[i] != want[0] || !bytes.Equal(bodies[i], want[2:]) {
					t.Errorf("frame %d = %#x % x, want %#x % x", i, firsts[i], bodies[i], want[0], want[2:])
				}
			}
		})
	}
}

func TestFrameReaderMultiByteLengthGrowsBuffer(t *testing.T) {
	payload := strings.Repeat("z", 300)
	tpl := newPublishTemplate("big/topic", 2, len(payload))
	f := tpl.appendFrame(nil, 0xbeef, 42)
	if f[1]&0x80 == 0 {
		t.Fatalf("remaining length %#x should take two bytes", f[1])
	}
	fr := newFrameReader(iotest.OneByteReader(bytes.NewReader(f)), 16)
	got, err := fr.next()
	if err != nil {
		t.Fatal(err)
	}
	p, err := parsePublish(got)
	if err != nil {
		t.Fatal(err)
	}
	if p.qos != 2 || p.id != 0xbeef || string(p.topic) != "big/topic" || len(p.payload) != 300 {
		t.Fatalf("parsed qos=%d id=%#x topic=%q payload=%d bytes", p.qos, p.id, p.topic, len(p.payload))
	}
	if p.payload[7] != 42 {
		t.Errorf("stamp byte = %d, want 42", p.payload[7])
	}
}

func TestFrameReaderErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{"truncated body", []byte{0x40, 0x02, 0x00}, io.ErrUnexpectedEOF},
		{"truncated length", []byte{0x30, 0x80}, io.ErrUnexpectedEOF},
		{"too large", []byte{0x30, 0xff, 0xff, 0xff, 0x7f}, errFrameTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := newFrameReader(bytes.NewReader(tc.in), 64).next()
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	_, err := newFrameReader(bytes.NewReader([]byte{0x30, 0x80, 0x80, 0x80, 0x80, 0x01}), 64).next()
	if err == nil || !strings.Contains(err.Error(), "malformed") {
		t.Fatalf("five-byte remaining length: err = %v, want malformed", err)
	}
}

func TestEncoders(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  []byte
		want []byte
	}{
		{"CONNECT", appendConnect(nil, "c1", 30, false), []byte{
			0x10, 14, 0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 30, 0, 2, 'c', '1'}},
		{"SUBSCRIBE", appendSubscribe(nil, 1, "a/#", 2), []byte{
			0x82, 8, 0, 1, 0, 3, 'a', '/', '#', 2}},
		{"PUBREL", appendAck(nil, typePubrel, 0x0102), []byte{0x62, 2, 1, 2}},
		{"PUBACK", appendAck(nil, typePuback, 7), []byte{0x40, 2, 0, 7}},
		{"PUBLISH QoS 1", func() []byte {
			tpl := newPublishTemplate("t", 1, 8)
			return tpl.appendFrame([]byte{0xaa}, 9, 0x0102030405060708)
		}(), []byte{0xaa, 0x32, 13, 0, 1, 't', 0, 9, 1, 2, 3, 4, 5, 6, 7, 8}},
	} {
		if !bytes.Equal(tc.got, tc.want) {
			t.Errorf("%s = % x, want % x", tc.name, tc.got, tc.want)
		}
	}
}

func TestParseShortFrames(t *testing.T) {
	for _, fr := range []frame{
		{typ: typePublish, body: []byte{0}},
		{typ: typePublish, body: []byte{0, 5, 'a'}},
		{typ: typePublish, flags: 0x02, body: []byte{0, 1, 'a', 0}},
	} {
		if _, err := parsePublish(fr); err == nil {
			t.Errorf("parsePublish(flags %#x, % x) accepted a short frame", fr.flags, fr.body)
		}
	}
	if _, err := packetID(frame{typ: typePuback, body: []byte{1}}); err == nil {
		t.Error("packetID accepted a one-byte body")
	}
}

func TestPercentile(t *testing.T) {
	d := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 5}, {0.99, 10}, {0.1, 1}, {1, 10}} {
		if got := percentile(d, tc.q); got != tc.want {
			t.Errorf("percentile(%v) = %d, want %d", tc.q, got, tc.want)
		}
	}
}

// chunkReader returns at most n bytes per Read, to vary how frames split.
type chunkReader struct {
	b []byte
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), c.n)], c.b)
	c.b = c.b[k:]
	return k, nil
}

// FuzzFrameReader checks every frame against a direct decoding of the
// input at the same offset, whatever the read sizes.
func FuzzFrameReader(f *testing.F) {
	f.Add(joined(), uint8(1))
	f.Add(joined(), uint8(7))
	f.Add([]byte{0x30, 0x80, 0x01}, uint8(2))
	f.Fuzz(func(t *testing.T, in []byte, chunk uint8) {
		fr := newFrameReader(&chunkReader{b: in, n: int(chunk%16) + 1}, 8)
		off := 0
		for {
			got, err := fr.next()
			if err != nil {
				return
			}
			n, shift, i := 0, 0, off+1
			for ; in[i]&0x80 != 0; i++ {
				n |= int(in[i]&0x7f) << shift
				shift += 7
			}
			n |= int(in[i]) << shift
			body := in[i+1 : i+1+n]
			if got.typ<<4|got.flags != in[off] || !bytes.Equal(got.body, body) {
				t.Fatalf("frame at %d = %#x % x, want %#x % x", off, got.typ<<4|got.flags, got.body, in[off], body)
			}
			off = i + 1 + n
		}
	})
}
