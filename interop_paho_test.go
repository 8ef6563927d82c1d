package mqttd_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/eclipse/paho.golang/paho/extensions/rpc"
	"github.com/eclipse/paho.golang/paho/extensions/topicaliases"
	paho3 "github.com/eclipse/paho.mqtt.golang"

	"mqttd"
	"mqttd/auth"
)

// The tests here run the 5.0 features against a real 5.0 client library,
// github.com/eclipse/paho.golang, which checks what the broker sends as
// strictly as the libraries devices use.

func ptr[T any](v T) *T { return &v }

// TestPaho5Will: a will with a delay reaches a 5.0 subscriber after the
// delay, without the Will Delay Interval, which would make the library
// drop the connection. (paho.golang sends no Content Type in a will;
// TestWillProperties checks the properties forwarded.)
func TestPaho5Will(t *testing.T) {
	srv, addr := startServer(t, mqttd.Options{})
	sub := connect5(t, addr, &paho.Connect{ClientID: "sub", CleanStart: true}, nil)
	sub.subscribe(t, "will/#", 1)
	w := connect5(t, addr, &paho.Connect{ClientID: "w", CleanStart: true,
		Properties:     &paho.ConnectProperties{SessionExpiryInterval: ptr[uint32](60)},
		WillMessage:    &paho.WillMessage{Topic: "will/w", Payload: []byte("gone"), QoS: 1},
		WillProperties: &paho.WillProperties{WillDelayInterval: ptr[uint32](1)},
	}, nil)
	before := srv.Stats().Connections
	w.nc.Close()
	waitFor(t, "w's connection to end", func() bool { return srv.Stats().Connections < before })
	if n := srv.Stats().WillsDelayed; n != 1 {
		t.Fatalf("%d wills delayed, want 1", n)
	}
	m := sub.next(t)
	if m.Topic != "will/w" || string(m.Payload) != "gone" {
		t.Errorf("will %s %q", m.Topic, m.Payload)
	}
}

// TestPaho5SessionExpiry: a session with a Session Expiry Interval is
// there for a client back in time and gone after it.
func TestPaho5SessionExpiry(t *testing.T) {
	srv, addr := startServer(t, mqttd.Options{})
	cp := func(clean bool) *paho.Connect {
		return &paho.Connect{ClientID: "exp", CleanStart: clean,
			Properties: &paho.ConnectProperties{SessionExpiryInterval: ptr[uint32](1)}}
	}
	first := connect5(t, addr, cp(true), nil)
	first.c.Disconnect(&paho.Disconnect{})
	back := connect5(t, addr, cp(false), nil)
	if !back.ack.SessionPresent {
		t.Error("session gone within its expiry interval")
	}
	back.c.Disconnect(&paho.Disconnect{})
	waitFor(t, "the session to expire", func() bool { return srv.Stats().SessionsExpired == 1 })
	if late := connect5(t, addr, cp(false), nil); late.ack.SessionPresent {
		t.Error("session present after its expiry interval")
	}
}

// TestPaho5SessionEndedThenBack is the end of Mosquitto's
// 05-session-expiry-v5 with paho.golang: a client that ends its session
// with DISCONNECT (Session Expiry Interval 0) and connects again at once
// finds no session, however the broker's readers of the two connections
// are scheduled.
func TestPaho5SessionEndedThenBack(t *testing.T) {
	_, addr := startServer(t, mqttd.Options{})
	cp := &paho.Connect{ClientID: "05-session-expiry",
		Properties: &paho.ConnectProperties{SessionExpiryInterval: ptr[uint32](1)}}
	end := &paho.Disconnect{Properties: &paho.DisconnectProperties{SessionExpiryInterval: ptr[uint32](0)}}
	for i := range 20 {
		c := connect5(t, addr, cp, nil)
		if c.ack.SessionPresent {
			t.Fatalf("round %d: the session ended by DISCONNECT was present", i)
		}
		c.c.Disconnect(end)
	}
}

