package e2e_test

import (
	"bufio"
	"net/http"
	"os"
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

// buildMQTTD builds the mqttd binary and returns its path.
func buildMQTTD(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "mqttd")
	if out, err := exec.Command("go", "build", "-o", bin, "mqttd/cmd/mqttd").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startMQTTD runs the mqttd binary with a TCP listener, with ws a
// WebSocket listener (path /dash-ws, which the dashboard must take from
// the overview), and the management API, each on 127.0.0.1 port 0, and
// the extra flags given; it reads their addresses from its banner, and
// stops it (SIGTERM) at cleanup.
func startMQTTD(t *testing.T, bin string, ws bool, extra ...string) brokerAddrs {
	t.Helper()
	args := []string{"--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--data-dir", t.TempDir()}
	if ws {
		args = append(args, "--listen", "ws://127.0.0.1:0/dash-ws")
	}
	cmd := exec.Command(bin, append(args, extra...)...)
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
	var a brokerAddrs
	find := map[*regexp.Regexp]*string{
		regexp.MustCompile(`MQTT listening on (127\.0\.0\.1:\d+) \(tcp\)`): &a.tcp,
		regexp.MustCompile(`metrics on http://(127\.0\.0\.1:\d+)/metrics`): &a.api,
	}
	if ws {
		find[regexp.MustCompile(`MQTT listening on (127\.0\.0\.1:\d+) \(ws://`)] = &a.ws
	}
	timeout := time.After(20 * time.Second)
	for a.tcp == "" || a.api == "" || ws && a.ws == "" {
		select {
		case line := <-lines:
			for re, to := range find {
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
	return pahoLogin(t, addr, id, "", "", lost)
}

// pahoLogin is pahoClient with a username and password.
func pahoLogin(t *testing.T, addr, id, user, password string, lost chan<- error) paho.Client {
	t.Helper()
	o := paho.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(id).SetAutoReconnect(false).
		SetUsername(user).SetPassword(password)
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
	b := startMQTTD(t, buildMQTTD(t), true)
	if tok := pahoClient(t, b.tcp, "dash-sub", nil).Subscribe("load/#", 0, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("paho dash-sub: subscribe: %v", tok.Error())
	}
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

	// The topics panel reads /api/v1/topics, which a broker may not have
	// yet: it shows the counts where the API answers, "not available"
	// where it answers 404.
	res, err := http.Get("http://" + b.api + "/api/v1/topics")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	switch res.StatusCode {
	case http.StatusNotFound:
		testutil.WaitFor(t, "the topics panel to say not available", func() bool {
			return p.text(`document.getElementById('topics').dataset.state`) == "unavailable" &&
				strings.Contains(p.text(`document.getElementById('topics-note').textContent`), "Not available")
		})
	case http.StatusOK:
		testutil.WaitFor(t, "load/x in the topics panel with its messages", func() bool {
			n := p.text(`document.querySelector('#topics tr[data-topic="load/x"]').cells[1].textContent`)
			return n != "" && n != "0"
		})
	default:
		t.Fatalf("GET /api/v1/topics: %s", res.Status)
	}

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

	kickButton := `document.querySelector('#clients tr[data-id="dash-kick"] button.kick')`
	p.run(kickButton + `.click()`)
	// The first click only asks: the button, redrawn or not, says so and
	// stays enabled.
	testutil.WaitFor(t, `the kick button to ask "sure?"`, func() bool {
		return p.text(`(b => b.textContent + (b.disabled ? ' disabled' : ''))(`+kickButton+`)`) == "sure?"
	})
	select {
	case err := <-lost:
		t.Fatalf("one click kicked the client (%v); it takes two", err)
	default:
	}
	p.run(kickButton + `.click()`)
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
	testutil.WaitFor(t, "the phone layout (optional columns hidden, nothing wider than the screen)", func() bool {
		return p.text(`getComputedStyle(document.querySelector('#clients th.opt')).display`) == "none" &&
			p.text(`String(document.documentElement.scrollWidth <= window.innerWidth)`) == "true"
	})
	p.screenshot(shots, "dashboard-phone")
}

// TestDashboardToken loads the dashboard of a mqttd whose API needs a
// token and that has no WebSocket listener: the page asks for the token
// on the API's 401 and then shows the clients; its watch panel reads the
// API's stream instead (which names the publisher); and an offline
// session whose queue keeps growing is highlighted.
func TestDashboardToken(t *testing.T) {
	bin := chromium(t)
	const token = "dash-T0ken"
	b := startMQTTD(t, buildMQTTD(t), false, "--metrics-token", token)
	pub := pahoClient(t, b.tcp, "tok-pub", nil)
	slow := paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + b.tcp).SetClientID("tok-slow").
		SetCleanSession(false).SetAutoReconnect(false))
	if tok := slow.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("paho tok-slow: connect: %v", tok.Error())
	}
	if tok := slow.Subscribe("slow/#", 1, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("paho tok-slow: subscribe: %v", tok.Error())
	}
	slow.Disconnect(100) // its session stays, and queues what slow/# gets

	p := openPage(t, bin, "http://"+b.api+"/")
	testutil.WaitFor(t, "the page to ask for the token", func() bool {
		return p.text(`String(!document.getElementById('token-form').hidden)`) == "true"
	})
	if ids := p.text(`document.querySelector('#clients tbody').textContent`); strings.Contains(ids, "tok-pub") {
		t.Fatalf("the clients table shows %q without the token", ids)
	}
	p.run(`document.getElementById('token-input').value = '` + token + `';
		document.getElementById('token-form').requestSubmit()`)
	testutil.WaitFor(t, "the clients table with the token", func() bool {
		ids := p.text(`[...document.querySelectorAll('#clients tbody tr')].map(r => r.dataset.id).join(' ')`)
		return strings.Contains(ids, "tok-pub") && strings.Contains(ids, "tok-slow")
	})
	if kept := p.text(`sessionStorage.getItem('mqttd-token')`); kept != token {
		t.Errorf("sessionStorage keeps %q, want the token", kept)
	}

	p.run(`document.getElementById('watch-filter').value = 'tok/#';
		document.getElementById('watch-toggle').click()`)
	testutil.WaitFor(t, "the watch panel watching through the API", func() bool {
		state := p.text(`document.getElementById('watch').dataset.state`)
		if state == "error" || state == "closed" {
			t.Fatalf("watch panel: %s: %s", state, p.text(`document.getElementById('watch-state').textContent`))
		}
		return state == "subscribed"
	})
	publish(t, pub, "tok/x", "through the API")
	testutil.WaitFor(t, "the published message, with its publisher, in the watch panel", func() bool {
		text := p.text(`document.getElementById('watch-messages').textContent`)
		return strings.Contains(text, "through the API") && strings.Contains(text, "from tok-pub")
	})

	// The page looks every 2 s: a queue that grew at 3 looks in a row
	// takes 6 to 8 s to be highlighted.
	sent, last := 0, time.Time{}
	testutil.WaitWithin(t, 20*time.Second, "tok-slow's growing queue highlighted", func() bool {
		if time.Since(last) > 200*time.Millisecond {
			if tok := pub.Publish("slow/x", 1, false, "more"); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
				t.Fatalf("paho publish: %v", tok.Error())
			}
			sent++
			last = time.Now()
		}
		return p.text(`document.querySelector('#clients tr[data-id="tok-slow"]').className`) == "growing"
	})
	if badge := p.text(`document.getElementById('clients-growing').textContent`); badge != "1 growing" {
		t.Errorf("the clients panel's badge says %q, want 1 growing", badge)
	}
	if pubRow := p.text(`document.querySelector('#clients tr[data-id="tok-pub"]').className`); pubRow != "" {
		t.Errorf("tok-pub, which queues nothing, is marked %q", pubRow)
	}
	t.Logf("published %d messages to the offline session before it was highlighted", sent)
	p.screenshot(t.ArtifactDir(), "dashboard-token")
}

