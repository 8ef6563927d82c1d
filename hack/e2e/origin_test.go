package e2e_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"testing"
	"time"

	"mqttd/internal/testutil"

	"mqttd"
)

// originPage connects over WebSocket once the test says the broker is up
// and tells the test whether MQTT got through; everything but the page
// itself goes to the test's report server, which outlives the page's.
const originPage = `<!doctype html>
<html><head><title>mqttd origin test</title><script src="%[1]s/mqtt.min.js"></script></head>
<body><script>
const report = (body) => fetch('%[1]s/result', { method: 'POST', mode: 'no-cors', body });
window.onerror = (msg) => report('error: ' + msg);
fetch('%[1]s/go', { mode: 'no-cors' }).then(() => {
  const client = mqtt.connect('%[2]s', { clientId: 'origin', reconnectPeriod: 0, connectTimeout: 10000 });
  client.on('connect', () => report('connected'));
  client.on('close', () => report('closed'));
});
</script></body></html>`

// TestBrowserOrigins loads pages in headless Chromium that connect to a
// broker's WebSocket listener at its default origin policy: pages from
// the same machine get in, whatever port or loopback name; a foreign
// site and a page that rebinds its name to 127.0.0.1 do not.
func TestBrowserOrigins(t *testing.T) {
	bin := chromium(t)
	bundle := mqttjsBundle(t)
	for _, tc := range []struct {
		name, pageHost, wsHost string
		// rebind serves the page on the port the broker then takes, as
		// an attacker's server does before its name points at 127.0.0.1.
		rebind bool
		want   string
	}{
		{"same host, other port", "127.0.0.1", "127.0.0.1", false, "connected"},
		{"page on localhost, URL on 127.0.0.1", "localhost", "127.0.0.1", false, "connected"},
		{"foreign site", "evil.example", "127.0.0.1", false, "closed"},
		{"DNS rebinding", "attacker.example", "attacker.example", true, "closed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, srv := originRun(t, bin, bundle, tc.pageHost, tc.wsHost, tc.rebind)
			if got != tc.want {
				t.Fatalf("page from %s to ws://%s: %q, want %q", tc.pageHost, tc.wsHost, got, tc.want)
			}
			n := srv.Stats().Rejected["websocket_origin"]
			if want := map[string]uint64{"connected": 0, "closed": 1}[tc.want]; n != want {
				t.Fatalf("%d upgrades refused for their origin, want %d", n, want)
			}
		})
	}
}

// originRun serves the page from http://pageHost:port, runs Chromium on
// it, and returns what the page reported and the broker.
func originRun(t *testing.T, bin string, bundle []byte, pageHost, wsHost string, rebind bool) (string, *mqttd.Server) {
	t.Helper()
	report, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reportURL := "http://" + report.Addr().String()
	up, result := make(chan struct{}), make(chan string, 1)
	// loaded is the page's request for /go: by then Chromium has the
	// whole page and runs its script, so the page's server may close.
	loaded := make(chan struct{}, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("/mqtt.min.js", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		w.Write(bundle)
	})
	mux.HandleFunc("/go", func(http.ResponseWriter, *http.Request) {
		select {
		case loaded <- struct{}{}:
		default:
		}
		<-up
	})
	mux.HandleFunc("/result", func(_ http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		select {
		case result <- string(b):
		default:
		}
	})
	serveHTTP(t, report, mux)

	web, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(web.Addr().String())
	wsAddr := "127.0.0.1:0"
	if rebind {
		wsAddr = "127.0.0.1:" + port
	}
	var srv *mqttd.Server
	wsURL := "ws://" + net.JoinHostPort(wsHost, port) + "/mqtt"
	if !rebind {
		srv = startWS(t, wsAddr)
		_, wsPort, _ := net.SplitHostPort(srv.Addrs()[0].String())
		wsURL = "ws://" + net.JoinHostPort(wsHost, wsPort) + "/mqtt"
	}
	page := http.NewServeMux()
	page.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, originPage, reportURL, wsURL)
	})
	hs := serveHTTP(t, web, page)
	browser := startChromium(t, bin, "http://"+net.JoinHostPort(pageHost, port)+"/")
	if rebind {
		select {
		case <-loaded:
		case <-time.After(60 * time.Second):
			t.Fatalf("Chromium did not run the page within 60 s:\n%s", browser.String())
		}
		hs.Close()
		srv = startWS(t, wsAddr)
	}
	close(up)
	select {
	case s := <-result:
		return s, srv
	case <-time.After(60 * time.Second):
		t.Fatalf("the page reported nothing within 60 s; Chromium said:\n%s", browser.String())
	}
	return "", nil
}

// serveHTTP serves h on l until the test ends.
func serveHTTP(t *testing.T, l net.Listener, h http.Handler) *http.Server {
	t.Helper()
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close() })
	return hs
}

// startWS runs a broker with one WebSocket listener at the default
// origin policy.
func startWS(t *testing.T, addr string) *mqttd.Server {
	t.Helper()
	return serveBroker(t, []mqttd.ListenerConfig{{Type: "ws", Address: addr}})
}

// startChromium opens url in headless Chromium, which resolves the test's
// made-up names to 127.0.0.1, until the test ends; it returns what
// Chromium prints.
func startChromium(t *testing.T, bin, url string) *lockedBuffer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	browser := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--host-resolver-rules=MAP attacker.example 127.0.0.1, MAP evil.example 127.0.0.1",
		"--disable-features=HttpsUpgrades", "--user-data-dir="+t.TempDir(), url)
	var out lockedBuffer
	browser.Stdout, browser.Stderr = &out, &out
	if err := browser.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		browser.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cancel()
		<-exited
	})
	return &out
}

// lockedBuffer collects output written from other goroutines while the
// test reads it.
type lockedBuffer = testutil.LockedBuffer
