package mqttd_test

import (
	"net"
	"testing"

	"mqttd"
	"mqttd/packets"
)

// TestPacketsTogetherAnswered checks that packets arriving in one write
// are all answered before the connection closes, for each way the client
// ends it: CONNECT, SUBSCRIBE and DISCONNECT together; CONNECT and
// SUBSCRIBE then the client's side closed; and, 5.0, a protocol error
// after them (the answers come before the DISCONNECT 0x82).
func TestPacketsTogetherAnswered(t *testing.T) {
	bothReaders(t, func(t *testing.T, on ...serverOption) {
		for _, tc := range []struct {
			name string
			v    packets.Version
			last func(rc *rawConn) []byte
		}{
			{"disconnect", packets.V311, func(*rawConn) []byte { return []byte{0xE0, 0} }},
			{"half-close", packets.V311, func(rc *rawConn) []byte { return nil }},
			{"protocol-error", packets.V5, func(*rawConn) []byte { return []byte{0x20, 2, 0, 0} }}, // a CONNACK from the client
		} {
			t.Run(tc.name, func(t *testing.T) {
				srv, addr := startServer(t, mqttd.Options{}, on...)
				rc := dialRaw(t, addr)
				rc.v = tc.v
				out, _ := (&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: tc.v, ClientID: "together", CleanStart: true}).Append(nil, tc.v)
				out, _ = (&packets.Subscribe{PacketID: 7, Subscriptions: []packets.Subscription{{Filter: "t"}}}).Append(out, tc.v)
				rc.write(append(out, tc.last(rc)...))
				if tc.name == "half-close" {
					if err := rc.nc.(*net.TCPConn).CloseWrite(); err != nil {
						t.Fatal(err)
					}
				}
				if ack, ok := rc.read().(*packets.Connack); !ok || ack.ReasonCode != 0 {
					t.Fatalf("got %+v, want CONNACK", ack)
				}
				if ack, ok := rc.read().(*packets.Suback); !ok || ack.PacketID != 7 {
					t.Fatalf("got %+v, want SUBACK 7", ack)
				}
				rc.expectClosed()
				if n := srv.Stats().Connects; n != 1 {
					t.Errorf("%d connects, want 1", n)
				}
			})
		}
	})
}
