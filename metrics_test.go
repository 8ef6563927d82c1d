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
