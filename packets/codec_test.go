package packets_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"
	"testing/iotest"

	"mqttd/packets"
	"mqttd/packets/packettest"
)

// readOne decodes raw with ReadPacket through a reader built by wrap.
func readOne(t *testing.T, raw []byte, v packets.Version, maxSize int, wrap func(io.Reader) io.Reader) (packets.Packet, error) {
	t.Helper()
	return packets.ReadPacket(bufio.NewReaderSize(wrap(bytes.NewReader(raw)), 16), v, maxSize)
}

func same(r io.Reader) io.Reader { return r }

// checkValid asserts that f decodes to f.Packet and encodes back to f.Raw.
func checkValid(t *testing.T, f packettest.Fixture, p packets.Packet, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: decode: %v", f.Name, err)
	}
	if !reflect.DeepEqual(p, f.Packet) {
		t.Fatalf("%s: decoded\n%#v\nwant\n%#v", f.Name, p, f.Packet)
	}
	out, err := p.Append(nil, f.Version)
	if err != nil {
		t.Fatalf("%s: encode: %v", f.Name, err)
	}
	if !bytes.Equal(out, f.Raw) {
		t.Fatalf("%s: encoded\n% X\nwant\n% X", f.Name, out, f.Raw)
	}
	if n := p.Size(f.Version); n != len(f.Raw) {
		t.Fatalf("%s: Size %d, want %d", f.Name, n, len(f.Raw))
	}
}

func TestValidFixturesRoundTrip(t *testing.T) {
	for _, f := range packettest.Valid {
		t.Run(f.Name, func(t *testing.T) {
			p, err := readOne(t, f.Raw, f.Version, f.MaxSize, same)
			checkValid(t, f, p, err)
			if p.Type() != packets.Type(f.Raw[0]>>4) {
				t.Fatalf("Type() = %v, want %v", p.Type(), packets.Type(f.Raw[0]>>4))
			}
		})
	}
}

func TestValidFixturesViaDecode(t *testing.T) {
	for _, f := range packettest.Valid {
		r := bufio.NewReader(bytes.NewReader(f.Raw))
		fh, err := packets.ReadFixedHeader(r)
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		body := bytes.Clone(f.Raw[len(f.Raw)-fh.Remaining:])
		p, err := packets.Decode(fh, body, f.Version)
		checkValid(t, f, p, err)
	}
}

func TestConnectFixturesBeforeVersionKnown(t *testing.T) {
	for _, f := range packettest.Valid {
		if f.Raw[0]>>4 != byte(packets.TypeConnect) {
			continue
		}
		p, err := readOne(t, f.Raw, 0, 0, same)
		checkValid(t, f, p, err)
	}
}

// TestToleratedFixturesDecode decodes each tolerated frame through every
// entry point the broker reads with, to the fixture's packet.
func TestToleratedFixturesDecode(t *testing.T) {
	for _, f := range packettest.Tolerated {
		t.Run(f.Name, func(t *testing.T) {
			p, err := readOne(t, f.Raw, f.Version, f.MaxSize, same)
			if err != nil || !reflect.DeepEqual(p, f.Packet) {
				t.Fatalf("ReadPacket: %#v, %v; want %#v", p, err, f.Packet)
			}
			fh, n, err := packets.ParseFixedHeader(f.Raw, f.Version, 0)
			if err != nil {
				t.Fatal(err)
			}
			if p, err = packets.Decode(fh, bytes.Clone(f.Raw[n:]), f.Version); err != nil || !reflect.DeepEqual(p, f.Packet) {
				t.Fatalf("Decode: %#v, %v; want %#v", p, err, f.Packet)
			}
			if !packets.IsAck(fh.Type) {
				return
			}
			var a packets.Ack
			if err := (packets.Limits{}).DecodeAck(fh, f.Raw[n:], f.Version, &a); err != nil || !reflect.DeepEqual(a.Packet(), f.Packet) {
				t.Fatalf("DecodeAck: %#v, %v; want %#v", a.Packet(), err, f.Packet)
			}
		})
	}
}