// TestPaho5TopicAliases: a publisher using the library's topic alias
// extension is understood, and a subscriber taking the broker's aliases
// gets packets the library accepts and that resolve to every topic right
// (the library's router resolves aliases only to pick a handler, so the
// test keeps the table a handler would).
func TestPaho5TopicAliases(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, mqttd.Options{})
	sub := connect5(t, addr, &paho.Connect{ClientID: "sub", CleanStart: true,
		Properties: &paho.ConnectProperties{TopicAliasMaximum: ptr[uint16](3)}}, nil)
	sub.subscribe(t, "t/#", 0)
	got := make(chan *paho.Publish, 100)
	done := t.Context().Done()
	go func() {
		table := map[uint16]string{}
		for {
			select {
			case m := <-sub.msgs:
				if m.Properties != nil && m.Properties.TopicAlias != nil {
					if m.Topic != "" {
						table[*m.Properties.TopicAlias] = m.Topic
					}
					m.Topic = table[*m.Properties.TopicAlias]
				}
				got <- m
			case <-done:
				return
			}
		}
	}()
	aliases := topicaliases.NewTAHandler(10)
	pub := connect5(t, addr, &paho.Connect{ClientID: "pub", CleanStart: true}, func(cfg *paho.ClientConfig) {
		cfg.PublishHook = aliases.PublishHook
	})
	if n := pub.ack.Properties.TopicAliasMaximum; n == nil || *n != 10 {
		t.Fatalf("Topic Alias Maximum %v, want 10", n)
	}
	topics := []string{"t/a", "t/b", "t/a", "t/c", "t/d", "t/a", "t/b", "t/a"}
	for _, topic := range topics {
		pub.publish(t, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte(topic)})
	}
	for i, want := range topics {
		select {
		case m := <-got:
			if m.Topic != want || string(m.Payload) != want {
				t.Fatalf("message %d: %q %q, want %q", i, m.Topic, m.Payload, want)
			}
		case err := <-sub.errs:
			t.Fatalf("client error: %v", err)
		case <-time.After(10 * time.Second):
			t.Fatalf("message %d missing", i)
		}
	}
}

// TestPaho5RequestResponse: the library's request/response extension works
// through the broker, and a client asking for Response Information gets
// it.
func TestPaho5RequestResponse(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, mqttd.Options{})
	responder := connect5(t, addr, &paho.Connect{ClientID: "svc", CleanStart: true}, nil)
	responder.subscribe(t, "svc/req", 1)
	done := t.Context().Done()
	go func() {
		for {
			var m *paho.Publish
			select {
			case m = <-responder.msgs:
			case <-done:
				return
			}
			if m.Properties == nil || m.Properties.ResponseTopic == "" {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			responder.c.Publish(ctx, &paho.Publish{Topic: m.Properties.ResponseTopic, QoS: 1,
				Payload:    append([]byte("re: "), m.Payload...),
				Properties: &paho.PublishProperties{CorrelationData: m.Properties.CorrelationData}})
			cancel()
		}
	}()
	requester := connect5(t, addr, &paho.Connect{ClientID: "cli", CleanStart: true,
		Properties: &paho.ConnectProperties{RequestResponseInfo: true}}, func(cfg *paho.ClientConfig) {
		cfg.OnPublishReceived = nil
	})
	if info := requester.ack.Properties.ResponseInfo; info != "responses/cli/" {
		t.Errorf("Response Information %q, want responses/cli/", info)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := rpc.NewHandler(ctx, requester.c)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := h.Request(ctx, &paho.Publish{Topic: "svc/req", QoS: 1, Payload: []byte("ping")})
	if err != nil || string(resp.Payload) != "re: ping" {
		t.Fatalf("response %v, %v", resp, err)
	}
}

// TestPaho5ReasonCodes: the library sees 0x10 for a message nobody
// subscribed to, and 0x87 with a Reason String for one to $SYS.
func TestPaho5ReasonCodes(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, mqttd.Options{})
	c := connect5(t, addr, &paho.Connect{ClientID: "c", CleanStart: true}, nil)
	if r := c.publish(t, &paho.Publish{Topic: "nobody/here", QoS: 1, Payload: []byte("x")}); r.ReasonCode != 0x10 {
		t.Errorf("PUBACK %#x, want 0x10", r.ReasonCode)
	}
	r := c.publish(t, &paho.Publish{Topic: "$SYS/x", QoS: 1, Payload: []byte("x")})
	if r.ReasonCode != 0x87 || r.Properties == nil || r.Properties.ReasonString == "" {
		t.Errorf("PUBACK %#x %+v, want 0x87 with a Reason String", r.ReasonCode, r.Properties)
	}
}

