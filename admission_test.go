package mqttd_test

import (
	"net"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"mqttd"
	"mqttd/packets"
)

// TestConnectionLimits checks the admission limits at their boundary: the
// connection at the limit is served, the one over it is closed before
// anything is read and counted under its reason, and closing one makes
// room again. Loopback addresses are not limited per address.
func TestConnectionLimits(t *testing.T) {
	reg := prometheus.NewRegistry()
	from := make(chan net.Addr, 1)
	srv, addr := startServer(t, mqttd.Options{Registerer: reg,
		Limits: mqttd.Limits{MaxConnections: 4, MaxConnectionsPerAddress: 2}}, fromChan(from))
	deviceA := &net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 40000}
	deviceB := &net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 40000}
	local := &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 40000}
	dial := func(src net.Addr, id string, admitted bool) *rawConn {
		t.Helper()
		from <- src
		if admitted {
			return connectRaw(t, addr, &packets.Connect{ClientID: id, CleanStart: true})
		}
		rc := dialRaw(t, addr)
		rc.send(&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V311, ClientID: id, CleanStart: true})
		rc.expectClosed()
		return nil
	}
	a1 := dial(deviceA, "a1", true)
	dial(deviceA, "a2", true)
	dial(deviceA, "a3", false) // a third from one address
	if got := srv.Stats().Rejected["max_connections_per_address"]; got != 1 {
		t.Errorf("max_connections_per_address rejections: %d, want 1", got)
	}
	dial(local, "l1", true)
	dial(deviceB, "b1", true) // the fourth connection: at the global limit
	dial(local, "l2", false)  // over it, whatever its address
	if got := metricValue(t, reg, "mqttd_connections_rejected_total"); got != 2 {
		t.Errorf("mqttd_connections_rejected_total: %v, want 2", got)
	}
	a1.nc.Close()
	waitFor(t, "a1's connection to close", func() bool { return srv.Stats().Connections == 3 })
	dial(deviceA, "a4", true) // room again, globally and for device A
}

// TestConnectionLimitPerIPv6Prefix checks that IPv6 sources are counted
// by their /64, which one holder fills with addresses at will: a third
// connection from another address of the same /64 is over a limit of
// two, one from another /64 is not.
func TestConnectionLimitPerIPv6Prefix(t *testing.T) {
	from := make(chan net.Addr, 1)
	srv, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxConnectionsPerAddress: 2}}, fromChan(from))
	dial := func(ip, id string, admitted bool) {
		t.Helper()
		from <- &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}
		if admitted {
			connectRaw(t, addr, &packets.Connect{ClientID: id, CleanStart: true})
			return
		}
		rc := dialRaw(t, addr)
		rc.send(&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V311, ClientID: id, CleanStart: true})
		rc.expectClosed()
	}
	dial("2001:db8:1:1::1", "a1", true)
	dial("2001:db8:1:1::2", "a2", true)
	dial("2001:db8:1:1:ffff::3", "a3", false) // the same /64
	dial("2001:db8:1:2::1", "b1", true)       // another /64
	if got := srv.Stats().Rejected["max_connections_per_address"]; got != 1 {
		t.Errorf("max_connections_per_address rejections: %d, want 1", got)
	}
}
