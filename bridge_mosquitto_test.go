package mqttd_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"mqttd"
	"mqttd/bridge"
	"mqttd/internal/testutil"
)

// Bridges between mqttd and Mosquitto (Debian's package, 2.0.11 here),
// run as a child process on a free loopback port: mqttd as the gateway
// bridging to a Mosquitto remote, and Mosquitto as the gateway bridging
// to an mqttd remote.

const mosquittoBin = "/usr/sbin/mosquitto"

// startMosquitto runs Mosquitto with conf (a listener on a free loopback
// port is added) until the test ends, and returns its address once it
// accepts connections.
func startMosquitto(t *testing.T, conf string) string {
	t.Helper()
	if _, err := os.Stat(mosquittoBin); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s missing in CI: .ci/run must install mosquitto", mosquittoBin)
		}
		t.Skipf("%s not installed (apt-get install mosquitto)", mosquittoBin)
	}
	addr := freeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	text := "listener " + port + " 127.0.0.1\nallow_anonymous true\npersistence false\n" +
		"log_dest stdout\nlog_type error\nlog_type warning\nlog_type notice\n" + conf
	if os.Geteuid() == 0 {
		// Run as root, Mosquitto would switch to its own user, who cannot
		// read the test's directory.
		text += "user root\n"
	}
	path := filepath.Join(t.TempDir(), "mosquitto.conf")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	var out testutil.LockedBuffer
	cmd := exec.Command(mosquittoBin, "-c", path)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() && out.String() != "" {
			t.Logf("mosquitto's log:\n%s", out.String())
		}
	})
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return addr
		}
		select {
		case err := <-exited:
			t.Fatalf("mosquitto exited: %v\n%s", err, out.String())
		case <-deadline:
			t.Fatalf("mosquitto not listening on %s after 10 s\n%s", addr, out.String())
		case <-tick.C:
		}
	}
}

// collect subscribes a paho 3.1.1 client to filters at qos and hands on
// what it receives, in order.
func collect(t *testing.T, addr, id string, qos byte, filters ...string) <-chan paho.Message {
	t.Helper()
	ch := make(chan paho.Message, 1000)
	c := pahoConnect(t, addr, id, func(o *paho.ClientOptions) { o.SetOrderMatters(true) })
	for _, f := range filters {
		wait(t, c.Subscribe(f, qos, func(_ paho.Client, m paho.Message) { ch <- m }))
	}
	return ch
}

// expectQoS takes the next message, which must be topic/payload at qos.
func expectQoS(t *testing.T, ch <-chan paho.Message, topic, payload string, qos byte) {
	t.Helper()
	m := nextMsg(t, ch)
	if m.Topic() != topic || string(m.Payload()) != payload || m.Qos() != qos {
		t.Fatalf("got %s %q at QoS %d, want %s %q at QoS %d", m.Topic(), m.Payload(), m.Qos(), topic, payload, qos)
	}
}

// expectRetained subscribes anew to topic at addr and checks that the
// broker holds payload retained there.
func expectRetained(t *testing.T, addr, id, topic, payload string) {
	t.Helper()
	m := nextMsg(t, collect(t, addr, id, 1, topic))
	if m.Topic() != topic || string(m.Payload()) != payload || !m.Retained() {
		t.Fatalf("%s: got %s %q retained %v, want %q retained", addr, m.Topic(), m.Payload(), m.Retained(), payload)
	}
}

