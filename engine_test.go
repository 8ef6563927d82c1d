package mqttd_test

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"mqttd"
	"mqttd/auth"
	"mqttd/packets"
)

// blockingAuthz holds the first SUBSCRIBE (or PUBLISH to topic) of the
// client "same" until released, so a test can run a takeover meanwhile.
type blockingAuthz struct {
	topic            string
	once             sync.Once
	entered, release chan struct{}
}

func newBlockingAuthz(topic string) *blockingAuthz {
	return &blockingAuthz{topic: topic, entered: make(chan struct{}), release: make(chan struct{})}
}

func (a *blockingAuthz) hold() { a.once.Do(func() { close(a.entered); <-a.release }) }

func (a *blockingAuthz) Authorize(c auth.ClientInfo, r auth.Request) bool {
	switch {
	case r.Action == auth.Subscribe && a.topic == "" && c.ClientID == "same",
		r.Action == auth.Publish && a.topic != "" && r.Topic == a.topic:
		a.hold()
	}
	return true
}

// A SUBSCRIBE still being handled when a clean session takes the client id
// over must not put the dropped session back into the trie, where it would
// take its turn in the share group for ever.
func TestSubscribeRacingCleanTakeover(t *testing.T) {
	az := newBlockingAuthz("")
	_, addr := startServer(t, mqttd.Options{Authorizer: az})
	other := connectRaw(t, addr, &packets.Connect{ClientID: "other", CleanStart: true})
	subscribeRaw(other, "$share/g/x", 1)
	other.read()
	old := connectRaw(t, addr, &packets.Connect{ClientID: "same", CleanStart: true})
	subscribeRaw(old, "$share/g/x", 1)
	<-az.entered
	connectRaw(t, addr, &packets.Connect{ClientID: "same", CleanStart: true})
	close(az.release)
	// The old connection may still answer the SUBSCRIBE (refused) before
	// the takeover closes it.
	for {
		p, err := old.tryRead()
		if isTimeoutErr(err) {
			t.Fatal("the taken-over connection is still open")
		}
		if err != nil {
			break
		}
		if ack, ok := p.(*packets.Suback); !ok || ack.ReasonCodes[0] < 0x80 {
			t.Fatalf("old connection got %+v, want at most a refusing SUBACK", p)
		}
	}

	pub := connectRaw(t, addr, &packets.Connect{ClientID: "pub", CleanStart: true})
	const n = 10
	for i := 1; i <= n; i++ {
		pub.send(&packets.Publish{QoS: 1, PacketID: uint16(i), Topic: "x", Payload: []byte("m")})
		pub.read() // PUBACK: routed
	}
	got := 0
	for _, p := range other.ping() {
		if pp, ok := p.(*packets.Publish); ok {
			got++
			other.send(&packets.Puback{PacketID: pp.PacketID})
		}
	}
	if got != n {
		t.Errorf("the only live member got %d of %d messages", got, n)
	}
}

// An acknowledgement that arrives late on a taken-over connection frees the
// window; the queued message must then go out on the new connection.
func TestLateAckOnOldConnectionPumpsNewOne(t *testing.T) {
	az := newBlockingAuthz("block")
	_, addr := startServer(t, mqttd.Options{Authorizer: az, Limits: mqttd.Limits{MaxInflight: 1}})
	first := connectRawSession(t, addr, "p", false, false)
	subscribeRaw(first, "t", 1)
	first.read()
	pub := connectRaw(t, addr, &packets.Connect{ClientID: "pub", CleanStart: true})
	for i := 1; i <= 2; i++ {
		pub.send(&packets.Publish{QoS: 1, PacketID: uint16(i), Topic: "t", Payload: []byte{byte('0' + i)}})
		pub.read()
	}
	m1 := first.read().(*packets.Publish)
	// The PUBACK waits behind a PUBLISH the authorizer holds.
	b, _ := (&packets.Publish{Topic: "block"}).Append(nil, packets.V311)
	b, _ = (&packets.Puback{PacketID: m1.PacketID}).Append(b, packets.V311)
	first.write(b)
	<-az.entered
	second := connectRawSession(t, addr, "p", false, true)
	close(az.release)
	dup := second.read().(*packets.Publish)
	if !dup.Dup || dup.PacketID != m1.PacketID {
		t.Fatalf("want message 1 resent with DUP, got %+v", dup)
	}
	second.send(&packets.Puback{PacketID: dup.PacketID})
	if m2, ok := second.read().(*packets.Publish); !ok || string(m2.Payload) != "2" {
		t.Fatalf("want message 2 on the new connection, got %+v", m2)
	}
}

// A client publishing QoS 0 to itself while its outbox is full of answers
// its own reader has not flushed yet must still get its copy.
func TestSelfDeliveryBehindOwnAnswers(t *testing.T) {
	_, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxOutboxBytes: 1024}})
	c := connectRaw(t, addr, &packets.Connect{ClientID: "self", CleanStart: true})
	subscribeRaw(c, "self", 0)
	c.read()
	var b []byte
	for i := 1; i <= 400; i++ { // 400 PUBACKs: 1,600 bytes queued by the reader
		b, _ = (&packets.Publish{QoS: 1, PacketID: uint16(i), Topic: "o"}).Append(b, packets.V311)
	}
	b, _ = (&packets.Publish{Topic: "self", Payload: []byte("hi")}).Append(b, packets.V311)
	c.write(b)
	self := 0
	for _, p := range c.ping() {
		if pp, ok := p.(*packets.Publish); ok && pp.Topic == "self" {
			self++
		}
	}
	if self != 1 {
		t.Errorf("got %d copies of the client's own QoS 0 message, want 1", self)
	}
}

// Bytes trickled without ever completing a CONNECT must not hold the
// connection open past the connect timeout.
func TestConnectTimeoutNotExtendedByTrickle(t *testing.T) {
	_, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{ConnectTimeout: time.Second}})
	rc := dialRaw(t, addr)
	rc.write([]byte{0x10, 0x80, 0x08}) // CONNECT of 1,024 bytes, never sent
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	giveUp := time.After(10 * time.Second)
	var one [1]byte
	for {
		select {
		case <-giveUp:
			t.Fatal("still open 10 s after a 1 s connect timeout")
		case <-tick.C:
		}
		if _, err := rc.nc.Write([]byte{0}); err != nil {
			return // reset: closed
		}
		rc.nc.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, err := rc.nc.Read(one[:]); errors.Is(err, io.EOF) {
			return
		}
	}
}

// Shutdown must not tell stuck 5.0 clients one after the other: it
// returns within a bound that does not grow with their number.
func TestShutdownDoesNotSerializeStuckClients(t *testing.T) {
	srv, err := mqttd.New(mqttd.Options{Limits: mqttd.Limits{WriteTimeout: 30 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	l := newPipeListener()
	srv.AddListener("pipe", l)
	go srv.Serve()
	for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
		rc := l.dial(t)
		rc.v = packets.V5
		rc.send(&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V5, ClientID: id, CleanStart: true})
		rc.read() // CONNACK; from now on this client reads nothing
	}
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second): // each stuck client may take 1 s; six in a row would not make it
		t.Fatal("Shutdown did not return in 5 s")
	}
}
