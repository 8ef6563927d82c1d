package mqttd_test

import (
	"io"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"mqttd"
	"mqttd/auth"
	"mqttd/packets"
)

// Regression tests for defects a review of the engine restructuring found.

// TestRefusedQoS2IDIsNew checks [MQTT-4.3.3-9]: after a PUBREC of 0x80 or
// above the client's next PUBLISH with that packet id is a new message,
// routed, not taken for a resend of the refused one.
func TestRefusedQoS2IDIsNew(t *testing.T) {
	_, addr := startServer(t, mqttd.Options{})
	sub := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "sub", CleanStart: true})
	subscribe(sub, packets.Subscription{Filter: "a"})
	pub := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "pub", CleanStart: true})
	pub.send(&packets.Publish{Topic: "$SYS/x", QoS: 2, PacketID: 7, Payload: []byte("refused")})
	if rec, ok := pub.read().(*packets.Pubrec); !ok || rec.ReasonCode < 0x80 {
		t.Fatalf("got %+v, want a refusing PUBREC", rec)
	}
	pub.send(&packets.Publish{Topic: "a", QoS: 2, PacketID: 7, Payload: []byte("new message")})
	if rec, ok := pub.read().(*packets.Pubrec); !ok || rec.ReasonCode != 0 {
		t.Fatalf("got %+v, want PUBREC 0", rec)
	}
	pub.send(&packets.Pubrel{PacketID: 7})
	pub.read() // PUBCOMP
	expectPublish(sub, "a")
}

// TestStaleDisconnectKeepsNewOwnersSession checks that a DISCONNECT with
// Session Expiry 0 that a taken-over connection's reader was still
// handling does not end the session the new connection took over.
func TestStaleDisconnectKeepsNewOwnersSession(t *testing.T) {
	az := newBlockingAuthz("hold")
	_, addr := startServer(t, mqttd.Options{Authorizer: az})
	old, _ := reconnect5(t, addr, "same", 100)
	pub, _ := (&packets.Publish{Topic: "hold", Payload: []byte("x")}).Append(nil, packets.V5)
	d := &packets.Disconnect{}
	d.Properties.Set(packets.PropSessionExpiry) // 0: end the session
	disc, _ := d.Append(nil, packets.V5)
	old.write(append(pub, disc...)) // both in the old reader's hands
	<-az.entered
	newer, present := reconnect5(t, addr, "same", 100)
	if !present {
		t.Fatal("the takeover lost the session")
	}
	close(az.release)
	old.expectClosed()
	newer.send(&packets.Disconnect{})
	newer.expectClosed()
	if _, present := reconnect5(t, addr, "same", 100); !present {
		t.Error("the taken-over connection's DISCONNECT ended the new owner's session")
	}
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

// TestHugeMaximumPacketSize checks a 5.0 client announcing the largest
// Maximum Packet Size gets its messages: on 32-bit builds (the Raspberry
// Pi's arm v6/v7) the size once turned negative and every message was
// dropped as too large.
func TestHugeMaximumPacketSize(t *testing.T) {
	_, addr := startServer(t, mqttd.Options{})
	cp := &packets.Connect{ClientID: "big", CleanStart: true}
	cp.Properties.MaximumPacketSize = 0xFFFFFFFF
	cp.Properties.Set(packets.PropMaximumPacketSize)
	sub := connectAs(t, addr, packets.V5, cp)
	subscribe(sub, packets.Subscription{Filter: "t", Options: packets.SubOptions{QoS: 1}})
	pub := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "pub", CleanStart: true})
	pub.send(&packets.Publish{Topic: "t", Payload: []byte("qos0")})
	pub.send(&packets.Publish{Topic: "t", QoS: 1, PacketID: 1, Payload: []byte("qos1")})
	pub.read()
	if got := sub.ping(); len(got) != 2 {
		t.Errorf("got %d of 2 messages", len(got))
	}
}

// TestReaderDisconnectBehindWriter checks the DISCONNECT a reader sends
// for a protocol error is written, after what a delivery writer was still
// writing, before the connection is closed: closing at once discarded
// both and cut a PUBLISH in half.
func TestReaderDisconnectBehindWriter(t *testing.T) {
	srv, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxOutboxBytes: 64 << 10}})
	sub := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "slow", CleanStart: true})
	subscribe(sub, packets.Subscription{Filter: "t"})
	payload := make([]byte, 32<<10)
	for range 300 { // fills the socket buffers: the writer blocks in Write
		srv.Publish("t", payload, 0, false, nil)
	}
	sub.send(&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V5, ClientID: "slow"}) // a protocol error
	var last packets.Packet
	for {
		p, err := sub.tryRead()
		if err != nil {
			break
		}
		last = p
	}
	if d, ok := last.(*packets.Disconnect); !ok || d.ReasonCode != packets.ProtocolError {
		t.Fatalf("last packet before the close: %T %+v, want DISCONNECT 0x82", last, last)
	}
}
