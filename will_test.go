package mqttd_test

import (
	"bytes"
	"testing"

	"mqttd"
	"mqttd/packets"
)

func TestWillOnAbnormalCloseNotOnDisconnect(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, mqttd.Options{})
	var wills collector
	watcher := pahoConnect(t, addr, "watcher", nil)
	wait(t, watcher.Subscribe("wills/#", 1, wills.handler))

	withWill := func(id string) *rawConn {
		return connectRaw(t, addr, &packets.Connect{ClientID: id, CleanStart: true, WillFlag: true,
			WillTopic: "wills/" + id, WillPayload: []byte(id + " gone"), WillQoS: 1})
	}
	polite := withWill("polite")
	polite.send(&packets.Disconnect{})
	polite.expectClosed()
	rude := withWill("rude")
	rude.nc.Close()

	waitFor(t, "the will of the abruptly closed client", func() bool { return wills.len() >= 1 })
	// A marker published after both closes proves the polite will never came.
	wait(t, watcher.Publish("wills/marker", 1, false, "marker"))
	waitFor(t, "the marker", func() bool { return wills.len() >= 2 })
	for i := range wills.len() {
		if m := wills.get(i); m.Topic() == "wills/polite" {
			t.Errorf("will published after a clean DISCONNECT")
		}
	}
	if m := wills.get(0); m.Topic() != "wills/rude" || string(m.Payload()) != "rude gone" {
		t.Errorf("will %s=%q, want wills/rude=%q", m.Topic(), m.Payload(), "rude gone")
	}
}

// watch5 connects a 5.0 subscriber to "will": its decoder refuses a
// PUBLISH carrying a property PUBLISH may not have, as client libraries do.
func watch5(t *testing.T, addr string) *rawConn {
	t.Helper()
	rc := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "watch5", CleanStart: true})
	subscribe(rc, packets.Subscription{Filter: "will"})
	return rc
}

// TestWillProperties checks that a 5.0 will is published with the
// properties a PUBLISH may carry (content type, response topic,
// correlation data, payload format, user properties, message expiry) and
// without its Will Delay Interval, which is not one of them: a subscriber
// receiving it would drop the connection.
func TestWillProperties(t *testing.T) {
	srv, addr := startServer(t, mqttd.Options{})
	watcher := watch5(t, addr)
	cp := &packets.Connect{ClientID: "w", CleanStart: true}
	setWill(cp, "will")
	wp := &cp.WillProperties
	wp.WillDelay, wp.ContentType, wp.ResponseTopic, wp.CorrelationData = 0, "text/plain", "reply", []byte{1, 2}
	wp.PayloadFormat, wp.MessageExpiry = 1, 100
	wp.User = []packets.UserProperty{{Key: "k", Value: "v"}}
	for _, id := range []packets.PropID{packets.PropWillDelay, packets.PropContentType, packets.PropResponseTopic,
		packets.PropCorrelationData, packets.PropPayloadFormat, packets.PropMessageExpiry, packets.PropUserProperty} {
		wp.Set(id)
	}
	dropAndWait(t, srv, connectAs(t, addr, packets.V5, cp))
	p := expectPublish(watcher, "will")
	got := p.Properties
	if got.Has(packets.PropWillDelay) {
		t.Error("the will was published with its Will Delay Interval")
	}
	if got.ContentType != "text/plain" || got.ResponseTopic != "reply" || !bytes.Equal(got.CorrelationData, []byte{1, 2}) ||
		got.PayloadFormat != 1 || len(got.User) != 1 || got.User[0] != (packets.UserProperty{Key: "k", Value: "v"}) ||
		!got.Has(packets.PropMessageExpiry) || got.MessageExpiry == 0 || got.MessageExpiry > 100 {
		t.Errorf("will properties %+v", got)
	}
}

// TestWillDelay checks the Will Delay Interval [MQTT-3.1.3-9]: the will
// waits for it, and is then published once.
func TestWillDelay(t *testing.T) {
	srv, addr := startServer(t, mqttd.Options{})
	watcher := watch5(t, addr)
	dropAndWait(t, srv, willClient(t, addr, "d", 2, 60, true))
	if n := srv.Stats().WillsDelayed; n != 1 {
		t.Fatalf("%d wills delayed, want 1", n)
	}
	expectNothing(watcher) // well within the 2 s
	expectPublish(watcher, "will")
	if st := srv.Stats(); st.WillsDelayed != 0 || st.WillsPublished != 1 {
		t.Errorf("%d delayed, %d published; want 0, 1", st.WillsDelayed, st.WillsPublished)
	}
}

