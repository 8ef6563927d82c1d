package mqttd_test

import (
	"bufio"
	"cmp"
	"errors"
	"net"
	"testing"
	"time"

	"mqttd"
	"mqttd/packets"
)

// rawConn is a bare MQTT connection for tests that send exact bytes.
type rawConn struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
	v  packets.Version
	// wait is how long a read waits for a packet; 0 means 10 s.
	wait time.Duration
}

func (rc *rawConn) send(p packets.Packet) {
	rc.t.Helper()
	b, err := p.Append(nil, rc.v)
	if err != nil {
		rc.t.Fatal(err)
	}
	rc.write(b)
}

func (rc *rawConn) write(b []byte) {
	rc.t.Helper()
	if _, err := rc.nc.Write(b); err != nil {
		rc.t.Fatal(err)
	}
}

// read reads the next packet, failing the test if none comes in time.
func (rc *rawConn) read() packets.Packet {
	rc.t.Helper()
	p, err := rc.tryRead()
	if err != nil {
		rc.t.Fatalf("read: %v", err)
	}
	return p
}

func (rc *rawConn) tryRead() (packets.Packet, error) {
	rc.nc.SetReadDeadline(time.Now().Add(cmp.Or(rc.wait, 10*time.Second)))
	return packets.ReadPacket(rc.br, rc.v, 0)
}

// expectClosed waits for the server to close the connection, failing if
// a packet arrives instead.
func (rc *rawConn) expectClosed() {
	rc.t.Helper()
	for {
		p, err := rc.tryRead()
		if err == nil {
			if _, ok := p.(*packets.Disconnect); ok && rc.v == packets.V5 {
				continue // 5.0 says why before closing
			}
			rc.t.Fatalf("got %T %+v, want the connection closed", p, p)
		}
		if isTimeoutErr(err) {
			rc.t.Fatal("connection still open")
		}
		return
	}
}

// ping sends PINGREQ and reads up to the PINGRESP, returning what came
// before it: a barrier proving everything the server sent earlier arrived.
func (rc *rawConn) ping() []packets.Packet {
	rc.t.Helper()
	rc.send(&packets.Pingreq{})
	var before []packets.Packet
	for {
		p := rc.read()
		if _, ok := p.(*packets.Pingresp); ok {
			return before
		}
		before = append(before, p)
	}
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, nc: nc, br: bufio.NewReader(nc), v: packets.V311}
}

// connectRaw dials and completes a 3.1.1 CONNECT with the given options.
func connectRaw(t *testing.T, addr string, cp *packets.Connect) *rawConn {
	t.Helper()
	rc := dialRaw(t, addr)
	if cp.ProtocolVersion == 0 {
		cp.ProtocolName, cp.ProtocolVersion = "MQTT", packets.V311
	}
	rc.v = cp.ProtocolVersion
	rc.send(cp)
	ack, ok := rc.read().(*packets.Connack)
	if !ok || ack.ReasonCode != 0 {
		t.Fatalf("CONNACK: %+v", ack)
	}
	return rc
}

func isTimeoutErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// versions are the protocol versions most rows are checked in.
var versions = []packets.Version{packets.V311, packets.V5}

func versionName(v packets.Version) string {
	if v == packets.V5 {
		return "v5"
	}
	return "v311"
}

