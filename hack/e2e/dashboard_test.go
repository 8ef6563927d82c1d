package e2e_test

import (
	"bufio"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"mqttd/internal/testutil"
)

// The dashboard (package dashboard, served by cmd/mqttd at / of the
// management address) in headless Chromium, against the real mqttd
// binary with real paho clients.

// brokerAddrs are where a started mqttd listens.
type brokerAddrs struct{ tcp, ws, api string }

// startMQTTD builds and runs the mqttd binary with a TCP and a WebSocket
// listener (path /dash-ws, which the dashboard must take from the
// overview) and the management API, each on 127.0.0.1 port 0, and reads
// their addresses from its banner; it is stopped (SIGTERM) at cleanup.
func startMQTTD(t *testing.T) brokerAddrs {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "mqttd")
	if out, err := exec.Command("go", "build", "-o", bin, "mqttd/cmd/mqttd").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "--listen", "127.0.0.1:0", "--listen", "ws://127.0.0.1:0/dash-ws",
		"--metrics", "127.0.0.1:0", "--data-dir", t.TempDir())
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines, exited := make(chan string, 100), make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default: // nobody reads the log past the banner
			}
		}
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Error("mqttd did not stop within 10 s of SIGTERM")
		}
	})
	tcpRe := regexp.MustCompile(`MQTT listening on (127\.0\.0\.1:\d+) \(tcp\)`)
	wsRe := regexp.MustCompile(`MQTT listening on (127\.0\.0\.1:\d+) \(ws://`)
	apiRe := regexp.MustCompile(`metrics on http://(127\.0\.0\.1:\d+)/metrics`)
	var a brokerAddrs
	timeout := time.After(20 * time.Second)
	for a.tcp == "" || a.ws == "" || a.api == "" {
		select {
		case line := <-lines:
			for re, to := range map[*regexp.Regexp]*string{tcpRe: &a.tcp, wsRe: &a.ws, apiRe: &a.api} {
				if m := re.FindStringSubmatch(line); m != nil {
					*to = m[1]
				}
			}
		case <-exited:
			t.Fatal("mqttd exited before saying where it listens")
		case <-timeout:
			t.Fatalf("mqttd did not say where it listens within 20 s: %+v", a)
		}
	}
	return a
}

// pahoClient connects a paho client with id to addr; lost, when not nil,
// gets the error of a connection the broker ended.
func pahoClient(t *testing.T, addr, id string, lost chan<- error) paho.Client {
	t.Helper()
	o := paho.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(id).SetAutoReconnect(false)
	if lost != nil {
		o.SetConnectionLostHandler(func(_ paho.Client, err error) { lost <- err })
	}
	c := paho.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("paho %s: connect: %v", id, tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(100) })
	return c
}

func publish(t *testing.T, c paho.Client, topic, payload string) {
	t.Helper()
	if tok := c.Publish(topic, 0, false, payload); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("paho publish: %v", tok.Error())
	}
}

// TestDashboard loads the dashboard of a running mqttd in headless
// Chromium: it lists the paho clients connected, its chart of messages
// in per second moves when paho publishes, its watch panel subscribes
// over WebSocket with MQTT.js and shows what paho publishes, and its kick
// button ends a paho client's connection. Screenshots (desktop and
// phone) go to the test's artifact directory (go test -artifacts keeps
// them).
func TestDashboard(t *testing.T) {
	bin := chromium(t)
	b := startMQTTD(t)
	pahoClient(t, b.tcp, "dash-sub", nil).Subscribe("load/#", 0, nil).WaitTimeout(10 * time.Second)
	pub := pahoClient(t, b.tcp, "dash-pub", nil)
	lost := make(chan error, 1)
	pahoClient(t, b.tcp, "dash-kick", lost)
	shots := t.ArtifactDir()

	p := openPage(t, bin, "http://"+b.api+"/")
	testutil.WaitFor(t, "the paho clients in the clients table", func() bool {
		ids := p.text(`[...document.querySelectorAll('#clients tbody tr')].map(r => r.dataset.id).join(' ')`)
		return strings.Contains(ids, "dash-sub") && strings.Contains(ids, "dash-pub") && strings.Contains(ids, "dash-kick")
	})
	chartIn := func() (last float64, points int) {
		v := p.text(`(c => c.dataset.last + ' ' + c.dataset.points)(document.getElementById('chart-in'))`)
		l, n, _ := strings.Cut(v, " ")
		last, _ = strconv.ParseFloat(l, 64)
		points, _ = strconv.Atoi(n)
		return last, points
	}
	testutil.WaitFor(t, "the chart of messages in with a value", func() bool { _, n := chartIn(); return n > 0 })
	if last, _ := chartIn(); last != 0 {
		t.Fatalf("messages in/s before anything was published: %v", last)
	}
	sent, lastBatch := 0, time.Time{}
	testutil.WaitFor(t, "the chart of messages in to move", func() bool {
		if time.Since(lastBatch) > 50*time.Millisecond {
			for range 10 {
				publish(t, pub, "load/x", "m")
				sent++
			}
			lastBatch = time.Now()
		}
		last, _ := chartIn()
		return last > 0
	})
	t.Logf("published %d messages before the chart moved", sent)

	p.run(`document.getElementById('watch-filter').value = 'dash/watch';
		document.getElementById('watch-toggle').click()`)
	testutil.WaitFor(t, "the watch panel subscribed over WebSocket", func() bool {
		state := p.text(`document.getElementById('watch').dataset.state`)
		if state == "error" || state == "login" || state == "closed" {
			t.Fatalf("watch panel: %s: %s", state, p.text(`document.getElementById('watch-state').textContent`))
		}
		return state == "subscribed"
	})
	if via := p.text(`document.getElementById('watch-via').textContent`); via != "ws://"+b.ws+"/dash-ws" {
		t.Errorf("the watch panel connected over %q, want the ws listener ws://%s/dash-ws", via, b.ws)
	}
	publish(t, pub, "dash/watch", "hello from paho")
	testutil.WaitFor(t, "the published message in the watch panel", func() bool {
		return strings.Contains(p.text(`document.getElementById('watch-messages').textContent`), "hello from paho")
	})
	p.screenshot(shots, "dashboard")

	kick := `document.querySelector('#clients tr[data-id="dash-kick"] button.kick').click()`
	p.run(kick) // the first click asks "sure?"
	select {
	case err := <-lost:
		t.Fatalf("one click kicked the client (%v); it takes two", err)
	default:
	}
	p.run(kick)
	select {
	case err := <-lost:
		t.Logf("paho dash-kick: connection lost: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatalf("the kick did not end dash-kick's connection within 10 s; the page says %q",
			p.text(`document.getElementById('status').textContent`))
	}
	testutil.WaitFor(t, "the page to say the client was disconnected", func() bool {
		return strings.Contains(p.text(`document.getElementById('status').textContent`), `disconnected client "dash-kick"`)
	})

	if err := p.call("Emulation.setDeviceMetricsOverride",
		map[string]any{"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": true}, nil); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the phone layout (one column, optional columns hidden)", func() bool {
		return p.text(`getComputedStyle(document.querySelector('#clients th.opt')).display`) == "none"
	})
	p.screenshot(shots, "dashboard-phone")
}
