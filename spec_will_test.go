package mqttd_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"mqttd"
	"mqttd/packets"
)

// connectWithWill connects client id in version v with a will on "will".
func connectWithWill(t *testing.T, addr string, v packets.Version, id string, keepAlive uint16) *rawConn {
	t.Helper()
	cp := &packets.Connect{ClientID: id, CleanStart: true, KeepAlive: keepAlive}
	setWill(cp, "will")
	return connectAs(t, addr, v, cp)
}

// Row 51: a client silent for 1.5 x keepalive is disconnected as after a
// network failure and its will is published [MQTT-3.1.2-24] (5.0
// [MQTT-3.1.2-22]); the largest keepalive does not overflow into an
// immediate timeout.
func specRow51KeepAlive(t *testing.T, on ...serverOption) {
	for _, v := range versions {
		t.Run(versionName(v)+"-silent", func(t *testing.T) {
			_, addr := startServer(t, mqttd.Options{}, on...)
			watcher := watchTopic(t, addr, "will")
			rc := connectWithWill(t, addr, v, "c", 1)
			rc.expectClosed()
			expectPublish(watcher, "will")
		})
		t.Run(versionName(v)+"-keepalive-65535", func(t *testing.T) {
			_, addr := startServer(t, mqttd.Options{}, on...)
			rc := connectAs(t, addr, v, &packets.Connect{ClientID: "c", CleanStart: true, KeepAlive: 65535})
			expectNothing(rc)
		})
	}
}

// Row 52: a second connection with the same client id takes the session
// over: the old connection is closed [MQTT-3.1.4-2], a 5.0 one with
// DISCONNECT 0x8E first [MQTT-3.1.4-3], and, having ended without
// DISCONNECT, its will (without a delay) is published.
func specRow52Takeover(t *testing.T, on ...serverOption) {
	for _, v := range versions {
		t.Run(versionName(v), func(t *testing.T) {
			_, addr := startServer(t, mqttd.Options{}, on...)
			watcher := watchTopic(t, addr, "will")
			old := connectWithWill(t, addr, v, "c", 0)
			current := connectAs(t, addr, v, &packets.Connect{ClientID: "c", CleanStart: true})
			if v == packets.V5 {
				if d, ok := old.read().(*packets.Disconnect); !ok || d.ReasonCode != packets.SessionTakenOver {
					t.Fatalf("old connection got %+v, want DISCONNECT 0x8E", d)
				}
			}
			old.expectClosed()
			expectPublish(watcher, "will")
			expectNothing(current)
		})
	}
}

// Row 53: DISCONNECT discards the will [MQTT-3.1.2-10], except 5.0's
// DISCONNECT 0x04 [MQTT-3.14.4-3]; a connection lost without DISCONNECT
// publishes it [MQTT-3.1.2-8]. (Protocol-error closes are checked with
// every rejected packet: see expectRejected.)
func specRow53Will(t *testing.T, on ...serverOption) {
	cases := []struct {
		name      string
		v         packets.Version
		disc      *packets.Disconnect // nil: the client just closes the socket
		published bool
	}{
		{"v311-disconnect", packets.V311, &packets.Disconnect{}, false},
		{"v311-connection-lost", packets.V311, nil, true},
		{"v5-disconnect-0x00", packets.V5, &packets.Disconnect{}, false},
		{"v5-disconnect-0x04", packets.V5, &packets.Disconnect{ReasonCode: packets.DisconnectWithWill}, true},
		{"v5-connection-lost", packets.V5, nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			_, addr := startServer(t, mqttd.Options{Registerer: reg}, on...)
			watcher := watchTopic(t, addr, "will")
			rc := connectWithWill(t, addr, tc.v, "c", 0)
			if tc.disc != nil {
				rc.send(tc.disc)
				rc.expectClosed()
			} else {
				rc.nc.Close()
			}
			if tc.published {
				expectPublish(watcher, "will")
				return
			}
			// The gauge drops after the connection's cleanup, which is
			// where a will would have been routed; the ping then shows
			// that none reached the watcher.
			waitFor(t, "the connection to be cleaned up", func() bool {
				return metricValue(t, reg, "mqttd_connections") == 1
			})
			expectNothing(watcher)
		})
	}
}
