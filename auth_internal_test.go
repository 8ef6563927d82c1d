package mqttd

import (
	"errors"
	"net"
	"net/netip"
	"testing"
)

// strAddr is a net.Addr known only by its text, as a listener of another
// kind (QUIC, an in-memory one) gives.
type strAddr string

func (a strAddr) Network() string { return "other" }

func (a strAddr) String() string { return string(a) }

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
	// Without a password file the proxied ones let nobody in, which
	// allow_closed accepts.
	closed := &AuthConfig{AllowClosed: true}
	s.mu.Lock()
	err = errors.Join(
		s.openGateLocked("plain", loop, &ListenerConfig{Address: "127.0.0.1:1883"}),
		s.openGateLocked("proxied", loop, &ListenerConfig{Address: "127.0.0.1:1884", ProxyProtocol: true,
			ProxyTrusted: []string{"127.0.0.1/32"}, Auth: closed}),
		s.openGateLocked("forwarded", loop, &ListenerConfig{Type: "ws", Address: "127.0.0.1:8083",
			ProxyTrusted: []string{"127.0.0.1/32"}, Auth: closed}))
	s.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if g := s.gateOf("plain"); !g.anonymous {
		t.Error("a loopback listener refuses anonymous clients by default")
	}
	for _, name := range []string{"proxied", "forwarded"} {
		if g := s.gateOf(name); g.anonymous || g.local {
			t.Errorf("%s: anonymous %v, local %v; want neither", name, g.anonymous, g.local)
		}
	}
}

// TestLoginLimiterBounded checks that the login buckets stay within
// auth.login_addresses however many sources fail: full buckets are
// dropped first and uncounted, then an arbitrary tenth, counted in
// mqttd_login_sources_evicted_total.
func TestLoginLimiterBounded(t *testing.T) {
	st := &stats{}
	l := newLoginLimiter(Auth{LoginAddresses: 10, LoginBurst: 1}, st)
	for i := range 50 {
		src := netip.AddrFrom4([4]byte{192, 0, 2, byte(i)})
		if _, ok := l.take(src); !ok {
			t.Fatalf("source %v refused at its first login", src)
		}
		if n := len(l.buckets); n > 10 {
			t.Fatalf("%d buckets, want at most 10", n)
		}
	}
	if st.loginEvicted.Load() == 0 || st.loginSources.Load() > 10 {
		t.Errorf("%d evicted, %d sources; want some evicted and at most 10", st.loginEvicted.Load(), st.loginSources.Load())
	}
	// A source whose bucket is full again (its login succeeded) goes
	// without being counted.
	before := st.loginEvicted.Load()
	l = newLoginLimiter(Auth{LoginAddresses: 10}, st)
	for i := range 50 {
		src := netip.AddrFrom4([4]byte{198, 51, 100, byte(i)})
		l.take(src)
		l.refund(src)
	}
	if got := st.loginEvicted.Load(); got != before {
		t.Errorf("%d buckets of successful logins counted as evicted", got-before)
	}
}

// TestLoginSourceGroups checks what a source is: an IPv4 address, an
// IPv6 /64, nothing for an address the limits leave alone.
func TestLoginSourceGroups(t *testing.T) {
	key := func(s string) netip.Prefix {
		p, _ := loginSource(netip.MustParseAddr(s))
		return p
	}
	if key("2001:db8::1") != key("2001:db8::ffff:1") || key("2001:db8::1") == key("2001:db8:0:1::1") {
		t.Error("IPv6 sources not grouped by /64")
	}
	if key("192.0.2.1") == key("192.0.2.2") {
		t.Error("IPv4 addresses grouped")
	}
	if _, ok := loginSource(netip.Addr{}); ok {
		t.Error("the zero address (loopback, unix) is limited")
	}
}
