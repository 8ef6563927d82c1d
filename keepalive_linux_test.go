//go:build linux

package mqttd

import (
	"context"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"mqttd/packets"
)

// TestDeadPeerProbe checks that a client asking for no keepalive gets TCP
// keepalive probes on its socket, so that one that loses power without a
// FIN is eventually closed, and that a client with a keepalive gets none
// (the idle wheel closes it instead, without the setsockopt calls).
func TestDeadPeerProbe(t *testing.T) {
	s := newTestServer(t, Options{})
	// As Server.Listen opens it: Go's default turns TCP keepalive on for
	// every accepted connection.
	l, err := (&net.ListenConfig{KeepAlive: -1}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AddListener("test", l); err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	for _, keepAlive := range []uint16{0, 60} {
		nc, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		b, _ := (&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V311, CleanStart: true,
			ClientID: "probe", KeepAlive: keepAlive}).Append(nil, packets.V311)
		nc.Write(b)
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := nc.Read(make([]byte, 4)); err != nil {
			t.Fatal(err)
		}
		var server *conn
		s.mu.Lock()
		for c := range s.conns {
			if c.info.Remote.String() == nc.LocalAddr().String() {
				server = c
			}
		}
		s.mu.Unlock()
		if server == nil {
			t.Fatal("the server side of the connection not found")
		}
		if server.ev == nil || !server.ev.Acquire() {
			t.Fatal("the server side of the connection is not served by the poller")
		}
		fd := server.ev.Num()
		on, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE)
		idle, _ := unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE)
		server.ev.Release()
		switch {
		case keepAlive == 0 && (on != 1 || idle != int(deadPeerProbe.Idle/time.Second)):
			t.Errorf("keepalive 0: SO_KEEPALIVE %d, TCP_KEEPIDLE %d s; want 1, %d", on, idle, deadPeerProbe.Idle/time.Second)
		case keepAlive != 0 && on != 0:
			t.Errorf("keepalive %d: SO_KEEPALIVE is on", keepAlive)
		}
	}
}