// encode returns p's bytes in version v.
func encode(t *testing.T, p packets.Packet, v packets.Version) []byte {
	t.Helper()
	b, err := p.Append(nil, v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// connectAs completes a CONNECT in version v; cp.ProtocolName and
// cp.ProtocolVersion are filled in.
func connectAs(t *testing.T, addr string, v packets.Version, cp *packets.Connect) *rawConn {
	t.Helper()
	cp.ProtocolName, cp.ProtocolVersion = "MQTT", v
	return connectRaw(t, addr, cp)
}

// connectReply dials, sends cp in version v and returns the CONNACK.
func connectReply(t *testing.T, addr string, v packets.Version, cp *packets.Connect) (*rawConn, *packets.Connack) {
	t.Helper()
	rc := dialRaw(t, addr)
	cp.ProtocolName, cp.ProtocolVersion = "MQTT", v
	rc.v = v
	rc.send(cp)
	p := rc.read()
	ack, ok := p.(*packets.Connack)
	if !ok {
		t.Fatalf("got %T %+v, want CONNACK", p, p)
	}
	return rc, ack
}

// connectRawSession connects with clean session set as given and checks
// the CONNACK's session-present flag.
func connectRawSession(t *testing.T, addr, id string, clean, wantPresent bool) *rawConn {
	t.Helper()
	rc := dialRaw(t, addr)
	rc.send(&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V311, ClientID: id, CleanStart: clean})
	ack, ok := rc.read().(*packets.Connack)
	if !ok || ack.ReasonCode != 0 || ack.SessionPresent != wantPresent {
		t.Fatalf("CONNACK %+v: want accepted with session present %v", ack, wantPresent)
	}
	return rc
}

// connectSubscribed connects and subscribes.
func connectSubscribed(t *testing.T, cp *packets.Connect, addr string, subs ...packets.Subscription) *rawConn {
	t.Helper()
	c := connectRaw(t, addr, cp)
	subscribe(c, subs...)
	return c
}

// connect31 sends an MQTT 3.1 CONNECT and returns the CONNACK.
func connect31(t *testing.T, addr string, cp *packets.Connect) (*rawConn, *packets.Connack) {
	t.Helper()
	rc := dialRaw(t, addr)
	cp.ProtocolName, cp.ProtocolVersion, rc.v = "MQIsdp", packets.V31, packets.V31
	rc.send(cp)
	ack, ok := rc.read().(*packets.Connack)
	if !ok {
		t.Fatalf("got %+v, want CONNACK", ack)
	}
	return rc, ack
}

// limitedConnect is a 5.0 CONNECT of a persistent session with a Receive
// Maximum of 1 and, when max > 0, a Maximum Packet Size of max.
func limitedConnect(id string, max uint32) *packets.Connect {
	cp := &packets.Connect{ClientID: id}
	cp.Properties.SessionExpiry, cp.Properties.ReceiveMaximum = 300, 1
	cp.Properties.Set(packets.PropSessionExpiry)
	cp.Properties.Set(packets.PropReceiveMaximum)
	if max > 0 {
		cp.Properties.MaximumPacketSize = max
		cp.Properties.Set(packets.PropMaximumPacketSize)
	}
	return cp
}

// expiringConnect is a 5.0 CONNECT asking for a session that outlives the
// connection by expiry seconds.
func expiringConnect(id string, expiry uint32) *packets.Connect {
	cp := &packets.Connect{ClientID: id}
	cp.Properties.SessionExpiry = expiry
	cp.Properties.Set(packets.PropSessionExpiry)
	return cp
}

// reconnect5 connects id again in 5.0 and reports whether its session
// was still there.
func reconnect5(t *testing.T, addr, id string, expiry uint32) (*rawConn, bool) {
	t.Helper()
	rc, ack := connectReply(t, addr, packets.V5, expiringConnect(id, expiry))
	if ack.ReasonCode != packets.Success {
		t.Fatalf("CONNACK %#x", byte(ack.ReasonCode))
	}
	return rc, ack.SessionPresent
}

// sessionExpiryProps asks for a 5.0 Session Expiry Interval of s seconds.
func sessionExpiryProps(s uint32) packets.Properties {
	var p packets.Properties
	p.SessionExpiry = s
	p.Set(packets.PropSessionExpiry)
	return p
}

// setWill gives cp a QoS 0 will on topic.
func setWill(cp *packets.Connect, topic string) {
	cp.WillFlag, cp.WillTopic, cp.WillPayload = true, topic, []byte("gone")
}

// willClient connects a 5.0 client with a will on "will" whose Will Delay
// Interval is delay seconds (the property present even when 0) and whose
// session lasts expiry seconds offline.
func willClient(t *testing.T, addr, id string, delay, expiry uint32, clean bool) *rawConn {
	t.Helper()
	cp := &packets.Connect{ClientID: id, CleanStart: clean}
	setWill(cp, "will")
	cp.WillProperties.WillDelay = delay
	cp.WillProperties.Set(packets.PropWillDelay)
	if expiry > 0 {
		cp.Properties.SessionExpiry = expiry
		cp.Properties.Set(packets.PropSessionExpiry)
	}
	return connectAs(t, addr, packets.V5, cp)
}

// dropAndWait closes rc without DISCONNECT and waits until the broker has
// finished the connection (its will decided), which is when it stops
// counting it.
func dropAndWait(t *testing.T, srv *mqttd.Server, rc *rawConn) {
	t.Helper()
	before := srv.Stats().Connections
	rc.nc.Close()
	waitFor(t, "the connection to be finished", func() bool { return srv.Stats().Connections < before })
}

// subscribe sends one SUBSCRIBE and returns the SUBACK's codes.
func subscribe(rc *rawConn, subs ...packets.Subscription) []packets.ReasonCode {
	rc.t.Helper()
	rc.send(&packets.Subscribe{PacketID: 1, Subscriptions: subs})
	p := rc.read()
	ack, ok := p.(*packets.Suback)
	if !ok || len(ack.ReasonCodes) != len(subs) {
		rc.t.Fatalf("got %T %+v, want a SUBACK for %d filters", p, p, len(subs))
	}
	return ack.ReasonCodes
}

func subscribeRaw(rc *rawConn, filter string, qos byte) {
	rc.send(&packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{{Filter: filter, Options: packets.SubOptions{QoS: qos}}}})
}

