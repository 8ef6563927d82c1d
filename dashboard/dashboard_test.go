package dashboard

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"os"
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

// TestVendoredMQTTJS: the MQTT.js bundle embedded is the version
// hack/dashboard/package-lock.json pins (hack/dashboard/vendor was run
// after the lock changed) and, when that directory's node_modules is
// there (the script installs it), the same bytes as its ES module build.
func TestVendoredMQTTJS(t *testing.T) {
	var lock struct {
		Packages map[string]struct{ Version string } `json:"packages"`
	}
	b, err := os.ReadFile("../hack/dashboard/package-lock.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &lock); err != nil {
		t.Fatal(err)
	}
	pinned := lock.Packages["node_modules/mqtt"].Version
	if v, err := fs.ReadFile(static, "static/vendor/mqtt.VERSION"); err != nil || string(v) != "MQTT.js "+pinned+"\n" {
		t.Fatalf("static/vendor/mqtt.VERSION %q (%v), want MQTT.js %s: run hack/dashboard/vendor", v, err, pinned)
	}
	installed, err := os.ReadFile("../hack/dashboard/node_modules/mqtt/dist/mqtt.esm.js")
	if err != nil {
		t.Skipf("MQTT.js not installed in hack/dashboard (hack/dashboard/vendor installs it): %v", err)
	}
	gz, err := fs.ReadFile(static, assets()["/vendor/mqtt.esm.js"].name)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	embedded, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(embedded, installed) {
		t.Fatalf("the embedded bundle (%d bytes) is not hack/dashboard's node_modules one (%d bytes): run hack/dashboard/vendor",
			len(embedded), len(installed))
	}
}