// TestBridgeToMosquitto: an mqttd gateway bridges to a Mosquitto remote
// over 5.0 and 3.1.1 (with the bridge bit). Out and in rules with
// prefixes carry QoS 0, 1 and 2 at their QoS, retained messages stay
// retained both ways, and a both rule brings nothing back to where it
// came from.
func TestBridgeToMosquitto(t *testing.T) {
	for _, protocol := range []string{"5", "3.1.1"} {
		t.Run(protocol, func(t *testing.T) {
			maddr := startMosquitto(t, "")
			// Retained at the remote before the bridge comes: they arrive
			// once its subscriptions are in place there.
			rpub := pahoConnect(t, maddr, "remote-pub", nil)
			wait(t, rpub.Publish("cloud/cmd/ready", 1, true, "r1"))
			wait(t, rpub.Publish("both/ready", 1, true, "r2"))
			atRemote := collect(t, maddr, "remote-sub", 2, "gw1/sensors/q/#", "both/m/#")

			gw, gaddr := startServer(t, mqttd.Options{DataDir: t.TempDir(), Bridges: []bridge.Config{bridgeTo(maddr, protocol,
				rule("sensors/#", bridge.Out, 2, "", "gw1/"),
				rule("cmd/#", bridge.In, 2, "local/", "cloud/"),
				rule("both/#", bridge.Both, 1, "", ""))}})
			ready := make(chan string, 10)
			for _, f := range []string{"local/cmd/ready", "both/ready"} {
				if _, err := gw.Subscribe(f, func(m mqttd.Message) { ready <- m.Topic }); err != nil {
					t.Fatal(err)
				}
			}
			for range 2 {
				select {
				case <-ready:
				case <-time.After(10 * time.Second):
					t.Fatalf("the remote's retained messages did not come in; bridge %+v", gw.Bridges())
				}
			}
			expectRetained(t, gaddr, "gw-ret", "local/cmd/ready", "r1")
			atGateway := collect(t, gaddr, "gw-sub", 2, "local/cmd/q/#", "both/m/#")
			gpub := pahoConnect(t, gaddr, "gw-pub", nil)

			// QoS 0, 1 and 2 each way, at their QoS (the rules allow 2).
			for q := range byte(3) {
				wait(t, gpub.Publish(fmt.Sprintf("sensors/q/%d", q), q, false, fmt.Sprint("out", q)))
				expectQoS(t, atRemote, fmt.Sprintf("gw1/sensors/q/%d", q), fmt.Sprint("out", q), q)
				wait(t, rpub.Publish(fmt.Sprintf("cloud/cmd/q/%d", q), q, false, fmt.Sprint("in", q)))
				expectQoS(t, atGateway, fmt.Sprintf("local/cmd/q/%d", q), fmt.Sprint("in", q), q)
			}

			// A retained message goes out retained: the remote keeps it.
			wait(t, gpub.Publish("sensors/ret", 1, true, "kept"))
			waitFor(t, "the retained message forwarded", func() bool {
				st := gw.Bridges()[0]
				return st.ForwardedOut >= 4 && st.Queued == 0 && st.Inflight == 0
			})
			expectRetained(t, maddr, "remote-ret", "gw1/sensors/ret", "kept")

			noLoop(t, "both/m", gpub, rpub, atGateway, atRemote)
		})
	}
}

// TestMosquittoBridgesToMqttd: Mosquitto is the gateway, bridging into an
// mqttd remote with try_private, over 3.1.1 (the bridge bit: mqttd sends
// such a client nothing it published itself, and retained flags as
// published) and 5.0 (No Local and Retain As Published on Mosquitto's
// subscriptions). Messages cross both ways, a retained message stays
// retained, and a both rule makes no loop.
func TestMosquittoBridgesToMqttd(t *testing.T) {
	for _, version := range []string{"mqttv311", "mqttv50"} {
		t.Run(version, func(t *testing.T) {
			remote, raddr := startServer(t, mqttd.Options{})
			maddr := startMosquitto(t, fmt.Sprintf(`connection mqttd
address %s
remote_clientid mosq-gw
bridge_protocol_version %s
try_private true
cleansession true
notifications false
restart_timeout 1
topic sensors/# out 1 "" gw1/
topic cmd/# in 1 local/ cloud/
topic both/# both 1
`, raddr, version))
			waitRemoteSub(t, remote, "mosq-gw", "cloud/cmd/#")
			waitRemoteSub(t, remote, "mosq-gw", "both/#")
			atRemote := bridgeCollector(t, raddr, "remote-sub", "gw1/sensors/#", "both/#")
			atGateway := bridgeCollector(t, maddr, "gw-sub", "local/cmd/#", "both/#")
			gpub := pahoConnect(t, maddr, "gw-pub", nil)
			rpub := pahoConnect(t, raddr, "remote-pub", nil)

			wait(t, gpub.Publish("sensors/t1", 1, false, "21.5"))
			expectMsg(t, atRemote, "gw1/sensors/t1", "21.5")
			wait(t, rpub.Publish("cloud/cmd/valve", 1, false, "open"))
			expectMsg(t, atGateway, "local/cmd/valve", "open")
			// Sent live as retained (Retain As Published), so Mosquitto
			// keeps it.
			wait(t, rpub.Publish("cloud/cmd/ret", 1, true, "kept"))
			expectMsg(t, atGateway, "local/cmd/ret", "kept")
			expectRetained(t, maddr, "gw-ret", "local/cmd/ret", "kept")

			noLoop(t, "both", gpub, rpub, atGateway, atRemote)
		})
	}
}