func qos(q byte) packets.SubOptions { return packets.SubOptions{QoS: q} }

// watchTopic connects a 3.1.1 subscriber to filter at QoS 0.
func watchTopic(t *testing.T, addr, filter string) *rawConn {
	t.Helper()
	rc := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "watch-" + filter, CleanStart: true})
	subscribe(rc, packets.Subscription{Filter: filter})
	return rc
}

// offlineSubscriber leaves a persistent session subscribed to filter at
// QoS 1 and disconnects, so what is published to it is queued.
func offlineSubscriber(t *testing.T, addr, id, filter string) {
	t.Helper()
	rc := connectRawSession(t, addr, id, false, false)
	subscribe(rc, packets.Subscription{Filter: filter, Options: packets.SubOptions{QoS: 1}})
	rc.send(&packets.Disconnect{})
	rc.expectClosed()
}

// publishQoS1 publishes on rc at QoS 1 and returns the PUBACK's code.
func publishQoS1(rc *rawConn, id uint16, topic string, retain bool) packets.ReasonCode {
	rc.t.Helper()
	rc.send(&packets.Publish{Topic: topic, QoS: 1, PacketID: id, Retain: retain, Payload: []byte(topic)})
	ack, ok := rc.read().(*packets.Puback)
	if !ok || ack.PacketID != id {
		rc.t.Fatalf("no PUBACK %d for %s: %+v", id, topic, ack)
	}
	return ack.ReasonCode
}

// aliasPublish is a 5.0 PUBLISH carrying Topic Alias alias.
func aliasPublish(t *testing.T, topic string, alias uint16) []byte {
	t.Helper()
	p := &packets.Publish{Topic: topic, Payload: []byte("x")}
	p.Properties.TopicAlias = alias
	p.Properties.Set(packets.PropTopicAlias)
	return encode(t, p, packets.V5)
}

// expectPublish reads the next packet, which must be a PUBLISH on topic.
func expectPublish(rc *rawConn, topic string) *packets.Publish {
	rc.t.Helper()
	p := rc.read()
	pub, ok := p.(*packets.Publish)
	if !ok || pub.Topic != topic {
		rc.t.Fatalf("got %T %+v, want a PUBLISH on %q", p, p, topic)
	}
	return pub
}

// expectNothing proves with a ping barrier that nothing was sent to rc.
func expectNothing(rc *rawConn) {
	rc.t.Helper()
	if got := rc.ping(); len(got) != 0 {
		rc.t.Fatalf("got %d unexpected packets, first %T %+v", len(got), got[0], got[0])
	}
}

// expectAck reads the next packet, which must be an acknowledgement of
// type typ for id with code.
func expectAck(rc *rawConn, typ packets.Type, id uint16, code packets.ReasonCode) {
	rc.t.Helper()
	p := rc.read()
	var gotID uint16
	var gotCode packets.ReasonCode
	switch a := p.(type) {
	case *packets.Puback:
		gotID, gotCode = a.PacketID, a.ReasonCode
	case *packets.Pubrec:
		gotID, gotCode = a.PacketID, a.ReasonCode
	case *packets.Pubrel:
		gotID, gotCode = a.PacketID, a.ReasonCode
	case *packets.Pubcomp:
		gotID, gotCode = a.PacketID, a.ReasonCode
	}
	if p.Type() != typ || gotID != id || gotCode != code {
		rc.t.Fatalf("got %T %+v, want %v %d code %#x", p, p, typ, id, code)
	}
}

// expectServerClose checks how the server ends a connection for a bad
// packet: 3.x closes without a word; 5.0 sends DISCONNECT with code first.
func expectServerClose(rc *rawConn, code packets.ReasonCode) {
	rc.t.Helper()
	if rc.v == packets.V5 {
		p := rc.read()
		if d, ok := p.(*packets.Disconnect); !ok || d.ReasonCode != code {
			rc.t.Fatalf("got %T %+v, want DISCONNECT 0x%02X", p, p, byte(code))
		}
	}
	rc.expectClosed()
}
