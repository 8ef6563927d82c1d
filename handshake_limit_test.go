package mqttd_test

import (
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/gorilla/websocket"

	"mqttd"
)

// TestHandshakeBoundsCounted checks that a listener's max_handshakes and
// max_handshakes_per_address reach it and that what they refuse is
// counted by reason: silent connections from loopback meet only the
// first, those a PROXY header says come from one address the second.
func TestHandshakeBoundsCounted(t *testing.T) {
	srv := listenAll(t, mqttd.Options{Listeners: []mqttd.ListenerConfig{
		{Type: "ws", Address: "127.0.0.1:0", MaxHandshakes: 2},
		{Type: "ws", Address: "127.0.0.1:0", ProxyProtocol: true, ProxyTrusted: []string{"127.0.0.1"}, MaxHandshakesPerAddress: 2},
	}})
	addrs := srv.Addrs()
	for range 3 {
		dialRaw(t, addrs[0].String())
	}
	waitFor(t, "1 of 3 refused by max_handshakes", func() bool { return srv.Stats().Rejected["handshakes_pending"] == 1 })
	for range 3 {
		dialRaw(t, addrs[1].String()).write([]byte("PROXY TCP4 192.0.2.1 192.0.2.100 40000 8083\r\n"))
	}
	waitFor(t, "1 of 3 refused by max_handshakes_per_address", func() bool {
		return srv.Stats().Rejected["handshakes_pending_per_address"] == 1
	})
}

// TestHandshakeBoundsValidated checks that a negative bound is an error
// naming its key.
func TestHandshakeBoundsValidated(t *testing.T) {
	_, err := mqttd.New(mqttd.Options{Listeners: []mqttd.ListenerConfig{
		{Type: "tls", Address: "127.0.0.1:0", CertFile: "c", KeyFile: "k", MaxHandshakes: -1, MaxHandshakesPerAddress: -1},
	}})
	for _, key := range []string{"listeners[0].max_handshakes:", "listeners[0].max_handshakes_per_address:"} {
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("error %v does not name %s", err, key)
		}
	}
}

// TestWebSocketOriginCounted checks that a page refused for its origin is
// counted as websocket_origin.
func TestWebSocketOriginCounted(t *testing.T) {
	srv := listenAll(t, mqttd.Options{Listeners: []mqttd.ListenerConfig{{Type: "ws", Address: "127.0.0.1:0"}}})
	_, port, _ := net.SplitHostPort(srv.Addrs()[0].String())
	h := http.Header{"Origin": {"http://attacker.example:" + port}, "Host": {"attacker.example:" + port}}
	ws, resp, err := websocket.DefaultDialer.Dial("ws://"+srv.Addrs()[0].String()+"/mqtt", h)
	if err == nil {
		ws.Close()
		t.Fatal("a page whose name was rebound to 127.0.0.1 was let in")
	}
	if resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("upgrade: %v (%v), want 403", err, resp)
	}
	if got := srv.Stats().Rejected["websocket_origin"]; got != 1 {
		t.Fatalf("rejected[websocket_origin] = %d, want 1", got)
	}
}
