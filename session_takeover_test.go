package mqttd_test

import (
	"bufio"
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"mqttd"
	"mqttd/auth"
	"mqttd/packets"
)

func TestTakeoverClosesOldConnection(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, mqttd.Options{})
	lost := make(chan error, 1)
	first := pahoConnect(t, addr, "same", func(o *paho.ClientOptions) {
		o.SetConnectionLostHandler(func(_ paho.Client, err error) { lost <- err })
	})
	second := pahoConnect(t, addr, "same", nil)
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatal("the first connection was not closed by the takeover")
	}
	if first.IsConnectionOpen() || !second.IsConnectionOpen() {
		t.Fatalf("after takeover: first open %v, second open %v", first.IsConnectionOpen(), second.IsConnectionOpen())
	}
	// The new connection owns the session: it can still subscribe and receive.
	var got collector
	wait(t, second.Subscribe("t", 1, got.handler))
	wait(t, second.Publish("t", 1, false, "x"))
	waitFor(t, "delivery to the new connection", func() bool { return got.len() == 1 })
}

// TestStaleDisconnectKeepsNewOwnersSession checks that a DISCONNECT with
// Session Expiry 0 that a taken-over connection's reader was still
// handling does not end the session the new connection took over.
func TestStaleDisconnectKeepsNewOwnersSession(t *testing.T) {
	t.Parallel()
	az := newBlockingAuthz("hold")
	_, addr := startServer(t, mqttd.Options{Authorizer: az})
	old, _ := reconnect5(t, addr, "same", 100)
	pub, _ := (&packets.Publish{Topic: "hold", Payload: []byte("x")}).Append(nil, packets.V5)
	d := &packets.Disconnect{}
	d.Properties.Set(packets.PropSessionExpiry) // 0: end the session
	disc, _ := d.Append(nil, packets.V5)
	old.write(append(pub, disc...)) // both in the old reader's hands
	<-az.entered
	newer, present := reconnect5(t, addr, "same", 100)
	if !present {
		t.Fatal("the takeover lost the session")
	}
	close(az.release)
	old.expectClosed()
	newer.send(&packets.Disconnect{})
	newer.expectClosed()
	if _, present := reconnect5(t, addr, "same", 100); !present {
		t.Error("the taken-over connection's DISCONNECT ended the new owner's session")
	}
}

