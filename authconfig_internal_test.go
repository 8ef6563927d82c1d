package mqttd

import (
	"net"
	"testing"
)

// strAddr is a net.Addr known only by its text, as a listener of another
// kind (QUIC, an in-memory one) gives.
type strAddr string

func (a strAddr) Network() string { return "other" }
func (a strAddr) String() string  { return string(a) }

// TestLocalOnly checks which listeners count as reachable only from this
// machine (anonymous clients let in by default): loopback IPs and unix
// sockets; everything else, names included, fails closed.
func TestLocalOnly(t *testing.T) {
	for _, tc := range []struct {
		addr net.Addr
		want bool
	}{
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1883}, true},
		{&net.TCPAddr{IP: net.IPv6loopback, Port: 1883}, true},
		{&net.TCPAddr{IP: net.IPv4zero, Port: 1883}, false},
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 1883}, false},
		{&net.TCPAddr{IP: net.IPv4(192, 168, 1, 2), Port: 1883}, false},
		{&net.UnixAddr{Name: "/run/mqttd.sock", Net: "unix"}, true},
		{nil, false},
		{strAddr("127.0.0.1:1883"), true},
		{strAddr("broker.example.com:1883"), false},
		{strAddr("203.0.113.9:443"), false},
		{strAddr("10.0.0.5"), false},
	} {
		if got := localOnly(tc.addr); got != tc.want {
			t.Errorf("localOnly(%v) = %v, want %v", tc.addr, got, tc.want)
		}
	}
}

// TestProxiedListenerIsNotLocal: a listener on loopback behind a proxy
// (PROXY protocol or trusted forwarders) serves whoever reaches the
// proxy, so anonymous clients are not let in by default.
func TestProxiedListenerIsNotLocal(t *testing.T) {
	s, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	loop := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1883}
	s.mu.Lock()
	s.openGateLocked("plain", loop, &ListenerConfig{Address: "127.0.0.1:1883"})
	s.openGateLocked("proxied", loop, &ListenerConfig{Address: "127.0.0.1:1884", ProxyProtocol: true, ProxyTrusted: []string{"127.0.0.1/32"}})
	s.openGateLocked("forwarded", loop, &ListenerConfig{Type: "ws", Address: "127.0.0.1:8083", ProxyTrusted: []string{"127.0.0.1/32"}})
	s.mu.Unlock()
	if g := s.gateOf("plain"); !g.anonymous {
		t.Error("a loopback listener refuses anonymous clients by default")
	}
	for _, name := range []string{"proxied", "forwarded"} {
		if g := s.gateOf(name); g.anonymous || g.local {
			t.Errorf("%s: anonymous %v, local %v; want neither", name, g.anonymous, g.local)
		}
	}
}
