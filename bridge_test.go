package mqttd_test

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"mqttd"
	"mqttd/bridge"
	"mqttd/internal/testutil"
)

// Bridges between two brokers on loopback: a gateway mqttd forwarding to
// a remote mqttd, both ways.

func rule(pattern, dir string, qos int, local, remote string) bridge.Rule {
	return bridge.Rule{Pattern: pattern, Direction: dir, QoS: &qos, LocalPrefix: local, RemotePrefix: remote}
}

// bridgeTo is a bridge named cloud to addr, reconnecting quickly.
func bridgeTo(addr, protocol string, rules ...bridge.Rule) bridge.Config {
	return bridge.Config{Name: "cloud", Addresses: []string{addr}, Protocol: protocol, ClientID: "gw1",
		ReconnectMin: 20 * time.Millisecond, ReconnectMax: 100 * time.Millisecond, Topics: rules}
}

// waitBridge waits until srv's bridge reports connected as want.
func waitBridge(t *testing.T, srv *mqttd.Server, want bool) {
	t.Helper()
	waitFor(t, fmt.Sprintf("the bridge connected=%v", want), func() bool {
		b := srv.Bridges()
		return len(b) == 1 && b[0].Connected == want
	})
}

// waitRemoteSub waits until the remote holds the bridge's subscription.
func waitRemoteSub(t *testing.T, remote *mqttd.Server, clientID, filter string) {
	t.Helper()
	waitFor(t, "the bridge's subscription on the remote", func() bool {
		subs, _, _ := remote.Subscriptions(clientID, "", 100)
		for _, s := range subs {
			if s.Filter == filter {
				return true
			}
		}
		return false
	})
}

// bridgeCollector subscribes a paho client and hands on what it receives.
func bridgeCollector(t *testing.T, addr, id string, filters ...string) <-chan paho.Message {
	t.Helper()
	ch := make(chan paho.Message, 1000)
	c := pahoConnect(t, addr, id, func(o *paho.ClientOptions) { o.SetOrderMatters(true) })
	for _, f := range filters {
		wait(t, c.Subscribe(f, 1, func(_ paho.Client, m paho.Message) { ch <- m }))
	}
	return ch
}

func nextMsg(t *testing.T, ch <-chan paho.Message) paho.Message {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no message within 10 s")
		return nil
	}
}

func expectMsg(t *testing.T, ch <-chan paho.Message, topic, payload string) {
	t.Helper()
	m := nextMsg(t, ch)
	if m.Topic() != topic || string(m.Payload()) != payload {
		t.Fatalf("got %s %q, want %s %q", m.Topic(), m.Payload(), topic, payload)
	}
}

// noLoop checks a both rule on topic: each side gets the other's message
// once, and neither gets its own back: the next message each sees is the
// one published after it.
func noLoop(t *testing.T, topic string, gpub, rpub paho.Client, atGateway, atRemote <-chan paho.Message) {
	t.Helper()
	wait(t, gpub.Publish(topic+"/a", 1, false, "from-gw"))
	expectMsg(t, atGateway, topic+"/a", "from-gw")
	expectMsg(t, atRemote, topic+"/a", "from-gw")
	wait(t, rpub.Publish(topic+"/b", 1, false, "from-remote"))
	expectMsg(t, atRemote, topic+"/b", "from-remote")
	expectMsg(t, atGateway, topic+"/b", "from-remote")
	wait(t, gpub.Publish(topic+"/c", 1, false, "again"))
	expectMsg(t, atGateway, topic+"/c", "again")
	expectMsg(t, atRemote, topic+"/c", "again")
}

