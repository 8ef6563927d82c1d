package listeners

import (
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// TestPendingCount checks that a WebSocket connection stops counting
// against MaxHandshakes once upgraded, refused or closed before its upgrade.
func TestPendingCount(t *testing.T) {
	l, err := Listen(Config{Type: WS, Address: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	url := "ws://" + l.Addr().String() + "/mqtt"
	settled := func(what string) {
		t.Helper()
		poll(t, what, func() bool { return l.pending.Load() == 0 })
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	ws, _, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	(<-accepted).Close()
	settled("upgraded")

	if _, resp, err := websocket.DefaultDialer.Dial(url, http.Header{"Origin": {"https://elsewhere.example"}}); err == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("foreign origin: %v %v", resp, err)
	}
	settled("refused")

	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	poll(t, "a connection before its upgrade to count", func() bool { return l.pending.Load() == 1 })
	c.Close()
	settled("closed before its upgrade")
}

// poll waits until cond holds, failing the test after 10 s.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}
