package mqttd_test

import (
	"testing"

	"mqttd"
	"mqttd/auth"
	"mqttd/packets"
)

// TestPasswordFile checks logins against a password file: the right
// password is let in; a wrong one and an unknown user are refused alike
// (3.1.1 CONNACK 4, 5.0 0x86); an anonymous client is refused once there
// is a password file, even on a loopback listener (3.1.1 5, 5.0 0x87).
// Each refusal is counted.
func TestPasswordFile(t *testing.T) {
	t.Parallel()
	pw := writePasswords(t, t.TempDir(), "alice", "bob")
	srv, addr := startServer(t, mqttd.Options{Auth: mqttd.Auth{AuthConfig: mqttd.AuthConfig{PasswordFile: pw}}})
	for _, v := range versions {
		rc := connectAs(t, addr, v, as("a-"+versionName(v), "alice", "pw-alice"))
		rc.ping()
	}
	refused := 0
	for _, v := range versions {
		expectRefused(t, addr, v, as("x", "alice", "pw-bob"), refusedCode(v, true))
		expectRefused(t, addr, v, as("x", "mallory", "pw-mallory"), refusedCode(v, true))
		expectRefused(t, addr, v, as("x", "", ""), refusedCode(v, false))
		refused += 3
	}
	if n := srv.Stats().AuthFailures; n != uint64(refused) {
		t.Errorf("%d auth failures counted, want %d", n, refused)
	}
	// The failures slowed this address down; the right password still
	// gets in, and clears that.
	connectAs(t, addr, packets.V311, as("b", "bob", "pw-bob")).ping()
}

// TestAnonymousDefaults checks Mosquitto 2's default: anonymous clients
// are let in on a loopback listener only; one other machines reach
// refuses them (and, with no password file to check it, any username),
// unless allow_anonymous says true; allow_anonymous false refuses them on
// loopback too. A listener left so that it lets nobody in is an error
// unless allow_closed says it is meant (TestClosedListenerRefused).
func TestAnonymousDefaults(t *testing.T) {
	t.Parallel()
	yes, no := true, false
	_, local := startServer(t, mqttd.Options{})
	connectAs(t, local, packets.V311, as("anon", "", "")).ping()

	_, wide := startWide(t, mqttd.Options{Auth: mqttd.Auth{AuthConfig: mqttd.AuthConfig{AllowClosed: true}}})
	for _, v := range versions {
		expectRefused(t, wide, v, as("anon", "", ""), refusedCode(v, false))
		expectRefused(t, wide, v, as("named", "alice", "anything"), refusedCode(v, false))
	}

	_, open := startWide(t, mqttd.Options{Auth: mqttd.Auth{AuthConfig: mqttd.AuthConfig{AllowAnonymous: &yes}}})
	connectAs(t, open, packets.V5, as("anon", "", "")).ping()

	_, closed := startServer(t, mqttd.Options{Auth: mqttd.Auth{AuthConfig: mqttd.AuthConfig{AllowAnonymous: &no, AllowClosed: true}}})
	expectRefused(t, closed, packets.V311, as("anon", "", ""), packets.ConnRefusedNotAuthorized)

	// A password file on the wide listener lets its users in, and
	// anonymous clients still not.
	pw := writePasswords(t, t.TempDir(), "alice")
	_, users := startWide(t, mqttd.Options{Auth: mqttd.Auth{AuthConfig: mqttd.AuthConfig{PasswordFile: pw}}})
	connectAs(t, users, packets.V5, as("alice", "alice", "pw-alice")).ping()
	expectRefused(t, users, packets.V5, as("anon", "", ""), packets.NotAuthorized)
}

// TestOtherUserSession checks that a session belongs to the username that
// created it: by default a CONNECT with its client id and another username
// is refused (3.1.1 5, 5.0 0x87) and the session stays its owner's; with
// other_user_session: replace the old session ends and the newcomer starts
// a fresh one, inheriting nothing.
func TestOtherUserSession(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"", mqttd.OtherUserReplace} {
		t.Run("mode="+mode, func(t *testing.T) {
			srv, addr := startServer(t, mqttd.Options{Auth: mqttd.Auth{OtherUserSession: mode}})
			owner := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "dev", UsernameFlag: true, Username: "alice"})
			subscribe(owner, packets.Subscription{Filter: "t", Options: packets.SubOptions{QoS: 1}})
			owner.send(&packets.Disconnect{})
			owner.expectClosed()
			pub := connectAs(t, addr, packets.V311, as("pub", "", ""))
			publishQoS1(pub, 1, "t", false)

			thief := &packets.Connect{ClientID: "dev", UsernameFlag: true, Username: "mallory"}
			if mode == "" {
				for _, v := range versions {
					expectRefused(t, addr, v, thief, refusedCode(v, false))
				}
				back, ack := connectReply(t, addr, packets.V311, &packets.Connect{ClientID: "dev", UsernameFlag: true, Username: "alice"})
				if !ack.SessionPresent || ack.ReasonCode != 0 {
					t.Fatalf("owner's CONNACK %+v, want its session present", ack)
				}
				expectPublish(back, "t")
				return
			}
			rc, ack := connectReply(t, addr, packets.V5, thief)
			if ack.ReasonCode != 0 || ack.SessionPresent {
				t.Fatalf("CONNACK %+v, want a fresh session", ack)
			}
			expectNothing(rc)
			if st := srv.Stats(); st.Subscriptions != 0 {
				t.Errorf("%d subscriptions left of the replaced session", st.Subscriptions)
			}
		})
	}
}

// TestEnhancedAuthSCRAM checks the CONNECT exchange of SCRAM-SHA-256: a
// right password gets CONNACK 0 with the server's final message (which
// proves the server knew the key), a wrong one 0x86, an unknown user too;
// a method not offered gets 0x8C; anything but AUTH during the exchange
// 0x82.
func TestEnhancedAuthSCRAM(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
