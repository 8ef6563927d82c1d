package mqttd

import (
	"net/netip"
	"testing"
)

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
