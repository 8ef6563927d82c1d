package mqttd_test

import (
	"testing"

	"mqttd"
	"mqttd/packets"
)

// TestWillDelayRecover is Mosquitto's 07-will-delay-recover: a 5.0
// client with a session expiry of 30 s and a will delay of 3 s goes away
// and comes back within the delay, with Clean Start 0 or 1 and its will
// again. Either way the will left is not published [MQTT-3.1.2-8]: a new
// connection for the client id came before the delay passed. With Clean
// Start 1 the old session ends all the same (session present 0).
func TestWillDelayRecover(t *testing.T) {
	t.Parallel()
	for _, clean := range []bool{false, true} {
		name := map[bool]string{false: "clean start 0", true: "clean start 1"}[clean]
		t.Run(name, func(t *testing.T) {
			srv, addr := startServer(t, mqttd.Options{})
			watcher := watch5(t, addr)
			dropAndWait(t, srv, willClient(t, addr, "recover", 3, 30, clean))
			if n := srv.Stats().WillsDelayed; n != 1 {
				t.Fatalf("%d wills delayed, want 1", n)
			}
			cp := &packets.Connect{ClientID: "recover", CleanStart: clean, Properties: sessionExpiryProps(30)}
			setWill(cp, "will")
			cp.WillProperties.WillDelay = 3
			cp.WillProperties.Set(packets.PropWillDelay)
			back, ack := connectReply(t, addr, packets.V5, cp)
			if ack.ReasonCode != 0 || ack.SessionPresent == clean {
				t.Fatalf("CONNACK %+v, want session present %v", ack, !clean)
			}
			back.ping() // the reconnection is done with, the old will decided
			if st := srv.Stats(); st.WillsDelayed != 0 || st.WillsPublished != 0 {
				t.Errorf("%d wills delayed, %d published after the client came back; want 0, 0", st.WillsDelayed, st.WillsPublished)
			}
			expectNothing(watcher)
			back.send(&packets.Disconnect{})
			back.expectClosed()
			waitFor(t, "the connection finished", func() bool { return srv.Stats().Connections == 1 })
			if n := srv.Stats().WillsPublished; n != 0 {
				t.Errorf("%d wills published after DISCONNECT 0x00, want 0", n)
			}
		})
	}
}

// TestWillDelayTakeover checks a connection with a will delay taken over
// while still open by the same user with Clean Start 1: its will is not
// published, the client is back [MQTT-3.1.2-8]. Another user replacing
// the session (other_user_session: replace) does not stand for the client
// being back: the old session ends and its will, waiting for its delay,
// is published at once (§3.1.3.2.2).
func TestWillDelayTakeover(t *testing.T) {
	t.Parallel()
	srv, addr := startServer(t, mqttd.Options{Auth: mqttd.Auth{OtherUserSession: mqttd.OtherUserReplace}})
	watcher := watch5(t, addr)
	old := willClient(t, addr, "live", 3, 30, false)
	back := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "live", CleanStart: true})
	old.expectClosed()
	waitFor(t, "the old connection finished", func() bool { return srv.Stats().Connections == 2 })
	back.ping()
	if st := srv.Stats(); st.WillsDelayed != 0 || st.WillsPublished != 0 {
		t.Errorf("taken over: %d wills delayed, %d published; want 0, 0", st.WillsDelayed, st.WillsPublished)
	}
	expectNothing(watcher)

	cp := &packets.Connect{ClientID: "owned", UsernameFlag: true, Username: "alice", Properties: sessionExpiryProps(30)}
	setWill(cp, "will")
	cp.WillProperties.WillDelay = 3
	cp.WillProperties.Set(packets.PropWillDelay)
	dropAndWait(t, srv, connectAs(t, addr, packets.V5, cp))
	connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "owned", CleanStart: true, UsernameFlag: true, Username: "mallory"})
	if p := expectPublish(watcher, "will"); string(p.Payload) != "gone" {
		t.Errorf("will payload %q", p.Payload)
	}
	if st := srv.Stats(); st.WillsDelayed != 0 || st.WillsPublished != 1 {
		t.Errorf("replaced by another user: %d wills delayed, %d published; want 0, 1", st.WillsDelayed, st.WillsPublished)
	}
}