// TestBridgeBothWays: out, in and both rules with prefixes, over 5.0 and
// 3.1.1 (with the bridge bit), and nothing forwarded back to where it
// came from.
func TestBridgeBothWays(t *testing.T) {
	for _, protocol := range []string{"5", "3.1.1"} {
		t.Run(protocol, func(t *testing.T) {
			remote, raddr := startServer(t, mqttd.Options{})
			gw, gaddr := startServer(t, mqttd.Options{DataDir: t.TempDir(), Bridges: []bridge.Config{bridgeTo(raddr, protocol,
				rule("sensors/#", bridge.Out, 1, "", "gw1/"),
				rule("cmd/#", bridge.In, 1, "local/", "cloud/"),
				rule("both/#", bridge.Both, 1, "", ""))}})
			waitBridge(t, gw, true)
			waitRemoteSub(t, remote, "gw1", "cloud/cmd/#")
			waitRemoteSub(t, remote, "gw1", "both/#")
			atRemote := bridgeCollector(t, raddr, "remote-sub", "gw1/sensors/#", "both/#")
			atGateway := bridgeCollector(t, gaddr, "gw-sub", "local/cmd/#", "both/#")
			gpub := pahoConnect(t, gaddr, "gw-pub", nil)
			rpub := pahoConnect(t, raddr, "remote-pub", nil)

			wait(t, gpub.Publish("sensors/t1", 1, false, "21.5"))
			expectMsg(t, atRemote, "gw1/sensors/t1", "21.5")
			wait(t, rpub.Publish("cloud/cmd/valve", 1, false, "open"))
			expectMsg(t, atGateway, "local/cmd/valve", "open")

			noLoop(t, "both", gpub, rpub, atGateway, atRemote)

			// Counted out when the remote's PUBACK reaches the gateway,
			// which may be after the remote's subscriber has the message.
			waitFor(t, "3 messages forwarded out and 2 in", func() bool {
				st := gw.Bridges()[0]
				return st.ForwardedOut >= 3 && st.ForwardedIn >= 2
			})
		})
	}
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// serveAt runs an in-process mqttd on addr until stop, which the test's
// end calls too.
func serveAt(t *testing.T, opts mqttd.Options, addr string) (srv *mqttd.Server, stop func()) {
	t.Helper()
	srv, err := mqttd.New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return srv, testutil.ServeAt(t, srv, addr)
}

// TestBridgeStoreAndForward: with the remote down, QoS 1 and QoS 2
// messages published at the gateway are acknowledged, queued and kept;
// when the remote comes back every one arrives, in order per topic, QoS
// 2 exactly once, into a persistent session there.
func TestBridgeStoreAndForward(t *testing.T) {
	const n1, n2 = 2000, 500
	raddr := freeAddr(t)
	rdir := t.TempDir()
	// The remote's subscriber leaves a persistent session behind.
	_, stopRemote := serveAt(t, mqttd.Options{DataDir: rdir}, raddr)
	sub := pahoConnect(t, raddr, "cloud-sub", func(o *paho.ClientOptions) { o.SetCleanSession(false) })
	wait(t, sub.Subscribe("gw1/q1/#", 1, nil))
	wait(t, sub.Subscribe("gw1/q2/#", 2, nil))
	sub.Disconnect(100)
	stopRemote()

	gw, gaddr := startServer(t, mqttd.Options{DataDir: t.TempDir(), Bridges: []bridge.Config{bridgeTo(raddr, "5",
		rule("q1/#", bridge.Out, 1, "", "gw1/"), rule("q2/#", bridge.Out, 2, "", "gw1/"))}})
	pub := pahoConnect(t, gaddr, "sensor", nil)
	for i := range n1 {
		wait(t, pub.Publish(fmt.Sprintf("q1/t%d", i%4), 1, false, fmt.Sprint(i)))
	}
	for i := range n2 {
		wait(t, pub.Publish(fmt.Sprintf("q2/t%d", i%2), 2, false, fmt.Sprint(i)))
	}
	if st := gw.Bridges()[0]; st.Connected || st.Queued+st.Inflight != n1+n2 {
		t.Fatalf("with the remote down: connected %v, %d queued and %d in flight; want %d held", st.Connected, st.Queued, st.Inflight, n1+n2)
	}

	remote, _ := serveAt(t, mqttd.Options{DataDir: rdir}, raddr)
	waitBridge(t, gw, true)
	waitFor(t, "the bridge's queue to drain", func() bool {
		st := gw.Bridges()[0]
		return st.Queued == 0 && st.Inflight == 0
	})
	_ = remote
	got := make(chan paho.Message, n1+n2+100)
	pahoConnect(t, raddr, "cloud-sub", func(o *paho.ClientOptions) {
		o.SetCleanSession(false).SetOrderMatters(true).SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) { got <- m })
	})
	last := map[string]int{}
	seen2 := map[string]bool{}
	for range n1 + n2 {
		m := nextMsg(t, got)
		var i int
		fmt.Sscan(string(m.Payload()), &i)
		if prev, ok := last[m.Topic()]; ok && i <= prev {
			t.Fatalf("%s: %d after %d (dup %v); bridge %+v", m.Topic(), i, prev, m.Duplicate(), gw.Bridges()[0])
		}
		last[m.Topic()] = i
		if m.Qos() == 2 {
			key := m.Topic() + "/" + string(m.Payload())
			if seen2[key] {
				t.Fatalf("QoS 2 message %s twice", key)
			}
			seen2[key] = true
		}
	}
	if len(seen2) != n2 {
		t.Errorf("%d QoS 2 messages, want %d", len(seen2), n2)
	}
}

