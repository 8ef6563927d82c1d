package listeners_test

import (
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"mqttd/listeners"
)

// refusals counts a listener's refusals by reason (Config.Refused).
type refusals struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *refusals) add(reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.n[reason]++
}

func (r *refusals) get(reason string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[reason]
}

// proxyLine is a PROXY v1 header naming client as the source.
func proxyLine(client string) []byte {
	return []byte(fmt.Sprintf("PROXY TCP4 %s 192.0.2.100 40000 8883\r\n", client))
}

// silentFlood opens n connections to addr that a PROXY header from this
// trusted loopback peer says come from client, and then say nothing,
// and waits until the listener has refused all but its per-address bound.
func silentFlood(t *testing.T, addr, client string, n int, r *refusals) {
	t.Helper()
	for range n {
		dialSend(t, addr, proxyLine(client))
	}
	want := n - listeners.DefaultMaxHandshakesPerAddress
	waitFor(t, fmt.Sprintf("%d of %d silent connections from %s refused", want, n, client), func() bool {
		return r.get(listeners.RefusedPerAddress) == want
	})
}

// acceptAll accepts from l until it closes, counting what it accepts
// under "accepted", and closes those at the end of the test.
func acceptAll(t *testing.T, l *listeners.Listener) *refusals {
	t.Helper()
	var got refusals
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			got.add("accepted")
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return &got
}

// TestHandshakesPerAddressTLS checks, at the default bounds, that 1,030
// connections from one address that never finish their TLS handshake
// leave room for 20 clients from another (before the bound per address,
// 1,024 of them held every slot).
func TestHandshakesPerAddressTLS(t *testing.T) {
	p := newPKI(t)
	var r refusals
	l := listen(t, listeners.Config{Type: listeners.TLS, TLS: p.tlsConfig(false), ProxyProtocol: true,
		ProxyTrusted: loopback, Refused: r.add})
	addr := l.Addr().String()
	got := acceptAll(t, l)
	silentFlood(t, addr, "192.0.2.1", 1030, &r)
	for i := range 20 {
		c := dialSend(t, addr, proxyLine("192.0.2.2"))
		cfg := p.clientTLS()
		cfg.ServerName = "127.0.0.1"
		tc := tls.Client(c, cfg)
		tc.SetDeadline(time.Now().Add(10 * time.Second))
		if err := tc.Handshake(); err != nil {
			t.Fatalf("client %d of 20: TLS handshake: %v", i+1, err)
		}
	}
	waitFor(t, "20 clients accepted", func() bool { return got.get("accepted") == 20 })
}

// TestHandshakesPerAddressWebSocket is TestHandshakesPerAddressTLS for
// WebSocket upgrades.
func TestHandshakesPerAddressWebSocket(t *testing.T) {
	var r refusals
	l := listen(t, listeners.Config{Type: listeners.WS, ProxyProtocol: true, ProxyTrusted: loopback, Refused: r.add})
	addr := l.Addr().String()
	got := acceptAll(t, l)
	silentFlood(t, addr, "192.0.2.1", 1030, &r)
	d := websocket.Dialer{Subprotocols: []string{"mqtt"}, HandshakeTimeout: 10 * time.Second,
		NetDial: func(network, a string) (net.Conn, error) {
			c, err := net.Dial(network, a)
			if err == nil {
				_, err = c.Write(proxyLine("192.0.2.2"))
			}
			return c, err
		}}
	for i := range 20 {
		ws, resp, err := d.Dial("ws://"+addr+"/mqtt", nil)
		if err != nil {
			t.Fatalf("client %d of 20: upgrade: %v (%v)", i+1, err, resp)
		}
		t.Cleanup(func() { ws.Close() })
	}
	waitFor(t, "20 clients accepted", func() bool { return got.get("accepted") == 20 })
}

// TestMaxHandshakes checks the listener's own bound, which loopback
// clients, not bounded per address, still meet.
func TestMaxHandshakes(t *testing.T) {
	var r refusals
	l := listen(t, listeners.Config{Type: listeners.WS, MaxHandshakes: 3, Refused: r.add})
	addr := l.Addr().String()
	for range 5 {
		dialSend(t, addr, nil)
	}
	waitFor(t, "2 of 5 refused", func() bool { return r.get(listeners.RefusedPending) == 2 })
	if n := r.get(listeners.RefusedPerAddress); n != 0 {
		t.Fatalf("%d loopback connections refused by the bound per address", n)
	}
}

// TestHandshakesPerAddressIPv6 checks that IPv6 clients are bounded by
// their /64, which one holder can fill with addresses, and not by more.
func TestHandshakesPerAddressIPv6(t *testing.T) {
	var r refusals
	l := listen(t, listeners.Config{Type: listeners.WS, ProxyProtocol: true, ProxyTrusted: loopback,
		MaxHandshakesPerAddress: 2, Refused: r.add})
	addr := l.Addr().String()
	header := func(client string) []byte {
		return []byte(fmt.Sprintf("PROXY TCP6 %s 2001:db8::100 40000 8083\r\n", client))
	}
	for _, client := range []string{"2001:db8:0:1::1", "2001:db8:0:1:ffff::2", "2001:db8:0:1::3"} {
		dialSend(t, addr, header(client))
	}
	waitFor(t, "the third from one /64 refused", func() bool { return r.get(listeners.RefusedPerAddress) == 1 })
	got := acceptAll(t, l)
	d := websocket.Dialer{Subprotocols: []string{"mqtt"}, HandshakeTimeout: 10 * time.Second,
		NetDial: func(network, a string) (net.Conn, error) {
			c, err := net.Dial(network, a)
			if err == nil {
				_, err = c.Write(header("2001:db8:0:2::1"))
			}
			return c, err
		}}
	ws, resp, err := d.Dial("ws://"+addr+"/mqtt", nil)
	if err != nil {
		t.Fatalf("a client of the next /64: %v (%v)", err, resp)
	}
	t.Cleanup(func() { ws.Close() })
	waitFor(t, "the client of the next /64 accepted", func() bool { return got.get("accepted") == 1 })
}
