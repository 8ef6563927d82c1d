package main

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// socketPair returns the two ends of a loopback TCP connection, closed
// when the test ends.
func socketPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ln.Accept()
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(); a.Close() })
	return a, b
}

// socketClient returns a client over one end of a loopback TCP connection
// and the other end, standing for the broker, with a deadline on both. A
// socket, not net.Pipe: the publisher writes before it reads, as it does
// against a broker, and a pipe would block it until the other end read.
func socketClient(t *testing.T) (*client, net.Conn) {
	t.Helper()
	cl, broker := socketPair(t)
	deadline := time.Now().Add(5 * time.Second)
	if err := broker.SetDeadline(deadline); err != nil {
		t.Fatal(err)
	}
	if err := cl.SetDeadline(deadline); err != nil {
		t.Fatal(err)
	}
	return &client{conn: cl, fr: newFrameReader(cl, 256), w: bufio.NewWriterSize(cl, 256)}, broker
}

// exchange writes send to conn and asserts that want comes back.
func exchange(t *testing.T, conn net.Conn, send, want []byte) {
	t.Helper()
	if _, err := conn.Write(send); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if _, err := io.ReadFull(conn, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("sent % x, got back % x, want % x", send, got, want)
	}
}

func TestSubscriberRunsReceiverFlows(t *testing.T) {
	c, broker := socketClient(t)
	s := &subscriber{c: c, start: time.Now()}
	done := make(chan struct{})
	go func() {
		s.run()
		close(done)
	}()
	q0, q1, q2 := newPublishTemplate("t", 0, 8), newPublishTemplate("t", 1, 8), newPublishTemplate("t", 2, 8)
	exchange(t, broker, q2.appendFrame(nil, 5, 0), []byte{0x50, 2, 0, 5})      // PUBREC
	exchange(t, broker, []byte{0x62, 2, 0, 5}, []byte{0x70, 2, 0, 5})          // PUBREL -> PUBCOMP
	exchange(t, broker, q1.appendFrame(nil, 0x0107, 0), []byte{0x40, 2, 1, 7}) // PUBACK
	// QoS 0 has no answer; the PUBREL after it shows it was read.
	exchange(t, broker, append(q0.appendFrame(nil, 0, 0), 0x62, 2, 0, 9), []byte{0x70, 2, 0, 9})
	s.stop()
	<-done
	if s.err != nil {
		t.Fatal(s.err)
	}
	if n := s.count.Load(); n != 3 {
		t.Errorf("counted %d messages, want 3", n)
	}
}

// TestPublisherQoS2Window plays a broker that answers every QoS 2 PUBLISH
// and checks the window, the packet ids and the order of the flow.
func TestPublisherQoS2Window(t *testing.T) {
	const window, n = 2, 5
	c, broker := socketClient(t)
	p := &publisher{c: c, qos: 2, n: n, window: window, frames: []publishTemplate{newPublishTemplate("t", 2, 8)}, start: time.Now()}
	errc := make(chan error, 1)
	go func() { errc <- p.run() }()

	fr := newFrameReader(broker, 256)
	inflight := map[uint16]bool{}
	received, released := 0, 0
	for {
		f, err := fr.next()
		if err != nil {
			t.Fatalf("after %d PUBLISH and %d PUBREL: %v", received, released, err)
		}
		var reply []byte
		switch f.typ {
		case typePublish:
			pf, err := parsePublish(f)
			if err != nil {
				t.Fatal(err)
			}
			if pf.qos != 2 || pf.id == 0 || pf.id > window || inflight[pf.id] {
				t.Fatalf("PUBLISH qos %d id %d with %v in flight", pf.qos, pf.id, inflight)
			}
			inflight[pf.id] = true
			received++
			reply = appendAck(nil, typePubrec, pf.id)
		case typePubrel:
			id, _ := packetID(f)
			if !inflight[id] || f.flags != 0x02 {
				t.Fatalf("PUBREL id %d flags %#x with %v in flight", id, f.flags, inflight)
			}
			delete(inflight, id)
			released++
			reply = appendAck(nil, typePubcomp, id)
		case typePingreq:
			if received != n || released != n {
				t.Fatalf("PINGREQ after %d PUBLISH and %d PUBREL, want %d of each", received, released, n)
			}
			reply = []byte{typePingresp << 4, 0}
		default:
			t.Fatalf("unexpected packet type %d", f.typ)
		}
		if _, err := broker.Write(reply); err != nil {
			t.Fatal(err)
		}
		if f.typ == typePingreq {
			break
		}
	}
	if err := <-errc; err != nil {
		t.Fatalf("publisher: %v", err)
	}
}

// TestPublisherRefusesDuplicateAck answers the first PUBLISH of a QoS 1
// window twice: the second PUBACK is for an id already free again, which
// the publisher must report rather than reuse the id twice.
func TestPublisherRefusesDuplicateAck(t *testing.T) {
	c, broker := socketClient(t)
	p := &publisher{c: c, qos: 1, n: 5, window: 2, frames: []publishTemplate{newPublishTemplate("t", 1, 8)}, start: time.Now()}
	errc := make(chan error, 1)
	go func() { errc <- p.run() }()

	f, err := newFrameReader(broker, 256).next()
	if err != nil {
		t.Fatal(err)
	}
	pf, err := parsePublish(f)
	if err != nil {
		t.Fatal(err)
	}
	ack := appendAck(nil, typePuback, pf.id)
	if _, err := broker.Write(append(ack, ack...)); err != nil {
		t.Fatal(err)
	}
	err = <-errc
	if err == nil || !strings.Contains(err.Error(), "not expected") {
		t.Fatalf("publisher returned %v after a duplicate PUBACK, want its refusal", err)
	}
}

// TestPublisherTimesAcks plays a broker that answers a QoS 1 window. The
// timer's clock starts an hour back, so a latency measured from the start
// rather than from the flush that sent the message shows as an hour.
func TestPublisherTimesAcks(t *testing.T) {
	const window, n = 3, 10
	c, broker := socketClient(t)
	p := &publisher{c: c, qos: 1, n: n, window: window, frames: []publishTemplate{newPublishTemplate("t", 1, 8)},
		start: time.Now(), acks: newAckTimer(time.Now().Add(-time.Hour), window, n)}
	errc := make(chan error, 1)
	go func() { errc <- p.run() }()
	fr := newFrameReader(broker, 256)
	for {
		f, err := fr.next()
		if err != nil {
			t.Fatal(err)
		}
		reply := []byte{typePingresp << 4, 0}
		if f.typ == typePublish {
			pf, err := parsePublish(f)
			if err != nil {
				t.Fatal(err)
			}
			reply = appendAck(nil, typePuback, pf.id)
		}
		if _, err := broker.Write(reply); err != nil {
			t.Fatal(err)
		}
		if f.typ == typePingreq {
			break
		}
	}
	if err := <-errc; err != nil {
		t.Fatalf("publisher: %v", err)
	}
	if len(p.acks.lat) != n {
		t.Fatalf("timed %d acknowledgements, want %d", len(p.acks.lat), n)
	}
	for i, l := range p.acks.lat {
		if l < 0 || l > time.Minute {
			t.Errorf("acknowledgement %d took %v: not from its flush to its read", i, l)
		}
	}
}
