package mqttd_test

import (
	"bufio"
	"fmt"
	"net"
	"testing"

	"mqttd"
	"mqttd/packets"

	"github.com/prometheus/client_golang/prometheus"
)

// oneByte reads its connection a byte at a time, as Paho's Python test
// client does, so what it has not read yet stays in the socket.
type oneByte struct{ net.Conn }

func (o oneByte) Read(b []byte) (int, error) { return o.Conn.Read(b[:min(len(b), 1)]) }

// TestReceiveMaximumDisconnectRead is Paho's test_flow_control2: a 5.0
// client sends one QoS 2 PUBLISH more than the Receive Maximum and goes on
// answering each PUBREC with PUBREL as it reads them. The broker's
// DISCONNECT 0x93 must reach it: the broker reads what the client still
// sends instead of closing on it, which would reset the connection and
// lose the DISCONNECT with the unread PUBRECs.
func TestReceiveMaximumDisconnectRead(t *testing.T) {
	bothReaders(t, func(t *testing.T, on ...serverOption) {
		_, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxAwaitingRel: 2}}, on...)
		rc := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "flow", CleanStart: true})
		rc.br = bufio.NewReaderSize(oneByte{rc.nc}, 16)
		var frames []byte
		for id := uint16(1); id <= 3; id++ {
			frames = append(frames, encode(t, &packets.Publish{QoS: 2, PacketID: id, Topic: "t"}, packets.V5)...)
		}
		rc.write(frames)
		for {
			p, err := rc.tryRead()
			if err != nil {
				t.Fatalf("the connection ended before the DISCONNECT was read: %v", err)
			}
			switch p := p.(type) {
			case *packets.Pubrec:
				if _, err := rc.nc.Write(encode(t, &packets.Pubrel{PacketID: p.PacketID}, packets.V5)); err != nil {
					t.Fatalf("PUBREL %d: %v", p.PacketID, err)
				}
			case *packets.Disconnect:
				if p.ReasonCode != packets.ReceiveMaximumExceeded {
					t.Fatalf("DISCONNECT %#x, want 0x93", byte(p.ReasonCode))
				}
				return
			default:
				t.Fatalf("got %T %+v", p, p)
			}
		}
	})
}

// TestLingerBounded checks that a client which neither closes nor stops
// sending after the server's DISCONNECT is closed all the same: the
// broker reads what it sends for a bounded time and number of bytes.
func TestLingerBounded(t *testing.T) {
	srv, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxAwaitingRel: 1}})
	for _, flood := range []bool{false, true} {
		rc := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "flow", CleanStart: true})
		var frames []byte
		for id := uint16(1); id <= 2; id++ {
			frames = append(frames, encode(t, &packets.Publish{QoS: 2, PacketID: id, Topic: "t"}, packets.V5)...)
		}
		rc.write(frames)
		if p, ok := rc.read().(*packets.Pubrec); !ok {
			t.Fatalf("got %T %+v, want PUBREC", p, p)
		}
		if d, ok := rc.read().(*packets.Disconnect); !ok || d.ReasonCode != packets.ReceiveMaximumExceeded {
			t.Fatalf("got %+v, want DISCONNECT 0x93", d)
		}
		if flood {
			junk := encode(t, &packets.Pubrel{PacketID: 1}, packets.V5)
			go func() {
				for range 1 << 20 { // until the broker closes
					if _, err := rc.nc.Write(junk); err != nil {
						return
					}
				}
			}()
		}
		waitFor(t, "the broker to close the connection", func() bool { return srv.Stats().Connections == 0 })
	}
}

// TestLingeringBounded checks that at most 64 connections linger at once:
// each holds a goroutine and a thread, so clients that all break the
// protocol and keep their sockets open make the broker close the ones
// past the bound at once, counted, their DISCONNECT written all the same.
func TestLingeringBounded(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	srv, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxAwaitingRel: 1}, Registerer: reg})
	const n = 100
	frames := encode(t, &packets.Publish{QoS: 2, PacketID: 1, Topic: "t"}, packets.V5)
	frames = append(frames, encode(t, &packets.Publish{QoS: 2, PacketID: 2, Topic: "t"}, packets.V5)...)
	conns := make([]*rawConn, n)
	for i := range conns {
		conns[i] = connectAs(t, addr, packets.V5, &packets.Connect{ClientID: fmt.Sprint("flow", i), CleanStart: true})
	}
	// Written together, so that all of them linger within one second:
	// none of the clients closes.
	for _, rc := range conns {
		rc.write(frames)
	}
	for _, rc := range conns {
		rc.read() // the PUBREC
		if d, ok := rc.read().(*packets.Disconnect); !ok || d.ReasonCode != packets.ReceiveMaximumExceeded {
			t.Fatalf("got %+v, want DISCONNECT 0x93", d)
		}
	}
	waitFor(t, "the broker to close every connection", func() bool { return srv.Stats().Connections == 0 })
	if skipped := metricValue(t, reg, "mqttd_linger_skipped_total"); skipped < 1 || skipped > n-64 {
		t.Fatalf("mqttd_linger_skipped_total %v, want 1 to %d", skipped, n-64)
	}
}
