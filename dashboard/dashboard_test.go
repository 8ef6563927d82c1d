package dashboard

import (
	"net/http"
	"strings"
	"testing"
)

// TestContentSecurityPolicy: the WebSocket sources name the Host's host
// on any port, and a Host that is not a plain name or address adds none
// (it cannot inject a source or a directive).
func TestContentSecurityPolicy(t *testing.T) {
	for host, want := range map[string]string{
		"127.0.0.1:9183":    "'self' ws://127.0.0.1:* wss://127.0.0.1:*;",
		"localhost":         "'self' ws://localhost:* wss://localhost:*;",
		"[::1]:9183":        "'self' ws://[::1]:* wss://[::1]:*;",
		"[::1]":             "'self' ws://[::1]:* wss://[::1]:*;",
		"pi.lan:80":         "'self' ws://pi.lan:* wss://pi.lan:*;",
		"":                  "'self';",
		"a.b; script-src *": "'self';",
		"evil.example *:1":  "'self';",
		"::1":               "'self';",
	} {
		csp := contentSecurityPolicy(host)
		if !strings.Contains(csp, "connect-src "+want) || strings.Count(csp, "script-src") != 1 {
			t.Errorf("Host %q: %s, want connect-src %s", host, csp, want)
		}
	}
}

// TestAcceptsGzip reads Accept-Encoding as browsers and proxies send it.
func TestAcceptsGzip(t *testing.T) {
	for ae, want := range map[string]bool{
		"gzip, deflate, br, zstd": true,
		"GZIP":                    true,
		"br;q=1.0, gzip;q=0.8":    true,
		"*":                       true,
		"":                        false,
		"identity":                false,
		"gzip;q=0":                false,
		"gzip; q=0.000":           false,
		"x-gzip-not":              false,
	} {
		r := &http.Request{Header: http.Header{"Accept-Encoding": {ae}}}
		if got := acceptsGzip(r); got != want {
			t.Errorf("Accept-Encoding %q: %v, want %v", ae, got, want)
		}
	}
}

// TestMatches reads If-None-Match: a list, weak tags, *.
func TestMatches(t *testing.T) {
	for inm, want := range map[string]bool{
		`"abc"`:          true,
		`"x", "abc"`:     true,
		`W/"abc"`:        true,
		`*`:              true,
		`"abcd"`:         false,
		``:               false,
		`"abc-identity"`: false,
	} {
		if got := matches(inm, `"abc"`); got != want {
			t.Errorf("If-None-Match %s: %v, want %v", inm, got, want)
		}
	}
}
