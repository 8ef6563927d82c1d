package mqttd_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"mqttd"
	"mqttd/packets"
	"mqttd/session"
)

// TestStatsGauges follows the gauges through a persistent session's life
// (online, subscribed, offline with queued messages, back, gone), retained
// messages set and cleared, and the disconnect reasons, and checks that
// Server.Stats and the Prometheus collector report the same values: both
// read the same atomics.
func TestStatsGauges(t *testing.T) {
	reg := prometheus.NewRegistry()
	srv, addr := startServer(t, mqttd.Options{Registerer: reg})
	expect := func(what string, want int64, stat func(mqttd.Stats) int64, metric string) {
		t.Helper()
		waitFor(t, what, func() bool { return stat(srv.Stats()) == want })
		if got := metricValue(t, reg, metric); got != float64(want) {
			t.Errorf("%s: %s is %v, Stats says %d", what, metric, got, want)
		}
	}
	sessions := func(s mqttd.Stats) int64 { return s.Sessions }
	online := func(s mqttd.Stats) int64 { return s.SessionsOnline }
	subs := func(s mqttd.Stats) int64 { return s.Subscriptions }
	queued := func(s mqttd.Stats) int64 { return s.Queued }
	queuedBytes := func(s mqttd.Stats) int64 { return s.QueuedBytes }
	retained := func(s mqttd.Stats) int64 { return s.Retained }

	sub := connectRawSession(t, addr, "keeper", false, false)
	subscribe(sub, packets.Subscription{Filter: "q/#", Options: packets.SubOptions{QoS: 1}},
		packets.Subscription{Filter: "other", Options: packets.SubOptions{QoS: 1}})
	expect("one online session", 1, online, "mqttd_sessions_online")
	expect("two subscriptions", 2, subs, "mqttd_subscriptions")
	sub.send(&packets.Disconnect{})
	sub.expectClosed()
	expect("the session kept offline", 0, online, "mqttd_sessions_online")
	expect("the session kept", 1, sessions, "mqttd_sessions")

	pub := connectRawSession(t, addr, "pub", true, false)
	for i := range 3 {
		pub.send(&packets.Publish{Topic: "q/a", QoS: 1, PacketID: uint16(i + 1), Payload: []byte("12345")})
		pub.read()
	}
	pub.send(&packets.Publish{Topic: "r/1", Retain: true, Payload: []byte("x")})
	pub.send(&packets.Publish{Topic: "r/2", Retain: true, Payload: []byte("y")})
	pub.ping()
	expect("three messages queued", 3, queued, "mqttd_queued_messages")
	expect("their bytes queued", 3*int64(len("q/a")+len("12345")+session.EntryCost), queuedBytes, "mqttd_queued_bytes")
	expect("two retained messages", 2, retained, "mqttd_retained_messages")
	pub.send(&packets.Publish{Topic: "r/1", Retain: true})
	pub.ping()
	expect("one retained message after a clear", 1, retained, "mqttd_retained_messages")

	back := connectRawSession(t, addr, "keeper", false, true)
	for range 3 {
		p := expectPublish(back, "q/a")
		back.send(&packets.Puback{PacketID: p.PacketID})
	}
	expect("the queue delivered", 0, queued, "mqttd_queued_messages")
	expect("no queued bytes", 0, queuedBytes, "mqttd_queued_bytes")

	// A clean start ends the old session: its subscriptions go with it.
	back.nc.Close()
	expect("the session offline again", 1, online, "mqttd_sessions_online")
	connectRawSession(t, addr, "keeper", true, false).send(&packets.Unsubscribe{PacketID: 9, Filters: []string{"none"}})
	expect("the old session's subscriptions gone", 0, subs, "mqttd_subscriptions")
	expect("two sessions: pub and the new keeper", 2, sessions, "mqttd_sessions")

	if got := srv.Stats().Disconnects["client_disconnect"]; got != 1 {
		t.Errorf("client_disconnect closes: %d, want 1", got)
	}
	waitFor(t, "the dropped connection counted", func() bool { return srv.Stats().Disconnects["client_closed"] == 1 })
}

// TestDisconnectReasons checks that a connection closed for a protocol
// error or a malformed packet is counted under its own
// reason in mqttd_disconnects_total.
func TestDisconnectReasons(t *testing.T) {
	reg := prometheus.NewRegistry()
	srv, addr := startServer(t, mqttd.Options{Registerer: reg})
	rc := connectRawSession(t, addr, "bad", true, false)
	rc.send(&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V311, ClientID: "again"})
	rc.expectClosed()
	rc = connectRawSession(t, addr, "malformed", true, false)
	rc.write([]byte{0x30, 0xff, 0xff, 0xff, 0xff, 0x01}) // a fifth length byte
	rc.expectClosed()
	rc = dialRaw(t, addr)
	rc.write([]byte{0x30, 0x00}) // PUBLISH before CONNECT
	rc.expectClosed()
	waitFor(t, "three closes counted", func() bool {
		d := srv.Stats().Disconnects
		return d["protocol_error"] == 2 && d["malformed_packet"] == 1
	})
	if got := metricValue(t, reg, "mqttd_disconnects_total"); got != 3 {
		t.Errorf("mqttd_disconnects_total sums to %v, want 3", got)
	}
}
