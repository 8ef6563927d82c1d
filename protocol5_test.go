package mqttd_test

import (
	"testing"

	"mqttd"
	"mqttd/packets"
)

// TestRequestProblemInformation checks Request Problem Information: an
// acknowledgement refusing a PUBLISH says why in a Reason String unless
// the client asked for none (0) [MQTT-3.1.2-29] or the string would take
// the packet past its Maximum Packet Size; a DISCONNECT says why either
// way (§3.1.2.11.7).
func TestRequestProblemInformation(t *testing.T) {
	_, addr := startServer(t, mqttd.Options{})
	connect := func(id string, problemInfo byte, set bool, maxPacket uint32) *rawConn {
		cp := &packets.Connect{ClientID: id, CleanStart: true}
		if set {
			cp.Properties.RequestProblemInfo = problemInfo
			cp.Properties.Set(packets.PropRequestProblemInfo)
		}
		if maxPacket > 0 {
			cp.Properties.MaximumPacketSize = maxPacket
			cp.Properties.Set(packets.PropMaximumPacketSize)
		}
		return connectAs(t, addr, packets.V5, cp)
	}
	refused := func(rc *rawConn) *packets.Puback {
		t.Helper()
		rc.send(&packets.Publish{Topic: "$SYS/x", QoS: 1, PacketID: 1, Payload: []byte("x")})
		ack, ok := rc.read().(*packets.Puback)
		if !ok || ack.ReasonCode != packets.NotAuthorized {
			t.Fatalf("got %+v, want PUBACK 0x87", ack)
		}
		return ack
	}
	if ack := refused(connect("default", 0, false, 0)); ack.Properties.ReasonString == "" {
		t.Error("no Reason String on a refusal, the default being to send them")
	}
	if ack := refused(connect("asked", 1, true, 0)); ack.Properties.ReasonString == "" {
		t.Error("no Reason String on a refusal for a client that asked for them")
	}
	if ack := refused(connect("small", 1, true, 10)); ack.Properties.Has(packets.PropReasonString) {
		t.Errorf("Reason String %q past the client's Maximum Packet Size of 10", ack.Properties.ReasonString)
	}
	quiet := connect("quiet", 0, true, 0)
	if ack := refused(quiet); ack.Properties.Has(packets.PropReasonString) {
		t.Errorf("Reason String %q for a client that asked for no problem information", ack.Properties.ReasonString)
	}
	sub := &packets.Publish{Topic: "t", Payload: []byte("x")}
	sub.Properties.SubscriptionIDs = []uint32{1}
	sub.Properties.Set(packets.PropSubscriptionID)
	quiet.send(sub)
	if d, ok := quiet.read().(*packets.Disconnect); !ok || d.ReasonCode != packets.ProtocolError || d.Properties.ReasonString == "" {
		t.Errorf("got %+v, want DISCONNECT 0x82 saying why", d)
	}
}

// TestResponseInformation checks Request Response Information: a client
// asking for it is given the configured prefix with its client id in
// CONNACK; one not asking, or a broker configured with "-", gives none.
func TestResponseInformation(t *testing.T) {
	for _, tc := range []struct {
		configured string
		ask        bool
		want       string
	}{
		{"", true, "responses/ri/"},
		{"", false, ""},
		{"reply/to/", true, "reply/to/ri/"},
		{"-", true, ""},
	} {
		_, addr := startServer(t, mqttd.Options{Protocol: mqttd.Protocol{ResponseInformation: tc.configured}})
		cp := &packets.Connect{ClientID: "ri", CleanStart: true}
		if tc.ask {
			cp.Properties.RequestResponseInfo = 1
			cp.Properties.Set(packets.PropRequestResponseInfo)
		}
		_, ack := connectReply(t, addr, packets.V5, cp)
		if got := ack.Properties.ResponseInfo; got != tc.want || ack.Properties.Has(packets.PropResponseInfo) != (tc.want != "") {
			t.Errorf("configured %q, asked %v: Response Information %q, want %q", tc.configured, tc.ask, got, tc.want)
		}
	}
}

// TestServerRedirect checks a configured Server Reference: every client is
// refused at CONNECT, a 5.0 one with 0x9C (or 0x9D for a permanent move)
// and the reference, a 3.1.1 one with CONNACK 3.
func TestServerRedirect(t *testing.T) {
	for _, moved := range []bool{false, true} {
		srv, addr := startServer(t, mqttd.Options{Protocol: mqttd.Protocol{ServerReference: "127.0.0.1:1884", ServerMoved: moved}})
		rc, ack := connectReply(t, addr, packets.V5, &packets.Connect{ClientID: "r", CleanStart: true})
		want := packets.UseAnotherServer
		if moved {
			want = packets.ServerMoved
		}
		if ack.ReasonCode != want || ack.Properties.ServerReference != "127.0.0.1:1884" {
			t.Errorf("moved %v: CONNACK %+v, want %#x with the Server Reference", moved, ack, want)
		}
		rc.expectClosed()
		old, ack := connectReply(t, addr, packets.V311, &packets.Connect{ClientID: "r", CleanStart: true})
		if ack.ReasonCode != packets.ConnRefusedServerUnavailable {
			t.Errorf("3.1.1: CONNACK %#x, want 3", ack.ReasonCode)
		}
		old.expectClosed()
		if st := srv.Stats(); st.Sessions != 0 || st.ConnectsRefused != 2 {
			t.Errorf("%d sessions, %d refused; want 0, 2", st.Sessions, st.ConnectsRefused)
		}
	}
}