// blockingAuthz holds the first SUBSCRIBE (or PUBLISH to topic) of the
// client "same" until released, so a test can run a takeover meanwhile.
type blockingAuthz struct {
	topic            string
	once             sync.Once
	entered, release chan struct{}
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

func newBlockingAuthz(topic string) *blockingAuthz {
	return &blockingAuthz{topic: topic, entered: make(chan struct{}), release: make(chan struct{})}
}

// A SUBSCRIBE still being handled when a clean session takes the client id
// over must not put the dropped session back into the trie, where it would
// take its turn in the share group for ever.
func TestSubscribeRacingCleanTakeover(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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

// TestTakeoverStorm reconnects one client id 100 times while another
// client publishes to it; the broker must stay consistent (no panic,
// race or leak) and the last connection must own the session.
func TestTakeoverStorm(t *testing.T) {
	checkGoroutines(t)
	_, addr := startServer(t, mqttd.Options{})
	var stop atomic.Bool
	var wg sync.WaitGroup
	pub := pahoConnect(t, addr, "storm-pub", nil)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load() && i < 100000; i++ {
			pub.Publish("storm", byte(i%3), false, "x").Wait()
		}
	}()
	for i := range 100 {
		c := pahoConnect(t, addr, "storm", func(o *paho.ClientOptions) { o.SetCleanSession(i%2 == 0) })
		wait(t, c.Subscribe("storm", 2, nil))
		if i == 99 {
			var got collector
			wait(t, c.Subscribe("storm/last", 1, got.handler))
			wait(t, pub.Publish("storm/last", 1, false, "last"))
			waitFor(t, "delivery to the last connection", func() bool { return got.len() == 1 })
		}
	}
	stop.Store(true)
	wg.Wait()
	pub.Disconnect(100)
}

// TestDisconnectBeforeReconnectEndsSession checks that a client that ends
// its session (DISCONNECT with Session Expiry 0), closes its socket and
// connects again at once finds no session, as Mosquitto's
// 05-session-expiry-v5 expects: the old connection's DISCONNECT arrived
// first, so it is handled before the new CONNECT takes the client id
// over, however the readers are scheduled.
func TestDisconnectBeforeReconnectEndsSession(t *testing.T) {
	t.Parallel()
	cert, key := writeServerCert(t)
	srv := listenAll(t, mqttd.Options{Listeners: []mqttd.ListenerConfig{
		{Address: "127.0.0.1:0"},
		{Type: "tls", Address: "127.0.0.1:0", CertFile: cert, KeyFile: key},
		{Type: "ws", Address: "127.0.0.1:0"},
	}})
	tc := &tls.Config{RootCAs: certPool(t, cert)}
	for i, typ := range []string{"tcp", "tls", "ws"} {
		addr := srv.Addrs()[i].String()
		t.Run(typ, func(t *testing.T) {
			dial := func() *rawConn {
				t.Helper()
				var nc net.Conn
				var err error
				switch typ {
				case "tcp":
					nc, err = net.Dial("tcp", addr)
				case "tls":
					nc, err = tls.Dial("tcp", addr, tc)
				case "ws":
					var ws *websocket.Conn
					ws, _, err = (&websocket.Dialer{Subprotocols: []string{"mqtt"}}).Dial("ws://"+addr+"/mqtt", nil)
					if err == nil {
						nc = &wsClient{ws: ws}
					}
				}
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { nc.Close() })
				rc := &rawConn{t: t, nc: nc, br: bufio.NewReader(nc), v: packets.V5}
				rc.send(expiringConnect("again-"+typ, 1))
				return rc
			}
			present := func(rc *rawConn) bool {
				t.Helper()
				ack, ok := rc.read().(*packets.Connack)
				if !ok || ack.ReasonCode != packets.Success {
					t.Fatalf("CONNACK %+v", ack)
				}
				return ack.SessionPresent
			}
			rc := dial()
			present(rc)
			for i := range 50 {
				rc.send(&packets.Disconnect{Properties: sessionExpiryProps(0)})
				rc.nc.Close()
				if rc = dial(); present(rc) {
					t.Fatalf("round %d: the session ended by DISCONNECT was present", i)
				}
			}
		})
	}
}

// TestClosedPredecessorWaitBounded checks that a CONNECT waits only so
// long for a closed connection whose reader is held (here by the
// Authorizer) and then takes the session over, counted; and that a
// predecessor still open is taken over without a wait.
func TestClosedPredecessorWaitBounded(t *testing.T) {
	t.Parallel()
	az := newBlockingAuthz("hold")
	reg := prometheus.NewRegistry()
	_, addr := startServer(t, mqttd.Options{Authorizer: az, Registerer: reg})
	waits := func() float64 { return metricValue(t, reg, "mqttd_takeover_waits_total") }
	open, _ := reconnect5(t, addr, "same", 100)
	if _, present := reconnect5(t, addr, "same", 100); !present || waits() != 0 {
		t.Fatalf("an open predecessor: session present %v, %v waits; want true, 0", present, waits())
	}
	open.expectClosed()

	old, _ := reconnect5(t, addr, "same", 100)
	old.send(&packets.Publish{Topic: "hold", Payload: []byte("x")})
	<-az.entered
	old.send(&packets.Disconnect{Properties: sessionExpiryProps(0)})
	old.nc.Close()
	if _, present := reconnect5(t, addr, "same", 100); !present {
		t.Error("the session was not taken over from the held reader")
	}
	close(az.release)
	if waits() != 1 {
		t.Errorf("%v waits counted, want 1", waits())
	}
}
