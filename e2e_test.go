package mqttd_test

import (
	"context"
	"net"
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
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node not found: the MQTT.js tests need Node.js (hack/test installs MQTT.js with npm ci in e2e)")
	}
	_, port, _ := net.SplitHostPort(addr)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, node, "e2e/scenarios.mjs", scenario, port).CombinedOutput()
	if err != nil {
		t.Fatalf("MQTT.js %s: %v\n%s", scenario, err, out)
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
