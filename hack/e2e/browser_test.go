package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"mqttd"
)

// page subscribes over WebSocket, tells the test it is ready, answers the
// message it receives and reports it; or reports what went wrong.
const page = `<!doctype html>
<html><head><title>mqttd browser test</title><script src="/mqtt.min.js"></script></head>
<body><script>
function report(path, body) { fetch(path, { method: 'POST', body }); }
window.onerror = (msg) => report('/result', 'error: ' + msg);
const client = mqtt.connect('%s', { clientId: 'browser', reconnectPeriod: 0, connectTimeout: 10000 });
client.on('error', (err) => report('/result', 'error: ' + err.message));
client.on('close', () => report('/result', 'error: connection closed'));
client.on('connect', () => {
  client.subscribe('browser/in', { qos: 1 }, (err) => {
    if (err) { report('/result', 'error: ' + err.message); return; }
    report('/ready', '');
  });
});
client.on('message', (topic, payload) => {
  client.publish('browser/out', 'echo: ' + payload.toString(), { qos: 1 }, () => report('/result', payload.toString()));
});
</script></body></html>`

// chromium returns the path of Chromium, skipping outside CI when it is
// absent; CI installs it (.ci/run).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium missing in CI: .ci/run must install it")
	}
	t.Skip("chromium not installed (apt-get install chromium chromium-driver)")
	return ""
}

// startBroker runs a broker with an MQTT listener and a WebSocket one that
// lets in pages from origin.
func startBroker(t *testing.T, origin string) (tcp, ws net.Addr) {
	t.Helper()
	srv := serveBroker(t, []mqttd.ListenerConfig{
		{Address: "127.0.0.1:0"},
		{Type: "ws", Address: "127.0.0.1:0", AllowedOrigins: []string{origin}},
	})
	addrs := srv.Addrs()
	return addrs[0], addrs[1]
}

// mqttjsBundle is MQTT.js's browser bundle, which hack/test installs with
// npm ci in e2e; skipping outside CI when it is missing, as chromium.
func mqttjsBundle(t *testing.T) []byte {
	t.Helper()
	bundle, err := os.ReadFile(filepath.Join("..", "..", "e2e", "node_modules", "mqtt", "dist", "mqtt.min.js"))
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("MQTT.js browser bundle: %v (hack/test installs it with npm ci in e2e)", err)
		}
		t.Skipf("MQTT.js browser bundle: %v (apt-get install npm; hack/test runs npm ci in e2e)", err)
	}
	return bundle
}

// TestBrowser opens a page in headless Chromium that subscribes over
// WebSocket with MQTT.js's browser bundle; paho publishes to it over
// TCP, and the page's answer comes back to paho.
func TestBrowser(t *testing.T) {
	bin := chromium(t)
	bundle := mqttjsBundle(t)
	web, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	origin := "http://" + web.Addr().String()
	tcpAddr, wsAddr := startBroker(t, origin)

	ready, result := make(chan struct{}, 1), make(chan string, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, page, "ws://"+wsAddr.String()+"/mqtt")
	})
	mux.HandleFunc("/mqtt.min.js", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		w.Write(bundle)
	})
	mux.HandleFunc("/ready", func(http.ResponseWriter, *http.Request) {
		select {
		case ready <- struct{}{}:
		default:
		}
	})
	mux.HandleFunc("/result", func(_ http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		select {
		case result <- string(b):
		default:
		}
	})
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(web)
	t.Cleanup(func() { hs.Close() })

	got := make(chan string, 1)
	c := paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + tcpAddr.String()).SetClientID("paho").SetAutoReconnect(false))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("paho connect: %v", tok.Error())
	}
	defer c.Disconnect(100)
	if tok := c.Subscribe("browser/out", 1, func(_ paho.Client, m paho.Message) { got <- string(m.Payload()) }); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("paho subscribe: %v", tok.Error())
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	browser := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--user-data-dir="+t.TempDir(), origin+"/")
	var out strings.Builder
	browser.Stdout, browser.Stderr = &out, &out
	if err := browser.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- browser.Wait() }()
	defer func() {
		cancel()
		<-exited
	}()

	wait := func(what string, ch <-chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		case s := <-result:
			t.Fatalf("the page reported %q before %s", s, what)
		case err := <-exited:
			t.Fatalf("chromium exited (%v) before %s:\n%s", err, what, out.String())
		case <-time.After(60 * time.Second):
			t.Fatalf("no %s within 60 s; chromium said:\n%s", what, out.String())
		}
	}
	wait("subscription from the page", ready)
	if tok := c.Publish("browser/in", 1, false, "from paho"); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("paho publish: %v", tok.Error())
	}
	select {
	case s := <-result:
		if s != "from paho" {
			t.Fatalf("the page reported %q, want the message from paho", s)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the page reported nothing within 30 s")
	}
	select {
	case m := <-got:
		if m != "echo: from paho" {
			t.Fatalf("paho got %q from the page", m)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("paho got nothing from the page within 30 s")
	}
}

// serveBroker runs a broker with listeners until the test ends.
func serveBroker(t *testing.T, listeners []mqttd.ListenerConfig) *mqttd.Server {
	t.Helper()
	srv, err := mqttd.New(mqttd.Options{Listeners: listeners})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, mqttd.ErrServerClosed) {
			t.Errorf("Serve returned %v", err)
		}
	})
	return srv
}
