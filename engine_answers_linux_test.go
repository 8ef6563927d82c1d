//go:build linux && !race

package mqttd_test

import (
	"bufio"
	"crypto/tls"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"mqttd"
	"mqttd/packets"
)

// TestDeliveriesBeforeAnswers checks that a reader lets the writers its
// deliveries started write before it writes its own client's PUBACK
// (yieldToWriters): the subscriber's PUBLISH reaches its socket first, by
// the kernel's receive timestamps. Over TCP the poller's readers answer;
// over TLS the connection's own reader, from the hook its read calls
// before it waits. On one core the order is the scheduler's to keep,
// which the race detector shuffles on purpose, so the test runs without
// it (hack/test runs it so).
func TestDeliveriesBeforeAnswers(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	cert, key := writeServerCert(t)
	pool := certPool(t, cert)
	for _, tc := range []struct {
		name string
		lc   mqttd.ListenerConfig
		tls  *tls.Config
	}{
		{"tcp", mqttd.ListenerConfig{Address: "127.0.0.1:0"}, nil},
		{"tls", mqttd.ListenerConfig{Type: "tls", Address: "127.0.0.1:0", CertFile: cert, KeyFile: key}, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := listenAll(t, mqttd.Options{Listeners: []mqttd.ListenerConfig{tc.lc}})
			addr := srv.Addrs()[0].String()
			sub := connectStamped(t, addr, tc.tls, "order-sub")
			sub.rc.send(&packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{{Filter: "order/t"}}})
			if _, ok := sub.rc.read().(*packets.Suback); !ok {
				t.Fatal("no SUBACK")
			}
			pub := connectStamped(t, addr, tc.tls, "order-pub")

			const msgs = 20
			late := 0
			for i := 1; i <= msgs; i++ {
				pub.rc.send(&packets.Publish{Topic: "order/t", QoS: 1, PacketID: uint16(i), Payload: []byte("reading")})
				delivered := sub.next(t, packets.TypePublish)
				acked := pub.next(t, packets.TypePuback)
				if !delivered.Before(acked) {
					late++
					t.Logf("message %d delivered %v after its PUBACK", i, delivered.Sub(acked))
				}
			}
			// The reader yields a bounded number of times; the scheduler's
			// fairness check may take all of them from it once in a while.
			if late > 2 {
				t.Errorf("%d of %d deliveries reached the subscriber after the publisher's PUBACK", late, msgs)
			}
		})
	}
}

// stampedConn is an MQTT client whose socket has the kernel timestamp
// each packet it receives.
type stampedConn struct {
	rc  *rawConn
	raw syscall.RawConn
}

// next reads the next packet, which must be of type want, and returns
// when the kernel received its first bytes: the zero time if it did not
// say. The time is peeked before the packet is read, so that a TLS
// client reads it as usual.
func (c stampedConn) next(t *testing.T, want packets.Type) time.Time {
	t.Helper()
	c.rc.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	var (
		buf     [1]byte
		oob     [128]byte
		oobn    int
		recvErr error
	)
	if err := c.raw.Read(func(fd uintptr) bool {
		_, oobn, _, _, recvErr = unix.Recvmsg(int(fd), buf[:], oob[:], unix.MSG_PEEK)
		return recvErr != unix.EAGAIN
	}); err != nil || recvErr != nil {
		t.Fatalf("waiting for a %s: %v %v", want, err, recvErr)
	}
	if p := c.rc.read(); p.Type() != want {
		t.Fatalf("got a %s, want a %s", p.Type(), want)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SO_TIMESTAMPNS && len(m.Data) >= int(unsafe.Sizeof(unix.Timespec{})) {
			ts := (*unix.Timespec)(unsafe.Pointer(&m.Data[0]))
			return time.Unix(int64(ts.Sec), int64(ts.Nsec))
		}
	}
	return time.Time{}
}

// connectStamped connects a 3.1.1 client, over TLS with tc, turns on
// receive timestamps and waits until the kernel gives them.
func connectStamped(t *testing.T, addr string, tc *tls.Config, id string) stampedConn {
	t.Helper()
	tcp, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tcp.Close() })
	nc := tcp
	if tc != nil {
		nc = tls.Client(tcp, tc)
	}
	rc := &rawConn{t: t, nc: nc, br: bufio.NewReader(nc), v: packets.V311}
	rc.send(&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V311, ClientID: id, CleanStart: true})
	if ack, ok := rc.read().(*packets.Connack); !ok || ack.ReasonCode != 0 {
		t.Fatalf("CONNACK: %+v", ack)
	}
	raw, err := tcp.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	}); err != nil || serr != nil {
		t.Fatalf("SO_TIMESTAMPNS: %v %v", err, serr)
	}
	c := stampedConn{rc: rc, raw: raw}
	// The kernel turns receive timestamps on a little after they are
	// first asked for: until then packets come without one. The pings
	// also take in what came before them (TLS session tickets).
	waitFor(t, "receive timestamps", func() bool {
		rc.send(&packets.Pingreq{})
		return !c.next(t, packets.TypePingresp).IsZero()
	})
	return c
}