// TestMixedVersions: a 3.1.1 publisher reaches a 5.0 subscriber and a 5.0
// publisher (properties and all) a 3.1.1 subscriber, at QoS 1, retained
// messages included.
func TestMixedVersions(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, mqttd.Options{})
	v5 := connect5(t, addr, &paho.Connect{ClientID: "v5", CleanStart: true}, nil)
	v5.subscribe(t, "from3/#", 1)
	got3 := make(chan paho3.Message, 10)
	v3 := pahoConnect(t, addr, "v3", nil)
	wait(t, v3.Subscribe("from5/#", 1, func(_ paho3.Client, m paho3.Message) { got3 <- m }))

	wait(t, v3.Publish("from3/x", 1, false, "hello five"))
	if m := v5.next(t); m.Topic != "from3/x" || string(m.Payload) != "hello five" || m.QoS != 1 {
		t.Errorf("5.0 got %s %q QoS %d", m.Topic, m.Payload, m.QoS)
	}
	v5.publish(t, &paho.Publish{Topic: "from5/y", QoS: 1, Retain: true, Payload: []byte("hello three"),
		Properties: &paho.PublishProperties{ContentType: "text/plain", User: paho.UserProperties{{Key: "k", Value: "v"}}}})
	select {
	case m := <-got3:
		if m.Topic() != "from5/y" || string(m.Payload()) != "hello three" || m.Qos() != 1 {
			t.Errorf("3.1.1 got %s %q QoS %d", m.Topic(), m.Payload(), m.Qos())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("3.1.1 subscriber got nothing")
	}
	late := make(chan paho3.Message, 1)
	v3late := pahoConnect(t, addr, "v3late", nil)
	wait(t, v3late.Subscribe("from5/#", 1, func(_ paho3.Client, m paho3.Message) { late <- m }))
	select {
	case m := <-late:
		if !m.Retained() || string(m.Payload()) != "hello three" {
			t.Errorf("retained 5.0 message to 3.1.1: %q retained %v", m.Payload(), m.Retained())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no retained message")
	}
}

// pahoSCRAM is paho.golang's side of a SCRAM-SHA-256 exchange.
type pahoSCRAM struct {
	t  *testing.T
	sc *scramClient
}

func (a *pahoSCRAM) Authenticate(in *paho.Auth) *paho.Auth {
	out, err := a.sc.final(in.Properties.AuthData)
	if err != nil {
		a.t.Errorf("SCRAM: %v", err)
	}
	return &paho.Auth{ReasonCode: 0x18, Properties: &paho.AuthProperties{AuthMethod: auth.SCRAMName, AuthData: out}}
}

func (a *pahoSCRAM) Authenticated() {}

// TestPaho5EnhancedAuth: paho.golang connects through SCRAM-SHA-256 and
// re-authenticates, as the library's AUTH support does it.
func TestPaho5EnhancedAuth(t *testing.T) {
	t.Parallel()
	_, addr := scramServer(t)
	sc := &scramClient{user: "bob", password: "builder", nonce: "paho-1"}
	handler := &pahoSCRAM{t: t, sc: sc}
	c := connect5(t, addr, &paho.Connect{ClientID: "paho-scram", CleanStart: true,
		Properties: &paho.ConnectProperties{AuthMethod: auth.SCRAMName, AuthData: sc.clientFirst()}},
		func(cfg *paho.ClientConfig) { cfg.AuthHandler = handler })
	if c.ack.ReasonCode != 0 || c.ack.Properties.AuthMethod != auth.SCRAMName {
		t.Fatalf("CONNACK %+v", c.ack)
	}
	sc.verify(t, c.ack.Properties.AuthData)

	again := &scramClient{user: "bob", password: "builder", nonce: "paho-2"}
	handler.sc = again
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c.c.Authenticate(ctx, &paho.Auth{ReasonCode: 0x19,
		Properties: &paho.AuthProperties{AuthMethod: auth.SCRAMName, AuthData: again.clientFirst()}})
	if err != nil || !r.Success {
		t.Fatalf("re-authentication: %+v, %v", r, err)
	}
	c.subscribe(t, "still/here", 1)
}

// TestPaho5ConnackLimits: what the library learns from CONNACK: the
// Server Keep Alive replacing a keepalive above the maximum, the Receive
// Maximum, Topic Alias Maximum and Maximum Packet Size the broker holds
// clients to; and a redirect's Server Reference.
func TestPaho5ConnackLimits(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxKeepAlive: 60, MaxAwaitingRel: 50, MaxTopicAlias: 4, MaxPacketSize: 4096}})
	c := connect5(t, addr, &paho.Connect{ClientID: "limits", CleanStart: true, KeepAlive: 600}, nil)
	p := c.ack.Properties
	for name, got := range map[string]any{"ServerKeepAlive": p.ServerKeepAlive, "ReceiveMaximum": p.ReceiveMaximum,
		"TopicAliasMaximum": p.TopicAliasMaximum, "MaximumPacketSize": p.MaximumPacketSize} {
		want := map[string]uint64{"ServerKeepAlive": 60, "ReceiveMaximum": 50, "TopicAliasMaximum": 4, "MaximumPacketSize": 4096}[name]
		var v uint64
		switch g := got.(type) {
		case *uint16:
			if g != nil {
				v = uint64(*g)
			}
		case *uint32:
			if g != nil {
				v = uint64(*g)
			}
		}
		if v != want {
			t.Errorf("%s = %d, want %d", name, v, want)
		}
	}

	_, moved := startServer(t, mqttd.Options{Protocol: mqttd.Protocol{ServerReference: "127.0.0.1:1884"}})
	nc, err := net.Dial("tcp", moved)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := paho.NewClient(paho.ClientConfig{Conn: nc}).Connect(ctx, &paho.Connect{ClientID: "r", CleanStart: true, KeepAlive: 30})
	if err == nil || ack == nil || ack.ReasonCode != 0x9C || ack.Properties.ServerReference != "127.0.0.1:1884" {
		t.Errorf("redirect: %+v, %v; want CONNACK 0x9C with the Server Reference", ack, err)
	}
}