func TestInvalidFixturesRejected(t *testing.T) {
	for _, f := range packettest.Invalid {
		t.Run(f.Name, func(t *testing.T) {
			p, err := readOne(t, f.Raw, f.Version, f.MaxSize, same)
			var e *packets.Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v, %v; want *packets.Error 0x%02X", p, err, byte(f.Err))
			}
			if e.Code != f.Err {
				t.Fatalf("code 0x%02X (%v), want 0x%02X", byte(e.Code), e, byte(f.Err))
			}
			if e.Ref == "" || e.Msg == "" {
				t.Fatalf("error lacks a reference or message: %#v", e)
			}
			if _, isConnect := p.(*packets.Connect); p != nil && !isConnect {
				t.Fatalf("rejected packet returned alongside the error: %#v", p)
			}
		})
	}
}

func TestFixtureNames(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range packettest.All() {
		if seen[f.Name] {
			t.Errorf("duplicate fixture name %q", f.Name)
		}
		seen[f.Name] = true
		if f.Desc == "" {
			t.Errorf("%s: no description", f.Name)
		}
	}
	for _, f := range packettest.Invalid {
		if len(f.Name) < 6 || f.Name[:3] != "row" || f.Packet != nil || f.Err == 0 {
			t.Errorf("%s: invalid fixtures are named rowNN-..., carry Err and no Packet", f.Name)
		}
	}
}

// chunkReader returns its data in pieces of the given sizes, then the rest.
type chunkReader struct {
	data   []byte
	chunks []int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := len(c.data)
	if len(c.chunks) > 0 {
		n, c.chunks = min(c.chunks[0], n), c.chunks[1:]
	}
	n = copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

func TestReadPacketSplitAtEveryByte(t *testing.T) {
	for _, f := range packettest.Valid {
		for k := 1; k < len(f.Raw); k++ {
			p, err := readOne(t, f.Raw, f.Version, 0, func(r io.Reader) io.Reader {
				return &chunkReader{data: f.Raw, chunks: []int{k}}
			})
			checkValid(t, f, p, err)
		}
		p, err := readOne(t, f.Raw, f.Version, 0, iotest.OneByteReader)
		checkValid(t, f, p, err)
		p, err = readOne(t, f.Raw, f.Version, 0, iotest.DataErrReader)
		checkValid(t, f, p, err)
	}
}

func TestReadPacketBackToBack(t *testing.T) {
	for _, v := range []packets.Version{packets.V31, packets.V311, packets.V5} {
		var stream []byte
		var want []packettest.Fixture
		for _, f := range packettest.Valid {
			if f.Version == v {
				stream = append(stream, f.Raw...)
				want = append(want, f)
			}
		}
		r := bufio.NewReaderSize(iotest.HalfReader(bytes.NewReader(stream)), 16)
		var got []packets.Packet
		for range want {
			p, err := packets.ReadPacket(r, v, 0)
			if err != nil {
				t.Fatalf("version %d packet %d: %v", v, len(got), err)
			}
			got = append(got, p)
		}
		if _, err := packets.ReadPacket(r, v, 0); err != io.EOF {
			t.Fatalf("after the last frame: %v, want io.EOF", err)
		}
		// Compared only now: earlier packets must not alias the reused bufio buffer.
		for i, f := range want {
			checkValid(t, f, got[i], nil)
		}
	}
}

func TestReadPacketTruncated(t *testing.T) {
	for _, f := range packettest.Valid {
		for k := 1; k < len(f.Raw); k++ {
			_, err := readOne(t, f.Raw[:k], f.Version, 0, same)
			if err != io.ErrUnexpectedEOF {
				t.Fatalf("%s cut at %d: %v, want io.ErrUnexpectedEOF", f.Name, k, err)
			}
		}
	}
	if _, err := readOne(t, nil, packets.V311, 0, same); err != io.EOF {
		t.Fatalf("empty stream: %v, want io.EOF", err)
	}
}

func TestReadPacketPassesIOErrors(t *testing.T) {
	boom := errors.New("boom")
	r := bufio.NewReader(io.MultiReader(bytes.NewReader([]byte{0x30, 0x05, 0x00}), iotest.ErrReader(boom)))
	if _, err := packets.ReadPacket(r, packets.V311, 0); err != boom {
		t.Fatalf("got %v, want the reader's own error", err)
	}
}
