package mqttd_test

import (
	"testing"
	"time"

	"mqttd"
	"mqttd/packets"
)

// TestSessionExpiry checks that offline sessions are dropped, with their
// subscriptions and queue, once their expiry interval has passed: a 5.0
// Session Expiry Interval, the one a 5.0 DISCONNECT changes it to, the
// 3.1.1 persistent session expiry; and not when the client came back in
// time, nor early. A session that expires serves as the clock for the
// others, so the test waits on events, not on time.
func TestSessionExpiry(t *testing.T) {
	srv, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{
		MaxSessionExpiry: time.Hour, PersistentSessionExpiry: 2 * time.Second}})
	expired := func() uint64 { return srv.Stats().SessionsExpired }

	// 1 s, and a session of 2 s that the client comes back to in time.
	short, _ := reconnect5(t, addr, "short", 1)
	subscribe(short, packets.Subscription{Filter: "s", Options: packets.SubOptions{QoS: 1}})
	short.send(&packets.Disconnect{})
	back, _ := reconnect5(t, addr, "back", 2)
	back.send(&packets.Disconnect{})
	back.expectClosed()
	back, present := reconnect5(t, addr, "back", 2)
	if !present {
		t.Fatal("a 2 s session was gone at once")
	}
	waitFor(t, "the 1 s session to expire", func() bool { return expired() == 1 })
	if st := srv.Stats(); st.Sessions != 1 || st.Subscriptions != 0 {
		t.Errorf("after the expiry: %d sessions, %d subscriptions; want 1, 0", st.Sessions, st.Subscriptions)
	}
	if _, present := reconnect5(t, addr, "short", 0); present {
		t.Error("the expired session was present")
	}

	// A DISCONNECT that shortens the interval, one that ends the session,
	// and a 3.1.1 persistent session (2 s here); the session kept online
	// above has not expired meanwhile.
	shortened, _ := reconnect5(t, addr, "shortened", 3600)
	d := &packets.Disconnect{}
	d.Properties.SessionExpiry = 1
	d.Properties.Set(packets.PropSessionExpiry)
	shortened.send(d)
	ended, _ := reconnect5(t, addr, "ended", 3600)
	d = &packets.Disconnect{}
	d.Properties.Set(packets.PropSessionExpiry) // 0
	ended.send(d)
	ended.expectClosed()
	v3 := connectRawSession(t, addr, "v3", false, false)
	v3.send(&packets.Disconnect{})
	v3.expectClosed()
	waitFor(t, "the shortened and the 3.1.1 sessions to expire", func() bool { return expired() == 3 })
	if _, present := reconnect5(t, addr, "ended", 0); present {
		t.Error("a session ended by DISCONNECT with expiry 0 was present")
	}
	if _, present := reconnect5(t, addr, "back", 2); !present {
		t.Error("the session online all along expired")
	}
	back.nc.Close()
}

// TestSessionExpiryCapped checks a 5.0 client asking for more than
// limits.max_session_expiry is told the cap in CONNACK and held to it.
func TestSessionExpiryCapped(t *testing.T) {
	srv, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxSessionExpiry: time.Second}})
	rc, ack := connectReply(t, addr, packets.V5, expiringConnect("greedy", 0xFFFFFFFF))
	if !ack.Properties.Has(packets.PropSessionExpiry) || ack.Properties.SessionExpiry != 1 {
		t.Errorf("CONNACK Session Expiry Interval %d (present %v), want 1", ack.Properties.SessionExpiry,
			ack.Properties.Has(packets.PropSessionExpiry))
	}
	rc.send(&packets.Disconnect{})
	waitFor(t, "the capped session to expire", func() bool { return srv.Stats().SessionsExpired == 1 })
}
