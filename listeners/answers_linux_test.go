//go:build linux

package listeners_test

import (
	"bytes"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"mqttd/listeners"
)

// window is 100 QoS 1 PUBLISHes (ids 1 to 100) in one buffer: what a
// client with a window of 100 sends in one go. Each frame is 64 bytes, so
// that the frames end where the engine's 512-byte read buffer does, and
// it is empty, before a read, every 8 frames.
func window() []byte {
	var b []byte
	payload := bytes.Repeat([]byte{'x'}, 64-7)
	for id := 1; id <= 100; id++ {
		b = append(b, 0x32, byte(2+1+2+len(payload)), 0, 1, 'a', 0, byte(id))
		b = append(b, payload...)
	}
	return b
}

// checkAnswers checks that answers holds the CONNACK of connectPacket and
// then the PUBACKs of window, in order.
func checkAnswers(t *testing.T, answers []byte) {
	t.Helper()
	if got := answers[:len(connackPacket)]; !bytes.Equal(got, connackPacket) {
		t.Fatalf("CONNACK % x, want % x", got, connackPacket)
	}
	acks := answers[len(connackPacket):]
	for id := 1; id <= 100; id++ {
		if got, want := acks[4*(id-1):4*id], []byte{0x40, 2, 0, byte(id)}; !bytes.Equal(got, want) {
			t.Fatalf("PUBACK %d: % x, want % x", id, got, want)
		}
	}
}

// answersSize is the size of the CONNACK and the 100 PUBACKs.
var answersSize = len(connackPacket) + 4*100

// burstConn, once holding, keeps what is written to it until flush writes
// it all to the socket at once: a client's messages or records, each a
// write of its own, are all in the broker's receive queue before it reads
// the first.
type burstConn struct {
	net.Conn
	holding bool
	held    []byte
}

func (c *burstConn) Write(b []byte) (int, error) {
	if !c.holding {
		return c.Conn.Write(b)
	}
	c.held = append(c.held, b...)
	return len(b), nil
}

func (c *burstConn) flush() error {
	_, err := c.Conn.Write(c.held)
	c.held, c.holding = nil, false
	return err
}

// TestWebSocketAnswersWindowInOneMessage sends a CONNECT and a window of
// QoS 1 PUBLISHes as WebSocket messages of 8 frames, all in one TCP
// write, and counts the messages its answers come in. The engine reads a
// message's bytes through a buffer of its own and answered whenever it
// was empty: one message of answers per 8 PUBLISHes (13) while the socket
// held the rest of the window. The CONNECT goes in the same write: a
// writer goroutine still running from an earlier answer (the CONNACK,
// were it read first) writes what the reader queues as it comes, which on
// a busy machine split the PUBACKs over several messages.
func TestWebSocketAnswersWindowInOneMessage(t *testing.T) {
	_, addr := startBroker(t, listeners.Config{Type: listeners.WS})
	ws := dialWS(t, "ws://"+addr+"/mqtt", nil)
	// Client frames are masked; a zero key leaves the payload as it is.
	frames := append([]byte{0x82, 0x80 | byte(len(connectPacket)), 0, 0, 0, 0}, connectPacket...)
	for w := window(); len(w) > 0; {
		n := min(len(w), 512)
		frames = append(frames, 0x82, 0x80|126, byte(n>>8), byte(n), 0, 0, 0, 0)
		frames = append(frames, w[:n]...)
		w = w[n:]
	}
	if _, err := ws.NetConn().Write(frames); err != nil {
		t.Fatal(err)
	}
	ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	var answers []byte
	messages := 0
	for len(answers) < answersSize {
		_, b, err := ws.ReadMessage()
		if err != nil {
			t.Fatalf("after %d bytes of answers in %d messages: %v", len(answers), messages, err)
		}
		answers = append(answers, b...)
		messages++
	}
	checkAnswers(t, answers)
	if messages > 2 {
		t.Errorf("CONNACK and 100 PUBACKs came in %d WebSocket messages, want 1 (2 at most)", messages)
	}
}

// TestTLSAnswersWindowInOneRecord does the same over TLS with 13 records
// of 8 frames after the CONNECT's, counting the records the answers come
// in (a read of a tls.Conn returns one record). crypto/tls reads ahead
// what the socket holds, so only the socket can tell that the client has
// sent nothing more.
func TestTLSAnswersWindowInOneRecord(t *testing.T) {
	p := newPKI(t)
	_, addr := startBroker(t, listeners.Config{Type: listeners.TLS, TLS: p.tlsConfig(false)})
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	raw.SetDeadline(time.Now().Add(10 * time.Second))
	burst := &burstConn{Conn: raw}
	c := tls.Client(burst, &tls.Config{RootCAs: p.pool, ServerName: "127.0.0.1"})
	if err := c.Handshake(); err != nil {
		t.Fatal(err)
	}
	burst.holding = true
	if _, err := c.Write(connectPacket); err != nil {
		t.Fatal(err)
	}
	for w := window(); len(w) > 0; w = w[min(len(w), 512):] {
		if _, err := c.Write(w[:min(len(w), 512)]); err != nil {
			t.Fatal(err)
		}
	}
	if err := burst.flush(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	var answers []byte
	records := 0
	for len(answers) < answersSize {
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("after %d bytes of answers in %d records: %v", len(answers), records, err)
		}
		answers = append(answers, buf[:n]...)
		records++
	}
	checkAnswers(t, answers)
	if records > 2 {
		t.Errorf("CONNACK and 100 PUBACKs came in %d TLS records, want 1 (2 at most)", records)
	}
}
