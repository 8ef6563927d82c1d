package mqttd_test

import (
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"mqttd"
	"mqttd/auth"
	"mqttd/packets"
)

// Bytes trickled without ever completing a CONNECT must not hold the
// connection open past the connect timeout.
func TestConnectTimeoutNotExtendedByTrickle(t *testing.T) {
	_, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{ConnectTimeout: time.Second}})
	rc := dialRaw(t, addr)
	rc.write([]byte{0x10, 0x80, 0x08}) // CONNECT of 1,024 bytes, never sent
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	giveUp := time.After(10 * time.Second)
	var one [1]byte
	for {
		select {
		case <-giveUp:
			t.Fatal("still open 10 s after a 1 s connect timeout")
		case <-tick.C:
		}
		if _, err := rc.nc.Write([]byte{0}); err != nil {
			return // reset: closed
		}
		rc.nc.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, err := rc.nc.Read(one[:]); errors.Is(err, io.EOF) {
			return
		}
	}
}

// TestMaxKeepAlive checks limits.max_keepalive at its boundaries. A 5.0
// client asking for more, or for none, is told the maximum (an hour when
// it is left at 0). A 3.1.1 client, which cannot be told, may ask for
// anything, none included, so that no device is locked out, unless
// limits.refuse_keepalive_v311 is set: then it is refused with CONNACK 2.
func TestMaxKeepAlive(t *testing.T) {
	const refused = -1
	for _, tc := range []struct {
		max, ask int
		v        packets.Version
		refuse   bool // limits.refuse_keepalive_v311
		want     int  // the Server Keep Alive, 0 for none, or refused
	}{
		{0, 0, packets.V311, false, 0},
		{0, 65535, packets.V311, false, 0},
		{0, 0, packets.V5, false, mqttd.DefaultMaxKeepAlive},
		{0, mqttd.DefaultMaxKeepAlive, packets.V5, false, 0},
		{0, mqttd.DefaultMaxKeepAlive + 1, packets.V5, false, mqttd.DefaultMaxKeepAlive},
		{60, 61, packets.V311, false, 0},
		{60, 0, packets.V311, false, 0},
		{60, 60, packets.V311, true, 0},
		{60, 61, packets.V311, true, refused},
		{60, 0, packets.V311, true, refused},
		{0, mqttd.DefaultMaxKeepAlive + 1, packets.V311, true, refused},
		{60, 60, packets.V5, false, 0},
		{60, 61, packets.V5, true, 60},
		{60, 0, packets.V5, false, 60},
	} {
		t.Run(fmt.Sprintf("max %d, refuse %v, v%d asks %d", tc.max, tc.refuse, tc.v, tc.ask), func(t *testing.T) {
			srv, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxKeepAlive: tc.max, RefuseKeepAliveV311: tc.refuse}})
			_, ack := connectReply(t, addr, tc.v, &packets.Connect{ClientID: "k", CleanStart: true, KeepAlive: uint16(tc.ask)})
			switch {
			case tc.want == refused:
				if ack.ReasonCode != packets.ConnRefusedIdentifier {
					t.Errorf("CONNACK %#x, want 2", ack.ReasonCode)
				}
				if got := srv.Stats().ConnectsRefused; got != 1 {
					t.Errorf("connects refused = %d, want 1", got)
				}
			case ack.ReasonCode != 0:
				t.Errorf("CONNACK %#x, want 0", ack.ReasonCode)
			case tc.want == 0:
				if ack.Properties.Has(packets.PropServerKeepAlive) {
					t.Errorf("Server Keep Alive %d, want none", ack.Properties.ServerKeepAlive)
				}
			case !ack.Properties.Has(packets.PropServerKeepAlive) ||
				int(ack.Properties.ServerKeepAlive) != tc.want:
				t.Errorf("CONNACK properties %+v, want Server Keep Alive %d", ack.Properties, tc.want)
			}
		})
	}
}

// TestServerKeepAliveEnforced checks that the keepalive a 5.0 client is
// told is the one the broker holds it to: asking for none under a
// maximum of 1 s, it is disconnected (0x8D) once 1.5 s pass in silence.
func TestServerKeepAliveEnforced(t *testing.T) {
	bothReaders(t, func(t *testing.T, on ...serverOption) {
		srv, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxKeepAlive: 1}}, on...)
		rc := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "quiet", CleanStart: true})
		p, err := rc.tryRead()
		if d, ok := p.(*packets.Disconnect); err != nil || !ok || d.ReasonCode != packets.KeepAliveTimeout {
			t.Fatalf("got %+v (%v), want DISCONNECT 0x8D", p, err)
		}
		rc.expectClosed()
		if got := srv.Stats().Disconnects["keepalive"]; got != 1 {
			t.Errorf("disconnects[keepalive] = %d, want 1", got)
		}
	})
}

// heldAuthn stands for an Authenticator that asks a remote service: it
// answers once release is closed.
type heldAuthn struct{ release chan struct{} }

func (a heldAuthn) Authenticate(auth.ClientInfo, []byte) error { <-a.release; return nil }

// TestConnectTimeoutDuringConnect checks, under -race, that the connect
// timeout closing (and logging) a connection whose CONNECT is still being
// handled does not race with the reader filling in the client's identity.
func TestConnectTimeoutDuringConnect(t *testing.T) {
	az := heldAuthn{release: make(chan struct{})}
	srv, addr := startServer(t, mqttd.Options{Logger: zerolog.New(io.Discard), Authenticator: az,
		Limits: mqttd.Limits{ConnectTimeout: 200 * time.Millisecond}})
	rc := dialRaw(t, addr)
	rc.send(&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V311, ClientID: "slow", CleanStart: true})
	rc.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	io.Copy(io.Discard, rc.nc) // closed by the connect timeout while the CONNECT waits
	close(az.release)          // the reader goes on and fills in the identity
	waitFor(t, "the connection finished", func() bool { return srv.Stats().Connections == 0 })
}