// TestPaho5MaximumPacketSize: a client declaring a Maximum Packet Size
// is not sent a larger message (and stays connected); smaller ones come.
func TestPaho5MaximumPacketSize(t *testing.T) {
	t.Parallel()
	srv, addr := startServer(t, mqttd.Options{})
	sub := connect5(t, addr, &paho.Connect{ClientID: "small", CleanStart: true,
		Properties: &paho.ConnectProperties{MaximumPacketSize: ptr[uint32](200)}}, nil)
	sub.subscribe(t, "size/#", 1)
	pub := connect5(t, addr, &paho.Connect{ClientID: "pub", CleanStart: true}, nil)
	pub.publish(t, &paho.Publish{Topic: "size/big", QoS: 1, Payload: make([]byte, 500)})
	pub.publish(t, &paho.Publish{Topic: "size/small", QoS: 1, Payload: []byte("fits")})
	if m := sub.next(t); m.Topic != "size/small" {
		t.Errorf("got %s (%d bytes), want only the one that fits", m.Topic, len(m.Payload))
	}
	if n := srv.Stats().Dropped["too_large"]; n != 1 {
		t.Errorf("dropped[too_large] = %d, want 1", n)
	}
}

// TestPaho5ReceiveMaximum: a client with a Receive Maximum of 2 that
// acknowledges by hand is never sent a third message before it
// acknowledges one.
func TestPaho5ReceiveMaximum(t *testing.T) {
	t.Parallel()
	srv, addr := startServer(t, mqttd.Options{})
	sub := connect5(t, addr, &paho.Connect{ClientID: "rm", CleanStart: true,
		Properties: &paho.ConnectProperties{ReceiveMaximum: ptr[uint16](2)}},
		func(cfg *paho.ClientConfig) { cfg.EnableManualAcknowledgment = true })
	sub.subscribe(t, "rm/#", 1)
	pub := connect5(t, addr, &paho.Connect{ClientID: "pub", CleanStart: true}, nil)
	for range 5 {
		pub.publish(t, &paho.Publish{Topic: "rm/x", QoS: 1, Payload: []byte("m")})
	}
	// Every message was routed before its PUBACK: two are sent, three wait.
	if st := srv.Stats(); st.MessagesSent != 2 || st.Queued != 3 {
		t.Fatalf("%d sent, %d queued with nothing acknowledged; want 2, 3", st.MessagesSent, st.Queued)
	}
	held := []*paho.Publish{sub.next(t), sub.next(t)}
	for received := 2; received < 5; received++ {
		if err := sub.c.Ack(held[0]); err != nil {
			t.Fatal(err)
		}
		held = append(held[1:], sub.next(t))
	}
	// The last three left the queue as acknowledgements freed the window.
	if st := srv.Stats(); st.MessagesSent != 5 || st.Queued != 0 {
		t.Errorf("%d sent, %d queued once all were received; want 5, 0", st.MessagesSent, st.Queued)
	}
}

// TestPaho5SharedHandOff: a paho.golang worker of a share group that dies
// holding an unacknowledged message does not lose it: another worker gets
// it.
func TestPaho5SharedHandOff(t *testing.T) {
	t.Parallel()
	srv, addr := startServer(t, mqttd.Options{})
	manual := func(cfg *paho.ClientConfig) { cfg.EnableManualAcknowledgment = true }
	a := connect5(t, addr, &paho.Connect{ClientID: "wa", CleanStart: true}, manual)
	a.subscribe(t, "$share/workers/task/#", 1)
	b := connect5(t, addr, &paho.Connect{ClientID: "wb", CleanStart: true}, nil)
	b.subscribe(t, "$share/workers/task/#", 1)
	pub := connect5(t, addr, &paho.Connect{ClientID: "pub", CleanStart: true}, nil)
	pub.publish(t, &paho.Publish{Topic: "task/1", QoS: 1, Payload: []byte("one")})
	pub.publish(t, &paho.Publish{Topic: "task/2", QoS: 1, Payload: []byte("two")})
	first := a.next(t) // round robin: one each
	b.next(t)
	before := srv.Stats().Connections
	a.nc.Close() // dies without acknowledging
	waitFor(t, "a's connection to end", func() bool { return srv.Stats().Connections < before })
	if m := b.next(t); string(m.Payload) != string(first.Payload) {
		t.Errorf("b was handed %q, want a's %q", m.Payload, first.Payload)
	}
}
