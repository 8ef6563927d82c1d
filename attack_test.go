package mqttd_test

import (
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"mqttd"
	"mqttd/packets"
)

// The tests here run memory attacks against a broker at its default
// settings and check that its heap grows by less than attackHeapBound at
// the peak of each attack, while an ordinary client is still served. The
// attacking clients are in the same process, so they hold as little heap
// as they can: one payload buffer built once and reused, raw sockets, and
// nothing read from a socket that is meant never to read.

// closedSince returns the connections the broker closed since base, by
// reason, leaving out the reasons with none.
func closedSince(base, now mqttd.Stats) map[string]uint64 {
	out := map[string]uint64{}
	for r, n := range now.Disconnects {
		if d := n - base.Disconnects[r]; d > 0 {
			out[r] = d
		}
	}
	return out
}

// dialStuckSubscriber connects a 3.1.1 clean session with a small receive
// buffer, subscribes to topic at QoS 1, reads the CONNACK and SUBACK into
// a stack array and then never reads again.
func dialStuckSubscriber(t *testing.T, addr, id, topic string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	if err := nc.(*net.TCPConn).SetReadBuffer(4096); err != nil {
		t.Fatal(err)
	}
	out, _ := (&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V311, CleanStart: true,
		ClientID: id}).Append(nil, packets.V311)
	out, _ = (&packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{
		{Filter: topic, Options: packets.SubOptions{QoS: 1}}}}).Append(out, packets.V311)
	if _, err := nc.Write(out); err != nil {
		t.Fatal(err)
	}
	var in [4 + 5]byte // CONNACK, then a one-filter SUBACK
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(nc, in[:]); err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	if want := [...]byte{0x20, 2, 0, 0, 0x90, 3, 0, 1, 1}; in != want {
		t.Fatalf("%s: CONNACK and SUBACK % x, want % x", id, in, want)
	}
	return nc
}

// TestAttackNonReadingSubscribers: 200 subscribers that never read, and
// 8 messages of 1 MiB at QoS 1 for all of them. What the broker keeps per
// subscriber (outbox frames, queue) must not add up to a copy of every
// message for every subscriber. The heap is measured after each message
// and the attack stops early once the bound is passed.
func TestAttackNonReadingSubscribers(t *testing.T) {
	const subscribers, messages = 200, 8
	start := time.Now()
	// Copying a 1 MiB message into 200 outboxes takes seconds under
	// -race on a busy machine, while the publisher's next one waits in
	// its socket: the frame timeout (30 s) is not what is measured.
	srv, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{FrameTimeout: 2 * time.Minute}})
	payload, buf := payloadOf(bigPayload), encodeBuf()
	conns := make([]net.Conn, 0, subscribers)
	heap := attackBaseline(t, addr)
	base := srv.Stats()

	t.Cleanup(func() {
		if t.Failed() { // why the broker closed what it closed, the publisher's connection say
			t.Logf("connections closed during the test, by reason: %v", closedSince(base, srv.Stats()))
		}
	})
	for i := range subscribers {
		conns = append(conns, dialStuckSubscriber(t, addr, fmt.Sprintf("stuck-%03d", i), "flood"))
	}
	pub := newPublisher(t, addr, packets.V311, "flooder", buf)
	// Each PUBACK follows a message copied into 200 outboxes: seconds
	// under -race on a busy machine, which is not what is measured.
	pub.rc.wait = time.Minute
	sent := 0
	for sent < messages {
		pub.publish(&packets.Publish{Topic: "flood", QoS: 1, Payload: payload})
		sent++
		// A broker that copies every message for every subscriber takes
		// seconds per message (far more under -race): once the bound is
		// passed, the rest of the attack would prove nothing more.
		if g := heap.growth(); sent < messages && g > attackHeapBound {
			t.Logf("attack stopped after %d of %d messages: the heap already grew by %.1f MB; outboxes %d, queued %d", sent, messages, mb(g), srv.Stats().OutboxBytes, srv.Stats().QueuedBytes)
			break
		}
	}
	// Every PUBACK came after the message was routed: each delivery is in
	// an outbox or a session queue now, unless the broker closed stuck
	// subscribers (or dropped their copies) to defend itself.
	waitFor(t, "every delivery taken in", func() bool {
		st := srv.Stats()
		var dropped uint64
		for r, n := range st.Dropped {
			dropped += n - base.Dropped[r]
		}
		return st.MessagesSent-base.MessagesSent+uint64(st.Queued)+dropped >= uint64(subscribers*sent) ||
			st.Connections < base.Connections+subscribers+1
	})
	st := srv.Stats()
	t.Logf("at the peak (%v): %d deliveries in outboxes, %d queued (%.1f MB), %d bytes written, %d connections, closed %v",
		time.Since(start).Round(time.Millisecond), st.MessagesSent-base.MessagesSent, st.Queued, mb(st.QueuedBytes),
		st.BytesSent-base.BytesSent, st.Connections, closedSince(base, st))
	heap.check(fmt.Sprintf("200 non-reading subscribers, %d x 1 MiB", sent), attackHeapBound)

	ordinaryExchange(t, addr, "during")
	if st := srv.Stats(); st.Connections < base.Connections+subscribers+1 {
		t.Logf("the broker closed %d of the attack's connections: %v", base.Connections+subscribers+1-st.Connections,
			closedSince(base, st))
	}

	closeAll(conns)
	pub.rc.nc.Close()
	waitConnections(t, srv, base.Connections)
	ordinaryExchange(t, addr, "after")
	heap.log("after the attack's connections closed")
	t.Logf("took %v", time.Since(start).Round(time.Millisecond))
	runtime.KeepAlive(payload)
	runtime.KeepAlive(pub)
}