// TestDashboardLogin: the watch panel asks for a username and password
// when the WebSocket listener refuses it without them, and subscribes
// with the ones given; a dead letter (a message nobody subscribed to) is
// listed with its reason, and its republish button publishes it again.
func TestDashboardLogin(t *testing.T) {
	bin := chromium(t)
	mqttd := buildMQTTD(t)
	dir := t.TempDir()
	passwords, config := filepath.Join(dir, "passwords"), filepath.Join(dir, "mqttd.yaml")
	if out, err := exec.Command(mqttd, "passwd", "-c", "-b", passwords, "ann", "s3cret").CombinedOutput(); err != nil {
		t.Fatalf("mqttd passwd: %v\n%s", err, out)
	}
	if err := os.WriteFile(config, []byte("dead_letters: {reasons: [no_subscribers]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := startMQTTD(t, mqttd, true, "--password-file", passwords, "--config", config)
	pub := pahoLogin(t, b.tcp, "login-pub", "ann", "s3cret", nil)
	if tok := pub.Publish("orphan/x", 1, false, "nobody listens"); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("paho publish: %v", tok.Error())
	}

	p := openPage(t, bin, "http://"+b.api+"/")
	watchState := func() string {
		return p.text(`document.getElementById('watch').dataset.state`)
	}
	testutil.WaitFor(t, "the watch panel to find the ws listener", func() bool {
		return strings.HasPrefix(p.text(`document.getElementById('watch-url').value`), "ws://")
	})
	p.run(`document.getElementById('watch-filter').value = 'login/#';
		document.getElementById('watch-toggle').click()`)
	testutil.WaitFor(t, "the watch panel to ask for a username and password", func() bool {
		return watchState() == "login" && p.text(`String(!document.getElementById('watch-login').hidden)`) == "true"
	})
	p.run(`document.getElementById('watch-user').value = 'ann';
		document.getElementById('watch-pass').value = 's3cret';
		document.getElementById('watch-toggle').click()`)
	testutil.WaitFor(t, "the watch panel subscribed with the password", func() bool {
		state := watchState()
		if state == "error" || state == "closed" {
			t.Fatalf("watch panel: %s: %s", state, p.text(`document.getElementById('watch-state').textContent`))
		}
		return state == "subscribed"
	})
	publish(t, pub, "login/x", "for ann")
	testutil.WaitFor(t, "the published message in the watch panel", func() bool {
		return strings.Contains(p.text(`document.getElementById('watch-messages').textContent`), "for ann")
	})

	row := `document.querySelector('#deadletters tr[data-topic="$DLQ/no_subscribers/orphan/x"]')`
	testutil.WaitFor(t, "the dead letter listed with its reason", func() bool {
		return p.text(`[...`+row+`.cells].map(c => c.textContent).join(' ')`) == "orphan/x no_subscribers login-pub 0 "+
			p.text(row+`.cells[4].textContent`)+" 14 republishdrop"
	})
	republished := make(chan string, 1)
	if tok := pub.Subscribe("orphan/x", 1, func(_ paho.Client, m paho.Message) {
		select {
		case republished <- string(m.Payload()):
		default:
		}
	}); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("paho subscribe: %v", tok.Error())
	}
	p.run(row + `.querySelector('button').click()`)
	testutil.WaitFor(t, `the republish button to ask "sure?"`, func() bool {
		return p.text(row+`.querySelector('button').textContent`) == "sure?"
	})
	p.run(row + `.querySelector('button').click()`)
	select {
	case got := <-republished:
		if got != "nobody listens" {
			t.Fatalf("republished %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the dead letter was not republished within 10 s; the page says %q",
			p.text(`document.getElementById('status').textContent`))
	}
	testutil.WaitFor(t, "the republished letter gone from the list", func() bool {
		return p.text(`String(`+row+` === null)`) == "true"
	})
	p.screenshot(t.ArtifactDir(), "dashboard-login")
}
