package mqttd_test

import (
	"testing"

	"mqttd/auth"
	"mqttd/packets"
)

// TestEnhancedAuthSCRAM checks the CONNECT exchange of SCRAM-SHA-256: a
// right password gets CONNACK 0 with the server's final message (which
// proves the server knew the key), a wrong one 0x86, an unknown user too;
// a method not offered gets 0x8C; anything but AUTH during the exchange
// 0x82.
func TestEnhancedAuthSCRAM(t *testing.T) {
	srv, addr := scramServer(t)
	sc := &scramClient{user: "alice", password: "wonderland", nonce: "fyko+d2lbbFgONRv9qkxdawL"}
	rc, ack := scramConnect(t, addr, sc)
	if ack.ReasonCode != 0 || ack.Properties.AuthMethod != auth.SCRAMName {
		t.Fatalf("CONNACK %+v", ack)
	}
	sc.verify(t, ack.Properties.AuthData)
	subscribe(rc, packets.Subscription{Filter: "t"})
	rc.send(&packets.Publish{Topic: "t", Payload: []byte("in")})
	expectPublish(rc, "t")

	for _, bad := range []*scramClient{{user: "alice", password: "wrong", nonce: "n1"}, {user: "mallory", password: "x", nonce: "n2"}} {
		rc, ack := scramConnect(t, addr, bad)
		if ack.ReasonCode != packets.BadUsernameOrPassword {
			t.Errorf("%s/%s: CONNACK %#x, want 0x86", bad.user, bad.password, ack.ReasonCode)
		}
		rc.expectClosed()
	}

	other := &packets.Connect{ClientID: "other", CleanStart: true}
	other.Properties.AuthMethod = "KERBEROS"
	other.Properties.Set(packets.PropAuthMethod)
	if _, ack := connectReply(t, addr, packets.V5, other); ack.ReasonCode != packets.BadAuthenticationMethod {
		t.Errorf("unknown method: CONNACK %#x, want 0x8C", ack.ReasonCode)
	}

	mid := dialRaw(t, addr)
	mid.v = packets.V5
	cp := &packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V5, ClientID: "mid", CleanStart: true}
	cp.Properties.AuthMethod, cp.Properties.AuthData = auth.SCRAMName, (&scramClient{user: "bob", nonce: "n3"}).clientFirst()
	cp.Properties.Set(packets.PropAuthMethod)
	cp.Properties.Set(packets.PropAuthData)
	mid.send(cp)
	mid.read() // the challenge
	mid.send(&packets.Pingreq{})
	if ack, ok := mid.read().(*packets.Connack); !ok || ack.ReasonCode != packets.ProtocolError {
		t.Errorf("PINGREQ during the exchange: %+v, want CONNACK 0x82", ack)
	}
	if st := srv.Stats(); st.Connects != 1 {
		t.Errorf("%d connects, want only alice's", st.Connects)
	}
}

// TestEnhancedReauth checks re-authentication [MQTT-4.12.1]: AUTH 0x19
// with the same method runs the exchange again and ends with AUTH 0; a
// wrong password, or proving another user, ends the connection with
// DISCONNECT 0x87; an AUTH 0x18 with no exchange going on, or another
// method, is a protocol error.
func TestEnhancedReauth(t *testing.T) {
	_, addr := scramServer(t)
	reauth := func(rc *rawConn, sc *scramClient) packets.Packet {
		t.Helper()
		rc.send(authPacket(packets.ReAuthenticate, sc.clientFirst()))
		challenge, ok := rc.read().(*packets.Auth)
		if !ok || challenge.ReasonCode != packets.ContinueAuthentication {
			t.Fatalf("got %+v, want AUTH 0x18", challenge)
		}
		rc.send(authPacket(packets.ContinueAuthentication, sc.clientFinal(t, challenge.Properties.AuthData)))
		return rc.read()
	}
	rc, _ := scramConnect(t, addr, &scramClient{user: "alice", password: "wonderland", nonce: "a1"})
	again := &scramClient{user: "alice", password: "wonderland", nonce: "a2"}
	if done, ok := reauth(rc, again).(*packets.Auth); !ok || done.ReasonCode != packets.Success {
		t.Fatalf("re-authentication: %+v, want AUTH 0", done)
	} else {
		again.verify(t, done.Properties.AuthData)
	}
	expectNothing(rc) // still connected

	for _, sc := range []*scramClient{{user: "alice", password: "wrong", nonce: "a3"}, {user: "bob", password: "builder", nonce: "a4"}} {
		rc, _ := scramConnect(t, addr, &scramClient{user: "alice", password: "wonderland", nonce: "a5"})
		if d, ok := reauth(rc, sc).(*packets.Disconnect); !ok || d.ReasonCode != packets.NotAuthorized {
			t.Errorf("re-authentication as %s/%s: %+v, want DISCONNECT 0x87", sc.user, sc.password, d)
		}
		rc.expectClosed()
	}

	rc, _ = scramConnect(t, addr, &scramClient{user: "alice", password: "wonderland", nonce: "a6"})
	rc.send(authPacket(packets.ContinueAuthentication, []byte("x")))
	expectServerClose(rc, packets.ProtocolError)
	plain := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "plain", CleanStart: true})
	plain.send(authPacket(packets.ReAuthenticate, nil))
	expectServerClose(plain, packets.ProtocolError)
}