// TestAttackOfflineSessionQueue: 200 messages of 1 MiB at QoS 1 for one
// offline persistent session.
func TestAttackOfflineSessionQueue(t *testing.T) {
	const messages = 200
	start := time.Now()
	srv, addr := startServer(t, mqttd.Options{})
	payload, buf := payloadOf(bigPayload), encodeBuf()
	heap := attackBaseline(t, addr)
	base := srv.Stats()

	offlineSubscriber(t, addr, "victim", "flood")
	pub := newPublisher(t, addr, packets.V311, "flooder", buf)
	for range messages {
		pub.publish(&packets.Publish{Topic: "flood", QoS: 1, Payload: payload})
	}
	st := srv.Stats()
	t.Logf("at the peak: %d queued (%.1f MB), %d dropped as queue_full", st.Queued, mb(st.QueuedBytes),
		st.Dropped["queue_full"]-base.Dropped["queue_full"])
	heap.check("offline session, 200 x 1 MiB", attackHeapBound)

	ordinaryExchange(t, addr, "during")

	pub.rc.nc.Close()
	waitConnections(t, srv, base.Connections)
	ordinaryExchange(t, addr, "after")
	heap.log("after the publisher left (the queue is still held)")
	// The victim comes back with a clean session: its queue goes.
	back := connectRawSession(t, addr, "victim", true, false)
	back.send(&packets.Disconnect{})
	back.expectClosed()
	waitFor(t, "the queue dropped", func() bool { return srv.Stats().Queued == 0 })
	heap.log("after the victim dropped its session")
	t.Logf("took %v", time.Since(start).Round(time.Millisecond))
	runtime.KeepAlive(payload)
	runtime.KeepAlive(pub)
}

// TestAttackExpiringSessions: 1000 5.0 sessions that expire after a second
// offline, each subscribed to exp/# at QoS 1, and 400 small messages
// queued for each. At the peak the heap stays under the bound; once the
// sessions expire, the broker gives back what they held.
func TestAttackExpiringSessions(t *testing.T) {
	const sessions, messages = 1000, 400
	start := time.Now()
	srv, addr := startServer(t, mqttd.Options{})
	heap := attackBaseline(t, addr)
	base := srv.Stats()
	pub := newPublisher(t, addr, packets.V311, "flooder", nil)

	offlineSessions(t, srv, addr, "exp", "exp/#", sessions, 1)
	connected := time.Since(start)

	// All 400 publishes in one write, then their PUBACKs.
	var out []byte
	for i := range messages {
		out, _ = (&packets.Publish{Topic: "exp/x", QoS: 1, PacketID: uint16(i + 1), Payload: []byte("tiny")}).
			Append(out, packets.V311)
	}
	pub.rc.write(out)
	for i := range messages {
		if ack, ok := pub.rc.read().(*packets.Puback); !ok || ack.PacketID != uint16(i+1) {
			t.Fatalf("publish %d: got %+v, want its PUBACK", i+1, ack)
		}
	}
	st := srv.Stats()
	t.Logf("at the peak (%v after the first connect): %d sessions, %d expired, %d queued (%.2f MB counted)",
		time.Since(start).Round(time.Millisecond), st.Sessions, st.SessionsExpired-base.SessionsExpired, st.Queued, mb(st.QueuedBytes))
	if st.SessionsExpired > base.SessionsExpired {
		t.Logf("%d sessions expired before the peak was measured (connecting took %v): the peak is below the full %d x %d",
			st.SessionsExpired-base.SessionsExpired, connected.Round(time.Millisecond), sessions, messages)
	}
	heap.check("1000 expiring sessions, 400 messages queued each", attackHeapBound)
	ordinaryExchange(t, addr, "during")
	t.Logf("sessions expired by the end of the ordinary exchange: %d", srv.Stats().SessionsExpired-base.SessionsExpired)

	waitFor(t, "the sessions expired", func() bool {
		st := srv.Stats()
		return st.SessionsExpired-base.SessionsExpired >= sessions && st.Queued == 0
	})
	heap.check("after the sessions expired", 8<<20)
	ordinaryExchange(t, addr, "after")
	t.Logf("took %v", time.Since(start).Round(time.Millisecond))
}