// TestBridgeReload: SetBridges (SIGHUP) changes a bridge, whose queue is
// kept and goes out under its new rules, adds one, and removes them,
// dropping their sessions.
func TestBridgeReload(t *testing.T) {
	remote, raddr := startServer(t, mqttd.Options{})
	down := freeAddr(t)
	cfg := bridgeTo(down, "5", rule("q/#", bridge.Out, 1, "", "old/"))
	gw, gaddr := startServer(t, mqttd.Options{DataDir: t.TempDir(), Bridges: []bridge.Config{cfg}})
	pub := pahoConnect(t, gaddr, "sensor", nil)
	for i := range 5 {
		wait(t, pub.Publish("q/t", 1, false, fmt.Sprint(i)))
	}
	if st := gw.Bridges()[0]; st.Queued != 5 {
		t.Fatalf("%d queued with the remote down, want 5", st.Queued)
	}
	atRemote := bridgeCollector(t, raddr, "cloud-sub", "new/#", "second/#")

	changed := bridgeTo(raddr, "5", rule("q/#", bridge.Out, 1, "", "new/"))
	second := bridgeTo(raddr, "5", rule("s/#", bridge.Out, 1, "", "second/"))
	second.Name, second.ClientID = "second", "gw1-second"
	added, chg, removed, err := gw.SetBridges([]bridge.Config{changed, second})
	if err != nil || fmt.Sprint(added, chg, removed) != "[second] [cloud] []" {
		t.Fatalf("SetBridges = %v %v %v, %v; want [second] [cloud] []", added, chg, removed, err)
	}
	for i := range 5 {
		expectMsg(t, atRemote, "new/q/t", fmt.Sprint(i))
	}
	wait(t, pub.Publish("s/x", 1, false, "via second"))
	expectMsg(t, atRemote, "second/s/x", "via second")

	if _, _, _, err := gw.SetBridges([]bridge.Config{{Name: "bad name"}}); err == nil {
		t.Error("SetBridges took an invalid bridge")
	}
	if _, _, removed, err := gw.SetBridges(nil); err != nil || fmt.Sprint(removed) != "[cloud second]" {
		t.Fatalf("removing: %v, %v", removed, err)
	}
	if n := len(gw.Bridges()); n != 0 {
		t.Errorf("%d bridges after removing them all", n)
	}
	page, _ := gw.Clients("", 100)
	for _, c := range page {
		if strings.HasPrefix(c.ID, "$bridge/") {
			t.Errorf("session %s kept after its bridge was removed", c.ID)
		}
	}
	waitFor(t, "the remote to see the bridges go", func() bool {
		page, _ := remote.Clients("", 100)
		for _, c := range page {
			if c.Connected && strings.HasPrefix(c.ID, "gw1") {
				return false
			}
		}
		return true
	})
}

// TestBridgeStateAndMetrics: the bridge's state is retained on its $SYS
// topic (disconnected, connected, disconnected as the remote comes and
// goes), logged without its password, and exported per bridge in the
// metrics.
func TestBridgeStateAndMetrics(t *testing.T) {
	raddr := freeAddr(t)
	reg := prometheus.NewRegistry()
	var logs testutil.LockedBuffer
	cfg := bridgeTo(raddr, "5", rule("q/#", bridge.Out, 1, "", ""))
	cfg.Username, cfg.Password = "gw", "hunter2"
	gw, gaddr := startServer(t, mqttd.Options{Registerer: reg, Logger: zerolog.New(&logs), Bridges: []bridge.Config{cfg}})
	state := bridgeCollector(t, gaddr, "watcher", "$SYS/broker/bridge/cloud/state")
	expectMsg(t, state, "$SYS/broker/bridge/cloud/state", "disconnected")
	if v := metricValue(t, reg, "mqttd_bridge_connected"); v != 0 {
		t.Errorf("mqttd_bridge_connected %v with the remote down", v)
	}
	_, stop := serveAt(t, mqttd.Options{}, raddr)
	expectMsg(t, state, "$SYS/broker/bridge/cloud/state", "connected")
	pub := pahoConnect(t, gaddr, "sensor", nil)
	wait(t, pub.Publish("q/a", 1, false, "x"))
	waitFor(t, "the remote's acknowledgement", func() bool { return gw.Bridges()[0].ForwardedOut == 1 })
	if v := metricValue(t, reg, "mqttd_bridge_connected"); v != 1 {
		t.Errorf("mqttd_bridge_connected %v, want 1", v)
	}
	if v := metricValue(t, reg, "mqttd_bridge_forwarded_total"); v != 1 {
		t.Errorf("mqttd_bridge_forwarded_total %v, want 1", v)
	}
	if v := metricValue(t, reg, "mqttd_bridge_connects_total"); v != 1 {
		t.Errorf("mqttd_bridge_connects_total %v, want 1", v)
	}
	stop()
	expectMsg(t, state, "$SYS/broker/bridge/cloud/state", "disconnected")
	if st := gw.Bridges()[0]; st.LastError == "" || st.Connected {
		t.Errorf("after the remote went: %+v", st)
	}
	if out := logs.String(); strings.Contains(out, "hunter2") || !strings.Contains(out, "bridge connected to the remote broker") {
		t.Errorf("the log shows the password, or not the connection:\n%s", out)
	}
}
