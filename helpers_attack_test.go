package mqttd_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"mqttd"
	"mqttd/packets"
)

// attackHeapBound is the most the broker's heap may grow under any attack:
// 64 MB, counted as 64 MiB.
const attackHeapBound = 64 << 20

// heapMeter measures the heap growth since its baseline, as heapInUse
// does: after two collections, heap allocated plus stacks in use.
type heapMeter struct {
	t    *testing.T
	base uint64
}

func (m *heapMeter) growth() int64 { return int64(heapInUse()) - int64(m.base) }

// check measures the growth now, logs it and fails the test (without
// stopping it) when it passes limit.
func (m *heapMeter) check(what string, limit int64) int64 {
	m.t.Helper()
	g := m.growth()
	m.t.Logf("%s: heap growth %.1f MB, %d bytes (limit %.1f MB)", what, mb(g), g, mb(limit))
	if g > limit {
		m.t.Errorf("%s: the broker's heap grew by %d bytes, over %d", what, g, limit)
	}
	return g
}

// log measures and logs the growth now, for information.
func (m *heapMeter) log(what string) {
	m.t.Helper()
	m.t.Logf("%s: heap growth %.1f MB", what, mb(m.growth()))
}

// startHeapMeter takes the baseline; call it once the server runs and the
// ordinary client is connected.
func startHeapMeter(t *testing.T) *heapMeter {
	t.Helper()
	return &heapMeter{t: t, base: heapInUse()}
}

func mb(n int64) float64 { return float64(n) / (1 << 20) }

// attackBaseline connects the ordinary client that stays for the whole
// test, runs the ordinary exchange once so that both ends have warmed
// their pools, and takes the heap baseline.
func attackBaseline(t *testing.T, addr string) *heapMeter {
	t.Helper()
	pahoConnect(t, addr, "ordinary-resident", nil)
	ordinaryExchange(t, addr, "warmup")
	return startHeapMeter(t)
}

// ordinaryExchange connects a fresh paho 3.1.1 client, which subscribes at
// QoS 1, publishes at QoS 1 and must receive its own message, then
// disconnects.
func ordinaryExchange(t *testing.T, addr, phase string) {
	t.Helper()
	id := "ordinary-" + phase
	topic := "ordinary/" + phase
	got := make(chan string, 1)
	c := pahoConnect(t, addr, id, nil)
	wait(t, c.Subscribe(topic, 1, func(_ paho.Client, m paho.Message) {
		select {
		case got <- string(m.Payload()):
		default:
		}
	}))
	wait(t, c.Publish(topic, 1, false, "hello "+phase))
	select {
	case p := <-got:
		if p != "hello "+phase {
			t.Errorf("ordinary client (%s) received %q", phase, p)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("ordinary client (%s) did not receive its message", phase)
	}
	c.Disconnect(100)
}

// rawPublisher is a raw client that encodes into one reused buffer, buf,
// which a test allocates with the payload before the heap baseline.
type rawPublisher struct {
	rc  *rawConn
	buf []byte
	id  uint16
}

// publish sends p (its packet id set here) and, at QoS 1, returns the
// PUBACK's reason code.
func (pb *rawPublisher) publish(p *packets.Publish) packets.ReasonCode {
	pb.rc.t.Helper()
	if p.QoS > 0 {
		pb.id = pb.id%65535 + 1
		p.PacketID = pb.id
	}
	var err error
	if pb.buf, err = p.Append(pb.buf[:0], pb.rc.v); err != nil {
		pb.rc.t.Fatal(err)
	}
	pb.rc.write(pb.buf)
	if p.QoS == 0 {
		return packets.Success
	}
	pkt := pb.rc.read()
	ack, ok := pkt.(*packets.Puback)
	if !ok || ack.PacketID != p.PacketID {
		pb.rc.t.Fatalf("got %T %+v, want PUBACK %d", pkt, pkt, p.PacketID)
	}
	return ack.ReasonCode
}

func newPublisher(t *testing.T, addr string, v packets.Version, id string, buf []byte) *rawPublisher {
	t.Helper()
	rc := connectAs(t, addr, v, &packets.Connect{ClientID: id, CleanStart: true})
	return &rawPublisher{rc: rc, buf: buf}
}

// payloadOf returns a payload of n bytes. A test builds it once, before
// the heap baseline, and keeps it alive to the end (runtime.KeepAlive) so
// that it counts neither way.
func payloadOf(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'x'
	}
	return b
}

// bigPayload is just under the least default maximum packet size (1 MiB).
const bigPayload = 1<<20 - 1024

// encodeBuf returns an encoding buffer big enough for a bigPayload PUBLISH.
func encodeBuf() []byte { return make([]byte, 0, bigPayload+1024) }

// closeAll closes the attack's sockets.
func closeAll(conns []net.Conn) {
	for _, c := range conns {
		c.Close()
	}
}

// waitConnections waits until the broker has closed down to n connections.
func waitConnections(t *testing.T, srv *mqttd.Server, n int64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d connections", n), func() bool { return srv.Stats().Connections <= n })
}

// expiringSubscriber connects a 5.0 client with a Session Expiry Interval
// of expiry seconds, subscribes to filter at QoS 1 and disconnects
// normally, leaving its session offline. It runs on worker goroutines, so
// it returns errors rather than failing the test.
func expiringSubscriber(addr, id, filter string, expiry uint32) error {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	cp := &packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V5, CleanStart: true, ClientID: id}
	cp.Properties.SessionExpiry = expiry
	cp.Properties.Set(packets.PropSessionExpiry)
	out, err := cp.Append(make([]byte, 0, 128), packets.V5)
	if err != nil {
		return err
	}
	out, err = (&packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{
		{Filter: filter, Options: packets.SubOptions{QoS: 1}}}}).Append(out, packets.V5)
	if err != nil {
		return err
	}
	if _, err := nc.Write(out); err != nil {
		return err
	}
	br := bufio.NewReaderSize(nc, 64)
	p, err := packets.ReadPacket(br, packets.V5, 0)
	if ack, ok := p.(*packets.Connack); err != nil || !ok || ack.ReasonCode != packets.Success {
		return fmt.Errorf("%s: CONNACK %T %+v, %v", id, p, p, err)
	}
	p, err = packets.ReadPacket(br, packets.V5, 0)
	if ack, ok := p.(*packets.Suback); err != nil || !ok || len(ack.ReasonCodes) != 1 || ack.ReasonCodes[0] != 1 {
		return fmt.Errorf("%s: SUBACK %T %+v, %v", id, p, p, err)
	}
	out, _ = (&packets.Disconnect{}).Append(out[:0], packets.V5)
	if _, err := nc.Write(out); err != nil {
		return err
	}
	if _, err := packets.ReadPacket(br, packets.V5, 0); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: after DISCONNECT: %v, want the connection closed", id, err)
	}
	return nil
}

// offlineSessions leaves n 5.0 sessions named prefix-NNNN offline, each
// subscribed to filter at QoS 1 with a Session Expiry Interval of expiry
// seconds, connecting them from worker goroutines.
func offlineSessions(t *testing.T, srv *mqttd.Server, addr, prefix, filter string, n int, expiry uint32) {
	t.Helper()
	const workers = 8
	online := srv.Stats().SessionsOnline
	ids := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range ids {
				if err := expiringSubscriber(addr, fmt.Sprintf("%s-%04d", prefix, i), filter, expiry); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		ids <- i
	}
	close(ids)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	waitFor(t, "the sessions offline", func() bool { return srv.Stats().SessionsOnline <= online })
}