// attackRetainedStore runs TestAttackRetainedStore's attack on a broker
// with opts; what names the broker in the log.
func attackRetainedStore(t *testing.T, opts mqttd.Options, what string) {
	const messages = 200
	start := time.Now()
	srv, addr := startServer(t, opts)
	payload, buf := payloadOf(bigPayload), encodeBuf()
	heap := attackBaseline(t, addr)
	base := srv.Stats()

	pub := newPublisher(t, addr, packets.V5, "retainer", buf)
	codes := map[packets.ReasonCode]int{}
	for i := range messages {
		code := pub.publish(&packets.Publish{Topic: fmt.Sprintf("big/%03d", i), QoS: 1, Retain: true, Payload: payload})
		switch code {
		case packets.Success, packets.NoMatchingSubscribers, packets.QuotaExceeded:
			codes[code]++
		default:
			t.Fatalf("retained message %d: PUBACK %#x", i, byte(code))
		}
	}
	st := srv.Stats()
	t.Logf("at the peak: %d retained (%.1f MB counted), %d refused; PUBACK codes %v",
		st.Retained, mb(st.RetainedBytes), st.RetainedRefused-base.RetainedRefused, codes)
	heap.check("200 retained messages of 1 MiB"+what, attackHeapBound)

	ordinaryExchange(t, addr, "during")
	// Clearing them gives the store back.
	for i := range messages {
		pub.publish(&packets.Publish{Topic: fmt.Sprintf("big/%03d", i), QoS: 1, Retain: true})
	}
	pub.rc.nc.Close()
	waitConnections(t, srv, base.Connections)
	if st := srv.Stats(); st.Retained != base.Retained {
		t.Errorf("%d retained after clearing, want %d", st.Retained, base.Retained)
	}
	ordinaryExchange(t, addr, "after")
	heap.check("after the retained messages were cleared"+what, retainedResidue)
	t.Logf("took %v", time.Since(start).Round(time.Millisecond))
	runtime.KeepAlive(payload)
	runtime.KeepAlive(pub)
}

// TestAttackSlowloris: 100 connections without keepalive, each sending a
// PUBLISH of the default maximum packet size but its last 10 bytes, which
// never come.
func TestAttackSlowloris(t *testing.T) {
	const conns, missing = 100, 10
	start := time.Now()
	srv, addr := startServer(t, mqttd.Options{})

	topic := "slow"
	frameSize := mqttd.Options{}.WithDefaults().Limits.MaxPacketSize
	// 1 byte of type, 4 of remaining length (3 up to 2 MiB), 2 of topic
	// length.
	head := 7
	if frameSize <= 2<<20 {
		head = 6
	}
	frame, err := (&packets.Publish{Topic: topic, Payload: payloadOf(frameSize - head - len(topic))}).Append(nil, packets.V311)
	if err != nil {
		t.Fatal(err)
	}
	if len(frame) != frameSize {
		t.Fatalf("PUBLISH frame of %d bytes, want %d", len(frame), frameSize)
	}
	partial := frame[:len(frame)-missing]
	held := make([]net.Conn, 0, conns)
	heap := attackBaseline(t, addr)
	base := srv.Stats()

	var sent uint64
	for i := range conns {
		cp := &packets.Connect{ClientID: fmt.Sprintf("slow-%03d", i), CleanStart: true, KeepAlive: 0}
		rc := connectAs(t, addr, packets.V311, cp)
		sent += uint64(cp.Size(packets.V311))
		held = append(held, rc.nc)
		// Bounded, so that a broker that stops reading fails the test
		// instead of hanging it; a broker that closes the connection is
		// defending itself, which is fine.
		rc.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		n, err := rc.nc.Write(partial)
		sent += uint64(n)
		if err != nil && isTimeoutErr(err) {
			t.Fatalf("slow connection %d: the broker stopped reading: %v", i, err)
		} else if err != nil {
			t.Logf("slow connection %d: closed by the broker after %d bytes: %v", i, n, err)
		}
	}
	// Every byte read; or, when the broker closed some connections and so
	// will not read all of them, the count steady for 25 polls (50 ms).
	var last uint64
	steady := 0
	waitFor(t, "the partial frames read", func() bool {
		st := srv.Stats()
		got := st.BytesReceived - base.BytesReceived
		if got >= sent {
			return true
		}
		if got == last {
			steady++
		} else {
			last, steady = got, 0
		}
		return st.Connections < base.Connections+conns && steady >= 25
	})
	st := srv.Stats()
	t.Logf("at the peak: %.1f MB received, %d connections, closed %v", mb(int64(st.BytesReceived-base.BytesReceived)),
		st.Connections, closedSince(base, st))
	heap.check(fmt.Sprintf("100 incomplete PUBLISHes of %d MiB", frameSize>>20), attackHeapBound)

	ordinaryExchange(t, addr, "during")
	if st := srv.Stats(); st.Connections < base.Connections+conns {
		t.Logf("the broker closed %d of the slow connections", base.Connections+conns-st.Connections)
	}
	closeAll(held)
	waitConnections(t, srv, base.Connections)
	ordinaryExchange(t, addr, "after")
	heap.log("after the slow connections closed")
	t.Logf("took %v", time.Since(start).Round(time.Millisecond))
	runtime.KeepAlive(frame)
}

