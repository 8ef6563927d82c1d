package listeners

import (
	"context"
	"testing"
	"time"
)

// TestDialSubprotocol checks that a dialed WebSocket offers "mqtt": a
// Listener picks it only when offered [MQTT-6.0.0-3], [MQTT-6.0.0-4].
func TestDialSubprotocol(t *testing.T) {
	l, err := Listen(Config{Type: WS, Address: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, err := Dial(ctx, WS, l.Addr().String(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	wc, ok := nc.(*wsConn)
	if !ok {
		t.Fatalf("ws dial gave a %T, want *wsConn", nc)
	}
	if got := wc.ws.Subprotocol(); got != "mqtt" {
		t.Fatalf("subprotocol %q, want mqtt", got)
	}
}
