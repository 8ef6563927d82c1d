//go:build linux && !race

package mqttd_test

import (
	"net"
	"runtime"
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
// the kernel's receive timestamps. On one core the order is the
// scheduler's to keep, which the race detector shuffles on purpose, so
// the test runs without it (hack/test runs it so).
func TestDeliveriesBeforeAnswers(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	_, addr := startServer(t, mqttd.Options{})
	sub := connectRaw(t, addr, &packets.Connect{ClientID: "order-sub", CleanStart: true})
	sub.send(&packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{{Filter: "order/t"}}})
	if _, ok := sub.read().(*packets.Suback); !ok {
		t.Fatal("no SUBACK")
	}
	pub := connectRaw(t, addr, &packets.Connect{ClientID: "order-pub", CleanStart: true})
	stampReceives(t, sub.nc)
	stampReceives(t, pub.nc)
	// The kernel turns receive timestamps on a little after they are
	// first asked for: until then packets come without one.
	for _, rc := range []*rawConn{sub, pub} {
		waitFor(t, "receive timestamps", func() bool {
			rc.send(&packets.Pingreq{})
			return !receiveStamped(t, rc.nc, packets.TypePingresp).IsZero()
		})
	}

	const msgs = 20
	late := 0
	for i := 1; i <= msgs; i++ {
		pub.send(&packets.Publish{Topic: "order/t", QoS: 1, PacketID: uint16(i), Payload: []byte("reading")})
		delivered := receiveStamped(t, sub.nc, packets.TypePublish)
		acked := receiveStamped(t, pub.nc, packets.TypePuback)
		if delivered.IsZero() || acked.IsZero() {
			t.Fatalf("message %d: a receive without a timestamp", i)
		}
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
}

// stampReceives has the kernel timestamp each packet nc receives.
func stampReceives(t *testing.T, nc net.Conn) {
	t.Helper()
	raw, err := nc.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	}); err != nil || serr != nil {
		t.Fatalf("SO_TIMESTAMPNS: %v %v", err, serr)
	}
}

// receiveStamped reads one whole frame of type want from nc, which must
// have arrived alone, and returns when the kernel received its first
// bytes: the zero time if it did not say.
func receiveStamped(t *testing.T, nc net.Conn, want packets.Type) time.Time {
	t.Helper()
	raw, err := nc.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	var (
		buf        [512]byte
		oob        [128]byte
		n, oobn    int
		recvErr    error
		stamp      time.Time
		frameBytes int
	)
	for {
		err := raw.Read(func(fd uintptr) bool {
			var m int
			m, oobn, _, _, recvErr = unix.Recvmsg(int(fd), buf[n:], oob[:], 0)
			if recvErr == unix.EAGAIN {
				return false
			}
			n += max(m, 0)
			return true
		})
		if err != nil || recvErr != nil {
			t.Fatalf("reading a %s: %v %v", want, err, recvErr)
		}
		if stamp.IsZero() {
			stamp = timestampOf(t, oob[:oobn])
		}
		if frameBytes == 0 && n >= 2 {
			fh, hn, err := packets.ParseFixedHeader(buf[:n], packets.V311, 0)
			if err != nil {
				t.Fatalf("reading a %s: %v", want, err)
			}
			if hn > 0 {
				if fh.Type != want {
					t.Fatalf("got a %s, want a %s", fh.Type, want)
				}
				frameBytes = hn + fh.Remaining
			}
		}
		switch {
		case frameBytes > 0 && n == frameBytes:
			return stamp
		case frameBytes > 0 && n > frameBytes:
			t.Fatalf("a %s came with %d more bytes", want, n-frameBytes)
		}
	}
}

func timestampOf(t *testing.T, oob []byte) time.Time {
	t.Helper()
	msgs, err := unix.ParseSocketControlMessage(oob)
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