// TestWillDelayCancelled checks that a client back on its session within
// the delay cancels its will; one back with a clean session does too
// (TestWillDelayRecover).
func TestWillDelayCancelled(t *testing.T) {
	srv, addr := startServer(t, mqttd.Options{})
	watcher := watch5(t, addr)
	dropAndWait(t, srv, willClient(t, addr, "back", 3600, 3600, true))
	back := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "back", CleanStart: false,
		Properties: sessionExpiryProps(3600)})
	if st := srv.Stats(); st.WillsDelayed != 0 {
		t.Errorf("%d wills delayed after the client came back, want 0", st.WillsDelayed)
	}
	back.send(&packets.Disconnect{})
	back.expectClosed()
	expectNothing(watcher)
	if n := srv.Stats().WillsPublished; n != 0 {
		t.Errorf("%d wills published, want 0", n)
	}
}

// TestWillDelaySessionEnds checks that a will whose delay outlasts its
// session is published when the session ends [MQTT-3.1.3-9].
func TestWillDelaySessionEnds(t *testing.T) {
	srv, addr := startServer(t, mqttd.Options{})
	watcher := watch5(t, addr)
	dropAndWait(t, srv, willClient(t, addr, "short", 3600, 1, true))
	expectPublish(watcher, "will")
	if st := srv.Stats(); st.SessionsExpired != 1 || st.WillsDelayed != 0 {
		t.Errorf("%d sessions expired, %d wills delayed when the will came; want 1, 0", st.SessionsExpired, st.WillsDelayed)
	}
}

// TestTakeoverWill checks the will of a connection taken over: not
// published when the new connection goes on with the persistent session
// (the client is back), published when it starts a clean one (the old
// session ended), in 3.1.1 as in 5.0 (row 52).
func TestTakeoverWill(t *testing.T) {
	t.Parallel()
	for _, v := range versions {
		t.Run(versionName(v), func(t *testing.T) {
			srv, addr := startServer(t, mqttd.Options{})
			watcher := watchTopic(t, addr, "will")
			persistent := func(clean bool) *packets.Connect {
				cp := &packets.Connect{ClientID: "p", CleanStart: clean}
				if v == packets.V5 {
					cp.Properties = sessionExpiryProps(3600)
				}
				return cp
			}
			cp := persistent(false)
			setWill(cp, "will")
			connectAs(t, addr, v, cp)
			before := srv.Stats().Connections
			connectAs(t, addr, v, persistent(false))
			waitFor(t, "the old connection to finish", func() bool { return srv.Stats().Connections == before })
			expectNothing(watcher)

			cp = persistent(false)
			setWill(cp, "will")
			connectAs(t, addr, v, cp)
			connectAs(t, addr, v, persistent(true))
			expectPublish(watcher, "will")
			if n := srv.Stats().WillsPublished; n != 1 {
				t.Errorf("%d wills published, want 1", n)
			}
		})
	}
}

// TestRefusedClientLeavesNoWill checks that a client whose CONNECT is
// refused (here by limits.max_sessions) never had a will: none is
// published when its connection closes.
func TestRefusedClientLeavesNoWill(t *testing.T) {
	t.Parallel()
	for _, v := range versions {
		t.Run(versionName(v), func(t *testing.T) {
			srv, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxSessions: 1}})
			watcher := watchTopic(t, addr, "will")
			cp := &packets.Connect{ClientID: "refused", CleanStart: true}
			setWill(cp, "will")
			rc, ack := connectReply(t, addr, v, cp)
			if ack.ReasonCode == 0 {
				t.Fatal("CONNECT accepted past limits.max_sessions")
			}
			rc.expectClosed()
			waitFor(t, "the refused connection to finish", func() bool { return srv.Stats().Connections == 1 })
			expectNothing(watcher)
			if n := srv.Stats().WillsPublished; n != 0 {
				t.Errorf("%d wills published, want 0", n)
			}
		})
	}
}

// TestWillTopicChecked checks that a will to a topic no PUBLISH could use
// (empty, or with a wildcard) is refused at CONNECT: 3.1.1 has no code for
// it and closes; 5.0 answers CONNACK 0x90. Nothing is published.
func TestWillTopicChecked(t *testing.T) {
	t.Parallel()
	for _, topic := range []string{"", "a/+", "#"} {
		for _, v := range versions {
			t.Run(versionName(v)+"-"+topic, func(t *testing.T) {
				srv, addr := startServer(t, mqttd.Options{})
				cp := &packets.Connect{ClientID: "w", CleanStart: true}
				setWill(cp, topic)
				rc := dialRaw(t, addr)
				cp.ProtocolName, cp.ProtocolVersion, rc.v = "MQTT", v, v
				rc.send(cp)
				if v == packets.V5 {
					if ack, ok := rc.read().(*packets.Connack); !ok || ack.ReasonCode != packets.TopicNameInvalid {
						t.Fatalf("got %+v, want CONNACK 0x90", ack)
					}
				}
				rc.expectClosed()
				waitFor(t, "the connection to finish", func() bool { return srv.Stats().Connections == 0 })
				if st := srv.Stats(); st.Sessions != 0 || st.WillsPublished != 0 {
					t.Errorf("%d sessions, %d wills published; want none", st.Sessions, st.WillsPublished)
				}
			})
		}
	}
}
