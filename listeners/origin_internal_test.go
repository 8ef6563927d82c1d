package listeners

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
)

// TestOriginPolicy checks originRefusal case by case; a request's local
// address is what http.Server puts in its context, here made up so that
// listeners on other addresses than loopback are covered too.
func TestOriginPolicy(t *testing.T) {
	const loop, lan = "127.0.0.1:8083", "192.0.2.10:8083"
	for _, tc := range []struct {
		name, local, remote, host, origin, xff string
		allowed                                []string
		trusted                                string
		ok                                     bool
	}{
		{name: "not a browser", local: loop, host: "attacker.example:8083", ok: true},
		{name: "same host, other port", local: loop, host: "127.0.0.1:8083", origin: "http://127.0.0.1:8000", ok: true},
		{name: "page on localhost, URL on 127.0.0.1", local: loop, host: "127.0.0.1:8083", origin: "http://localhost:1880", ok: true},
		{name: "page on 127.0.0.1, URL on localhost", local: loop, host: "localhost:8083", origin: "http://127.0.0.1", ok: true},
		{name: "IPv6 loopback", local: "[::1]:8083", remote: "[::1]:5000", host: "[::1]:8083", origin: "http://[::1]:8000", ok: true},
		{name: "page on ::1, URL on 127.0.0.2", local: "127.0.0.2:8083", host: "127.0.0.2:8083", origin: "http://[::1]:8000", ok: true},
		{name: "name under .localhost", local: loop, host: "127.0.0.1:8083", origin: "http://dash.localhost:8000", ok: true},
		{name: "Host case and trailing dot", local: loop, host: "LocalHost.:8083", origin: "http://localhost:3000", ok: true},
		{name: "DNS rebinding", local: loop, host: "attacker.example:8083", origin: "http://attacker.example:8083"},
		{name: "rebinding, no port", local: loop, host: "attacker.example", origin: "http://attacker.example"},
		{name: "look-alike of localhost", local: loop, host: "localhost.attacker.example:8083", origin: "http://localhost.attacker.example:8083"},
		{name: "foreign site", local: loop, host: "127.0.0.1:8083", origin: "https://evil.example"},
		{name: "opaque origin", local: loop, host: "127.0.0.1:8083", origin: "null"},
		{name: "listed origin, Host a name for this machine", local: "127.0.1.1:8083", host: "mybox:8083",
			origin: "http://mybox:1880", allowed: []string{"http://mybox:1880/"}, ok: true},
		{name: "listed origin, case", local: loop, host: "127.0.0.1:8083", origin: "https://Dash.example",
			allowed: []string{"https://dash.example"}, ok: true},
		{name: "star", local: loop, host: "attacker.example:8083", origin: "https://evil.example", allowed: []string{"*"}, ok: true},
		{name: "other origin than the one listed", local: loop, host: "127.0.0.1:8083", origin: "https://evil.example",
			allowed: []string{"https://dash.example"}},
		{name: "network listener, same host", local: lan, remote: "192.0.2.20:5000", host: "broker.lan:8083",
			origin: "http://broker.lan:1880", ok: true},
		{name: "port forward (Docker), page on 127.0.0.1, URL on localhost", local: lan, remote: "192.0.2.1:5000",
			host: "localhost:8083", origin: "http://127.0.0.1:1880", ok: true},
		{name: "network listener, page of the visitor's own localhost", local: lan, remote: "192.0.2.20:5000",
			host: "192.0.2.10:8083", origin: "http://localhost:8000"},
		{name: "network listener, foreign site", local: lan, remote: "192.0.2.20:5000", host: "broker.lan:8083",
			origin: "https://evil.example"},
		{name: "reverse proxy on this machine, remote visitor", local: loop, host: "broker.example:443",
			origin: "https://broker.example", trusted: "127.0.0.1/32", xff: "203.0.113.7", ok: true},
		{name: "reverse proxy on this machine, browser on it", local: loop, host: "attacker.example",
			origin: "https://attacker.example", trusted: "127.0.0.1/32", xff: "127.0.0.1"},
		{name: "untrusted X-Forwarded-For", local: loop, host: "attacker.example",
			origin: "https://attacker.example", xff: "203.0.113.7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Type: WS, AllowedOrigins: tc.allowed}
			if tc.trusted != "" {
				cfg.ProxyTrusted = []netip.Prefix{netip.MustParsePrefix(tc.trusted)}
			}
			l := &Listener{cfg: cfg}
			r := httptest.NewRequest(http.MethodGet, "/mqtt", nil)
			r.Host = tc.host
			r.RemoteAddr = tc.remote
			if r.RemoteAddr == "" {
				r.RemoteAddr = "127.0.0.1:5000"
			}
			if tc.origin != "" {
				r.Header.Set("Origin", tc.origin)
			}
			if tc.xff != "" {
				r.Header.Set("X-Forwarded-For", tc.xff)
			}
			la := net.TCPAddrFromAddrPort(netip.MustParseAddrPort(tc.local))
			r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, net.Addr(la)))
			why := l.originRefusal(r)
			if (why == "") != tc.ok {
				t.Fatalf("Host %q, Origin %q: refusal %q, want allowed %v", tc.host, tc.origin, why, tc.ok)
			}
		})
	}
}
