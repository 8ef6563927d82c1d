package mqttd_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"mqttd"
)

// runMQTTJS runs one scenario of e2e/scenarios.mjs, MQTT.js in Node,
// against the broker at addr. hack/test (and CI) install MQTT.js with
// npm ci in e2e.
func runMQTTJS(t *testing.T, scenario, addr string) {
	t.Helper()
	_, port, _ := net.SplitHostPort(addr)
	runMQTTJSAt(t, scenario, port, nil)
}

// runMQTTJSAt runs a scenario against target, a port on 127.0.0.1 or a
// ws:// or wss:// URL, with env added to the environment.
func runMQTTJSAt(t *testing.T, scenario, target string, env []string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat("e2e/node_modules/mqtt")
	}
	if err != nil {
		// CI installs both (.ci/run, hack/test); elsewhere hack/test names
		// what is missing.
		if os.Getenv("CI") == "true" {
			t.Fatalf("MQTT.js in Node: %v (hack/test installs MQTT.js with npm ci in e2e)", err)
		}
		t.Skipf("MQTT.js in Node: %v (apt-get install nodejs npm; hack/test runs npm ci in e2e)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "e2e/scenarios.mjs", scenario, target)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("MQTT.js %s at %s: %v\n%s", scenario, target, err, out)
	}
}

// TestMQTTJS runs MQTT.js, from Node, over TCP through the 5.0 features a
// browser dashboard or a Node service uses: will delay, session expiry,
// topic aliases both ways and request/response.
func TestMQTTJS(t *testing.T) {
	for _, scenario := range []string{"will-delay", "topic-aliases", "request-response"} {
		t.Run(scenario, func(t *testing.T) {
			_, addr := startServer(t, mqttd.Options{})
			runMQTTJS(t, scenario, addr)
		})
	}
	t.Run("session-expiry", func(t *testing.T) {
		srv, addr := startServer(t, mqttd.Options{})
		runMQTTJS(t, "session-expiry", addr)
		waitFor(t, "the session to expire", func() bool { return srv.Stats().SessionsExpired == 1 })
		runMQTTJS(t, "session-expired", addr)
	})
}

// TestMQTTJSWebSocket runs MQTT.js from Node over ws:// and wss://, as a
// browser dashboard connects.
func TestMQTTJSWebSocket(t *testing.T) {
	cert, key := writeServerCert(t)
	srv := listenAll(t, mqttd.Options{Listeners: []mqttd.ListenerConfig{
		{Type: "ws", Address: "127.0.0.1:0"},
		{Type: "wss", Address: "127.0.0.1:0", CertFile: cert, KeyFile: key},
	}})
	addrs := srv.Addrs()
	for _, scenario := range []string{"topic-aliases", "request-response", "big-message"} {
		t.Run("ws "+scenario, func(t *testing.T) {
			runMQTTJSAt(t, scenario, "ws://"+addrs[0].String()+"/mqtt", nil)
		})
		t.Run("wss "+scenario, func(t *testing.T) {
			runMQTTJSAt(t, scenario, "wss://"+addrs[1].String()+"/mqtt", []string{"MQTTD_CA=" + cert})
		})
	}
}
