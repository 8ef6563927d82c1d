//go:build linux

package mqttd

import (
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"mqttd/auth"
	"mqttd/packets"
)

// ackProbe is an Authorizer that, when asked about the PUBLISH numbered
// at (1-based, topics under pipe/), reads on the client's side of the
// connection what the broker has written so far and reports its length.
// It runs on the reader, in the middle of the read of every PUBLISH.
type ackProbe struct {
	at     int64
	calls  atomic.Int64
	client atomic.Pointer[net.Conn]
	seen   chan int
}

func (p *ackProbe) Authorize(_ auth.ClientInfo, r auth.Request) bool {
	if r.Action != auth.Publish || !strings.HasPrefix(r.Topic, "pipe/") || p.calls.Add(1) != p.at {
		return true
	}
	nc := *p.client.Load()
	buf := make([]byte, 4*p.at)
	nc.SetReadDeadline(time.Now().Add(2 * time.Second))
	n, _ := io.ReadAtLeast(nc, buf, 4*pipeFrames)
	nc.SetReadDeadline(time.Time{})
	p.seen <- n
	return true
}

// hiddenListener hides its connections' descriptors, so that the engine
// serves each with a reader goroutine, as it does TLS and WebSocket.
type hiddenListener struct{ net.Listener }

func (l hiddenListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return struct{ net.Conn }{c}, nil
}

// TestReaderAnswersMidRead checks that a reader handling a read of many
// QoS 1 PUBLISHes writes the PUBACKs of the first pipeFrames before it
// goes on with the rest: the client then works on them while the broker
// handles the others. Both readers: the poller's and a goroutine's.
func TestReaderAnswersMidRead(t *testing.T) {
	t.Run("poller", func(t *testing.T) { testReaderAnswersMidRead(t, false) })
	t.Run("goroutine", func(t *testing.T) { testReaderAnswersMidRead(t, true) })
}

func testReaderAnswersMidRead(t *testing.T, hide bool) {
	const msgs = 2*pipeFrames + 20
	probe := &ackProbe{at: pipeFrames + 10, seen: make(chan int, 1)}
	var wrap []func(net.Listener) net.Listener
	if hide {
		wrap = append(wrap, func(l net.Listener) net.Listener { return hiddenListener{l} })
	}
	_, addr := startTestServer(t, Options{Authorizer: probe}, nil, wrap...)
	nc := boundTestConn(t, addr, "pipe")
	expectConnack(t, nc)
	probe.client.Store(&nc)
	var b []byte
	for i := range msgs {
		var err error
		b, err = (&packets.Publish{QoS: 1, PacketID: uint16(i + 1), Topic: fmt.Sprint("pipe/", i), Payload: []byte("x")}).Append(b, packets.V311)
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := nc.Write(b); err != nil { // one write: very likely one read
		t.Fatal(err)
	}
	var early int
	select {
	case early = <-probe.seen:
	case <-time.After(10 * time.Second):
		t.Fatal("the Authorizer was not asked about the probed PUBLISH")
	}
	if early < 4*pipeFrames {
		t.Errorf("%d bytes of PUBACKs written before PUBLISH %d was handled, want those of the first %d (%d bytes)",
			early, probe.at, pipeFrames, 4*pipeFrames)
	}
	if rest := readFull(t, nc, 4*msgs-early); len(rest) != 4*msgs-early {
		t.Errorf("got %d bytes of PUBACKs in all, want %d", early+len(rest), 4*msgs)
	}
}
