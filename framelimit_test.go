package mqttd_test

import (
	"bytes"
	"testing"
	"time"

	"mqttd"
	"mqttd/packets"
)

// publishFrame encodes a 3.1.1 QoS 1 PUBLISH with a payload of size bytes.
func publishFrame(t *testing.T, topic string, size int) []byte {
	t.Helper()
	b, err := (&packets.Publish{Topic: topic, QoS: 1, PacketID: 1, Payload: bytes.Repeat([]byte("p"), size)}).Append(nil, packets.V311)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFrameTimeout checks limits.frame_timeout: a packet that has started
// to arrive must be complete within it, even for a client that asked for
// no keepalive, while one that arrives in parts in time is handled.
func TestFrameTimeout(t *testing.T) {
	bothReaders(t, func(t *testing.T, on ...serverOption) {
		srv, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{FrameTimeout: 300 * time.Millisecond}}, on...)
		rc := connectRaw(t, addr, &packets.Connect{ClientID: "slow", CleanStart: true})
		frame := publishFrame(t, "t", 100)
		rc.write(frame[:50])
		rc.write(frame[50:])
		if ack, ok := rc.read().(*packets.Puback); !ok || ack.PacketID != 1 {
			t.Fatalf("got %+v, want the PUBACK of a packet sent in two parts", ack)
		}
		rc.write(frame[:len(frame)-10])
		rc.expectClosed()
		if got := srv.Stats().Disconnects["frame_timeout"]; got != 1 {
			t.Errorf("disconnects[frame_timeout] = %d, want 1", got)
		}
	})
}

// TestIncomingBytesLimit checks limits.max_incoming_bytes_total: packets
// over 64 KiB that have started to arrive on several connections cannot
// hold more than it together (a connection that would pass it is
// closed), small packets are not held back, and the bytes are given back
// when the connections close.
func TestIncomingBytesLimit(t *testing.T) {
	bothReaders(t, func(t *testing.T, on ...serverOption) {
		const limit, size = 200_000, 100_000
		srv, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxIncomingBytesTotal: limit}}, on...)
		frame := publishFrame(t, "big", size)
		partial := frame[:90_000]
		var conns []*rawConn
		for i := 0; srv.Stats().Disconnects["incoming_limit"] == 0; i++ {
			if i == 5 {
				t.Fatalf("%d partial packets of %d bytes held; incoming bytes %d", i, len(partial), srv.Stats().IncomingBytes)
			}
			rc := connectRaw(t, addr, &packets.Connect{ClientID: "big" + string(rune('a'+i)), CleanStart: true})
			conns = append(conns, rc)
			sent := srv.Stats().BytesReceived + uint64(len(partial))
			rc.write(partial)
			waitFor(t, "the broker to read the partial packet", func() bool {
				st := srv.Stats()
				return st.BytesReceived >= sent || st.Disconnects["incoming_limit"] > 0
			})
			if got := srv.Stats().IncomingBytes; got > limit+size {
				t.Fatalf("incoming bytes %d, want at most %d and one packet", got, limit)
			}
		}
		conns[len(conns)-1].expectClosed()

		small := connectRaw(t, addr, &packets.Connect{ClientID: "small", CleanStart: true})
		small.write(publishFrame(t, "small", 1000))
		if ack, ok := small.read().(*packets.Puback); !ok || ack.PacketID != 1 {
			t.Fatalf("got %+v, want the PUBACK of a small packet", ack)
		}
		for _, rc := range conns {
			rc.nc.Close()
		}
		waitFor(t, "the incoming bytes to be given back", func() bool { return srv.Stats().IncomingBytes == 0 })
	})
}
