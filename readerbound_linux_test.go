//go:build linux

package mqttd

import (
	"net"
	"strings"
	"testing"
	"time"

	"mqttd/auth"
	"mqttd/packets"
)

// holdAuth keeps the reader of a client whose identifier starts with
// "hold" in Authenticate until release is closed, telling held first.
type holdAuth struct {
	held    chan string
	release chan struct{}
}

func (h *holdAuth) Authenticate(ci auth.ClientInfo, _ []byte) error {
	if strings.HasPrefix(ci.ClientID, "hold") {
		h.held <- ci.ClientID
		<-h.release
	}
	return nil
}

// TestReaderPoolBound checks that no more than the pool's bound of reader
// goroutines run at once: with two readers both held (in an
// Authenticator), a third connection's CONNECT waits, is counted in
// ReaderWaits, and is answered by the first reader that is let go.
func TestReaderPoolBound(t *testing.T) {
	h := &holdAuth{held: make(chan string, 2), release: make(chan struct{})}
	s, addr := startTestServer(t, Options{Authenticator: h}, func(s *Server) { s.readers.max = 2 })
	released := false
	defer func() {
		if !released {
			close(h.release)
		}
	}()
	connect := func(id string) net.Conn {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		writePacket(t, nc, &packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V311, CleanStart: true, ClientID: id}, packets.V311)
		return nc
	}
	held := []net.Conn{connect("hold1"), connect("hold2")}
	for range 2 {
		select {
		case <-h.held:
		case <-time.After(10 * time.Second):
			t.Fatal("the two CONNECTs did not both reach the Authenticator")
		}
	}
	free := connect("free")
	waitUntil(t, "the third connection to wait for a reader", func() bool { return s.Stats().ReaderWaits == 1 })
	p := s.readers
	p.mu.Lock()
	readers, waiting := p.readers, len(p.waiting)-p.head
	p.mu.Unlock()
	if readers != 2 || waiting != 1 {
		t.Errorf("%d readers with %d connections waiting, want 2 and 1", readers, waiting)
	}
	close(h.release)
	released = true
	for _, nc := range append(held, free) {
		if got := readFull(t, nc, 4); string(got) != "\x20\x02\x00\x00" {
			t.Errorf("client got % x, want CONNACK 0", got)
		}
	}
	p.mu.Lock()
	readers, waiting = p.readers, len(p.waiting)-p.head
	p.mu.Unlock()
	if readers > 2 || waiting != 0 {
		t.Errorf("%d readers with %d connections waiting after all were answered, want at most 2 and none", readers, waiting)
	}
}
