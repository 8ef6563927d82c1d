package listeners_test

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"

	"mqttd/listeners"
)

// TestWebSocketOrigin upgrades over a real socket with the Host and Origin
// headers of pages the policy lets in and of those it refuses: a page that
// rebound its name to 127.0.0.1 sends that name as Host.
func TestWebSocketOrigin(t *testing.T) {
	var logs syncBuffer
	_, addr := startBroker(t, listeners.Config{Type: listeners.WS, AllowedOrigins: []string{"https://dash.example"},
		Logger: zerolog.New(&logs)})
	_, port, _ := net.SplitHostPort(addr)
	url := "ws://" + addr + "/mqtt"
	d := websocket.Dialer{Subprotocols: []string{"mqtt"}}
	for _, tc := range []struct {
		host, origin string
		status       int
	}{
		{"", "", http.StatusSwitchingProtocols}, // not a browser
		{"", "http://" + addr, http.StatusSwitchingProtocols},
		{"", "http://127.0.0.1:1880", http.StatusSwitchingProtocols},
		{"", "http://localhost:8000", http.StatusSwitchingProtocols},
		{"localhost:" + port, "http://127.0.0.1", http.StatusSwitchingProtocols},
		{"", "https://dash.example", http.StatusSwitchingProtocols},
		{"", "https://evil.example", http.StatusForbidden},
		{"attacker.example:" + port, "http://attacker.example:" + port, http.StatusForbidden},
	} {
		h := http.Header{}
		if tc.origin != "" {
			h.Set("Origin", tc.origin)
		}
		if tc.host != "" {
			h.Set("Host", tc.host)
		}
		ws, resp, err := d.Dial(url, h)
		if ws != nil {
			ws.Close()
		}
		if resp == nil {
			t.Fatalf("Host %q, Origin %q: %v", tc.host, tc.origin, err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != tc.status {
			t.Errorf("Host %q, Origin %q: status %d, want %d (%s)", tc.host, tc.origin, resp.StatusCode, tc.status, body)
		}
		if tc.status == http.StatusForbidden && !strings.Contains(string(body), "allowed_origins") {
			t.Errorf("Origin %q: the refusal %q does not name allowed_origins", tc.origin, body)
		}
	}
	waitFor(t, "the refusal's log line", func() bool {
		s := logs.String()
		return strings.Contains(s, "allowed_origins") && strings.Contains(s, "--ws-allowed-origin") &&
			strings.Contains(s, "evil.example")
	})
}