// userPropsOf returns n user properties whose values share one string of
// size bytes.
func userPropsOf(n, size int) packets.Properties {
	var p packets.Properties
	v := strings.Repeat("u", size)
	for i := range n {
		p.User = append(p.User, packets.UserProperty{Key: fmt.Sprint(i), Value: v})
	}
	p.Set(packets.PropUserProperty)
	return p
}

// TestAttackPinnedFrames sends large packets of which the broker keeps a
// small part: 100 5.0 SUBSCRIBEs of about 1 MB (a 7-byte filter and user
// properties) each from a persistent session, 100 3.1.1 persistent
// sessions whose CONNECT is padded to about 200 KB with a will and a
// password (each field is at most 65535 bytes; usernames, which sessions
// keep, are bounded by limits.max_username_length) around a short client
// id, and 50 retained messages with 64 KB of user properties. What is
// kept must be copied out of the frames, not pin them.
func TestAttackPinnedFrames(t *testing.T) {
	const subscribers, padded, retained = 100, 100, 50
	start := time.Now()
	srv, addr := startServer(t, mqttd.Options{})
	buf := encodeBuf()
	subProps := userPropsOf(16, 62000)   // about 1 MB
	retainProps := userPropsOf(2, 32000) // 64 KB
	pad := strings.Repeat("w", 65000)
	heap := attackBaseline(t, addr)
	base := srv.Stats()
	encode := func(p packets.Packet, v packets.Version) []byte {
		t.Helper()
		var err error
		if buf, err = p.Append(buf[:0], v); err != nil {
			t.Fatal(err)
		}
		return buf
	}

	// SUBSCRIBEs: 16 user properties of 62,000 bytes.
	for i := range subscribers {
		cp := &packets.Connect{ClientID: fmt.Sprintf("sub-%03d", i), CleanStart: true}
		cp.Properties.SessionExpiry = 3600
		cp.Properties.Set(packets.PropSessionExpiry)
		rc := connectAs(t, addr, packets.V5, cp)
		sub := &packets.Subscribe{PacketID: 1, Properties: subProps,
			Subscriptions: []packets.Subscription{{Filter: fmt.Sprintf("p/%05d", i), Options: packets.SubOptions{QoS: 1}}}}
		if i == 0 {
			t.Logf("SUBSCRIBE frame: %d bytes", len(encode(sub, packets.V5)))
		}
		rc.write(encode(sub, packets.V5))
		if ack, ok := rc.read().(*packets.Suback); !ok || len(ack.ReasonCodes) != 1 || ack.ReasonCodes[0] != 1 {
			t.Fatalf("SUBACK %+v", ack)
		}
		rc.write(encode(&packets.Disconnect{}, packets.V5))
		rc.expectClosed()
		rc.nc.Close()
	}

	// CONNECTs padded around a short client id.
	for i := range padded {
		cp := &packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V311, ClientID: fmt.Sprintf("w%03d", i),
			WillFlag: true, WillTopic: "will/" + pad, WillPayload: []byte(pad),
			UsernameFlag: true, Username: "padded", PasswordFlag: true, Password: []byte(pad)}
		if i == 0 {
			t.Logf("CONNECT frame: %d bytes", len(encode(cp, packets.V311)))
		}
		rc := dialRaw(t, addr)
		rc.write(encode(cp, packets.V311))
		if ack, ok := rc.read().(*packets.Connack); !ok || ack.ReasonCode != 0 {
			t.Fatalf("CONNACK %+v", ack)
		}
		rc.write(encode(&packets.Disconnect{}, packets.V311))
		rc.expectClosed()
		rc.nc.Close()
	}

	// Retained messages with 64 KB of user properties.
	pub := newPublisher(t, addr, packets.V5, "retainer", buf)
	for i := range retained {
		code := pub.publish(&packets.Publish{Topic: fmt.Sprintf("pin/%02d", i), QoS: 1, Retain: true,
			Properties: retainProps, Payload: []byte("r")})
		if code != packets.Success && code != packets.NoMatchingSubscribers {
			t.Fatalf("retained message %d: PUBACK %#x", i, byte(code))
		}
	}
	pub.rc.nc.Close()
	waitConnections(t, srv, base.Connections)
	st := srv.Stats()
	if st.Sessions != base.Sessions+subscribers+padded || st.Retained != base.Retained+retained {
		t.Errorf("%d sessions, %d retained; want %d and %d", st.Sessions, st.Retained,
			base.Sessions+subscribers+padded, base.Retained+retained)
	}
	t.Logf("at the peak: %d sessions, %d subscriptions, %d retained (%.1f MB counted)",
		st.Sessions, st.Subscriptions, st.Retained, mb(st.RetainedBytes))
	heap.check("pinned frames: 100 SUBSCRIBEs of 1 MB, 100 CONNECTs of 256 KB, 50 retained with 64 KB properties", attackHeapBound)

	ordinaryExchange(t, addr, "during")

	// The attacker takes its sessions and retained messages back.
	for i := range subscribers {
		rc := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: fmt.Sprintf("sub-%03d", i), CleanStart: true})
		rc.write(encode(&packets.Disconnect{}, packets.V5))
		rc.expectClosed()
		rc.nc.Close()
	}
	for i := range padded {
		rc := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: fmt.Sprintf("w%03d", i), CleanStart: true,
			UsernameFlag: true, Username: "padded"}) // a session is its owner's to end
		rc.write(encode(&packets.Disconnect{}, packets.V311))
		rc.expectClosed()
		rc.nc.Close()
	}
	pub = newPublisher(t, addr, packets.V5, "retainer", buf)
	for i := range retained {
		pub.publish(&packets.Publish{Topic: fmt.Sprintf("pin/%02d", i), QoS: 1, Retain: true})
	}
	pub.rc.nc.Close()
	waitConnections(t, srv, base.Connections)
	waitFor(t, "the sessions dropped", func() bool { return srv.Stats().Sessions == base.Sessions })
	if st := srv.Stats(); st.Retained != base.Retained {
		t.Errorf("%d retained after clearing, want %d", st.Retained, base.Retained)
	}
	ordinaryExchange(t, addr, "after")
	heap.log("after the sessions and retained messages were dropped")
	t.Logf("took %v", time.Since(start).Round(time.Millisecond))
	runtime.KeepAlive(buf)
	runtime.KeepAlive(subProps)
	runtime.KeepAlive(retainProps)
	runtime.KeepAlive(pad)
}

// TestAttackConnectionChurn: 5,000 clients with a keepalive of 60 s
// connect and close at once. A closed connection must not stay in memory
// until the idle wheel comes round to its deadline (90 s here), with what
// it points to: churn at 1,000 connections a second would hold 90,000 of
// them.
func TestAttackConnectionChurn(t *testing.T) {
	const conns = 5000
	srv, addr := startServer(t, mqttd.Options{})
	heap := attackBaseline(t, addr)
	base := srv.Stats()
	for i := range conns {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := (&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V311, CleanStart: true,
			KeepAlive: 60, ClientID: fmt.Sprintf("churn-%04d", i)}).Append(nil, packets.V311)
		if _, err := nc.Write(out); err != nil {
			t.Fatal(err)
		}
		var ack [4]byte
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(nc, ack[:]); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		nc.Close()
	}
	waitConnections(t, srv, base.Connections)
	waitFor(t, "the sessions to end", func() bool { return srv.Stats().Sessions == base.Sessions })
	heap.check(fmt.Sprintf("%d connections opened and closed", conns), 2<<20)
	ordinaryExchange(t, addr, "after")
}
