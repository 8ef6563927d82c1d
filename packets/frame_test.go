package packets_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"

	"mqttd/packets"
	"mqttd/packets/packettest"
)

// checkParseFixedHeader holds ParseFixedHeader to the same answers as
// ReadPacket on the same bytes, and checks that every shorter prefix of a
// complete header reports "not yet" rather than an answer.
func checkParseFixedHeader(t *testing.T, data []byte, v packets.Version, maxSize int) {
	t.Helper()
	fh, n, err := packets.ParseFixedHeader(data, v, maxSize)
	_, readErr := packets.ReadPacket(bufio.NewReader(bytes.NewReader(data)), v, maxSize)
	switch {
	case err != nil:
		var pe, re *packets.Error
		if !errors.As(err, &pe) || !errors.As(readErr, &re) || pe.Code != re.Code {
			t.Fatalf("% X: ParseFixedHeader error %v, ReadPacket error %v", data, err, readErr)
		}
	case n == 0:
		if !errors.Is(readErr, io.EOF) && !errors.Is(readErr, io.ErrUnexpectedEOF) {
			t.Fatalf("% X: ParseFixedHeader wants more bytes, ReadPacket says %v", data, readErr)
		}
	default:
		want, rerr := packets.ReadFixedHeader(bufio.NewReader(bytes.NewReader(data)))
		if rerr != nil || want != fh {
			t.Fatalf("% X: ParseFixedHeader %+v, ReadFixedHeader %+v (%v)", data, fh, want, rerr)
		}
		for k := range n {
			if _, m, perr := packets.ParseFixedHeader(data[:k], v, maxSize); m != 0 || perr != nil {
				t.Fatalf("% X: prefix of %d bytes gave n=%d err=%v, want more bytes needed", data, k, m, perr)
			}
		}
	}
}

func TestParseFixedHeaderMatchesReadPacket(t *testing.T) {
	for _, fx := range packettest.All() {
		checkParseFixedHeader(t, fx.Raw, fx.Version, fx.MaxSize)
		if len(fx.Raw) > 0 && packets.Type(fx.Raw[0]>>4) == packets.TypeConnect {
			checkParseFixedHeader(t, fx.Raw, 0, fx.MaxSize)
		}
	}
	// The first packet on a connection must be CONNECT: a PUBLISH claiming
	// 256 MB is refused on its first byte.
	if _, _, err := packets.ParseFixedHeader([]byte{0x30}, 0, 0); err == nil {
		t.Fatal("PUBLISH accepted before CONNECT")
	}
}

func FuzzParseFixedHeader(f *testing.F) {
	for _, fx := range packettest.All() {
		f.Add(fx.Raw, versionIndex(fx.Version), uint32(fx.MaxSize))
	}
	f.Fuzz(func(t *testing.T, data []byte, vi byte, maxSize uint32) {
		checkParseFixedHeader(t, data, fuzzVersions[int(vi)%len(fuzzVersions)], int(maxSize%(1<<20)))
	})
}

// TestDecodePublishMatchesDecode checks the reusable-struct decoder gives
// exactly what Decode gives, for every PUBLISH fixture, valid or not,
// with the struct reused dirty from the previous frame.
func TestDecodePublishMatchesDecode(t *testing.T) {
	reused := packets.Publish{Topic: "stale", Payload: []byte("stale"), PacketID: 9}
	reused.Properties.User = []packets.UserProperty{{Key: "stale"}}
	for _, fx := range packettest.All() {
		fh, n, err := packets.ParseFixedHeader(fx.Raw, fx.Version, 0)
		if err != nil || n == 0 || fh.Type != packets.TypePublish || len(fx.Raw) != n+fh.Remaining {
			continue
		}
		want, wantErr := packets.Decode(fh, append([]byte(nil), fx.Raw[n:]...), fx.Version)
		gotErr := packets.DecodePublish(fh, append([]byte(nil), fx.Raw[n:]...), fx.Version, &reused)
		var we, ge *packets.Error
		switch {
		case wantErr != nil:
			if !errors.As(wantErr, &we) || !errors.As(gotErr, &ge) || we.Code != ge.Code {
				t.Errorf("%s: Decode error %v, DecodePublish error %v", fx.Name, wantErr, gotErr)
			}
		case gotErr != nil:
			t.Errorf("%s: DecodePublish error %v, Decode succeeded", fx.Name, gotErr)
		case !reflect.DeepEqual(want, &reused):
			t.Errorf("%s: DecodePublish %+v, Decode %+v", fx.Name, reused, want)
		}
	}
}
