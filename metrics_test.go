package mqttd_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"mqttd"
	"mqttd/packets"
	"mqttd/session"
)

// labelsOf scrapes the one series of the metric name from reg: its labels
// and its value.
func labelsOf(t *testing.T, reg *prometheus.Registry, name string) (map[string]string, float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) != 1 {
			continue
		}
		m := mf.GetMetric()[0]
		labels := make(map[string]string)
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		return labels, m.GetGauge().GetValue()
	}
	t.Fatalf("no single series %s", name)
	return nil, 0
}

// TestMetricsAfterWorkload drives a durable broker through a script (a
// persistent subscriber that leaves three QoS 1 messages unacknowledged
// and goes away, two more queued for it, a retained message, a refused
// login) and checks that the gauges, the store's histograms and the build
// information scraped from the collector say what the script did.
func TestMetricsAfterWorkload(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	srv, addr := startServer(t, mqttd.Options{Registerer: reg, DataDir: t.TempDir(),
		Version: "v1.2.3-test", Commit: "0123abc", Auth: mqttd.Auth{AuthConfig: mqttd.AuthConfig{PasswordFile: writePasswords(t, t.TempDir(), "alice")}}})
	login := func(id string, clean, present bool) *rawConn {
		t.Helper()
		rc := dialRaw(t, addr)
		rc.send(&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V311, ClientID: id, CleanStart: clean,
			UsernameFlag: true, Username: "alice", PasswordFlag: true, Password: []byte("pw-alice")})
		if ack, ok := rc.read().(*packets.Connack); !ok || ack.ReasonCode != 0 || ack.SessionPresent != present {
			t.Fatalf("CONNACK %+v for %s", ack, id)
		}
		return rc
	}
	gauge := func(name string, want float64) {
		t.Helper()
		if got := metricValue(t, reg, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}

	keeper := login("keeper", false, false)
	subscribe(keeper, packets.Subscription{Filter: "q/#", Options: packets.SubOptions{QoS: 1}})
	pub := login("pub", true, false)
	for i := range 3 {
		publishQoS1(pub, uint16(i+1), "q/a", false)
		expectPublish(keeper, "q/a") // and left unacknowledged
	}
	gauge("mqttd_inflight_messages", 3)
	gauge("mqttd_sessions_offline", 0)
	keeper.send(&packets.Disconnect{})
	keeper.expectClosed()
	waitFor(t, "the keeper offline", func() bool { return srv.Stats().SessionsOnline == 1 })
	for i := range 2 {
		publishQoS1(pub, uint16(10+i), "q/b", false)
	}
	publishQoS1(pub, 20, "r", true)

	refused := dialRaw(t, addr)
	refused.send(&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V311, ClientID: "mallory",
		UsernameFlag: true, Username: "alice", PasswordFlag: true, Password: []byte("guess")})
	refused.read()

	gauge("mqttd_sessions", 2)
	gauge("mqttd_sessions_online", 1)
	gauge("mqttd_sessions_offline", 1)
	gauge("mqttd_inflight_messages", 3) // an offline session's window still holds them
	gauge("mqttd_queued_messages", 2)
	gauge("mqttd_queued_bytes", 2*float64(2*len("q/b")+session.EntryCost)) // publishQoS1's payload is its topic
	gauge("mqttd_subscriptions", 1)
	gauge("mqttd_retained_messages", 1)
	gauge("mqttd_retained_bytes", float64(2*len("r")))
	gauge("mqttd_auth_failures_total", 1)
	if st := srv.Stats(); st.Inflight != 3 {
		t.Errorf("Stats.Inflight = %d, want 3", st.Inflight)
	}

	commits, ops := metricValue(t, reg, "mqttd_store_commits_total"), metricValue(t, reg, "mqttd_store_operations_total")
	if commits == 0 {
		t.Fatal("nothing committed: the script keeps a persistent session's messages")
	}
	for name, want := range map[string][2]float64{
		"mqttd_store_commit_duration_seconds": {commits, metricValue(t, reg, "mqttd_store_commit_seconds_total")},
		"mqttd_store_commit_operations":       {commits, ops},
	} {
		count, sum, buckets := histogramOf(t, reg, name)
		if float64(count) != want[0] || sum != want[1] {
			t.Errorf("%s: count %d sum %v, want %v and %v", name, count, sum, want[0], want[1])
		}
		if len(buckets) != 16 {
			t.Errorf("%s: %d buckets, want 16", name, len(buckets))
		}
		for bound, n := range buckets {
			if n > count {
				t.Errorf("%s: bucket %v counts %d of %d", name, bound, n, count)
			}
		}
	}
	// Each commit here holds at least one operation and at most the few
	// the script made: every one is in the buckets up to 64.
	count, _, buckets := histogramOf(t, reg, "mqttd_store_commit_operations")
	if buckets[64] != count {
		t.Errorf("%d of %d commits of more than 64 operations", count-buckets[64], count)
	}

	labels, v := labelsOf(t, reg, "mqttd_build_info")
	if v != 1 {
		t.Errorf("mqttd_build_info is %v, want 1", v)
	}
	if want := map[string]string{"version": "v1.2.3-test", "commit": "0123abc", "goversion": runtime.Version()}; len(labels) != 3 ||
		labels["version"] != want["version"] || labels["commit"] != want["commit"] || labels["goversion"] != want["goversion"] {
		t.Errorf("mqttd_build_info labels %v, want %v", labels, want)
	}
}

// TestMetricsHaveHelp checks that every metric the broker exports says
// what it counts, and that the build information has a version when the
// program gave none.
func TestMetricsHaveHelp(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	if _, err := mqttd.New(mqttd.Options{Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) < 40 {
		t.Fatalf("only %d metric families", len(mfs))
	}
	for _, mf := range mfs {
		if len(mf.GetHelp()) < 10 {
			t.Errorf("%s: help %q", mf.GetName(), mf.GetHelp())
		}
	}
	// Without Options.Version the build information names the version.
	if labels, _ := labelsOf(t, reg, "mqttd_build_info"); labels["version"] == "" {
		t.Errorf("mqttd_build_info labels %v: no version", labels)
	}
}

// TestNewFailureUnregistersMetrics checks that a New that fails after
// registering its collector (here: the data directory is a file) takes
// it back, so that New may be tried again on the same registry.
func TestNewFailureUnregistersMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := mqttd.New(mqttd.Options{Registerer: reg, DataDir: notDir}); err == nil {
		t.Fatal("New with a file for its data directory succeeded")
	}
	srv, err := mqttd.New(mqttd.Options{Registerer: reg, DataDir: t.TempDir()})
	if err != nil {
		t.Fatalf("New after a failed New on the same registry: %v", err)
	}
	srv.Shutdown(context.Background())
}

// TestStatsGauges follows the gauges through a persistent session's life
// (online, subscribed, offline with queued messages, back, gone), retained
// messages set and cleared, and the disconnect reasons, and checks that
// Server.Stats and the Prometheus collector report the same values: both
// read the same atomics.
func TestStatsGauges(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
