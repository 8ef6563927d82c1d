package e2e_test

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"mqttd/internal/testutil"
)

// The dashboard (package dashboard, served by cmd/mqttd at / of the
// management address) in headless Chromium, against the real mqttd
// binary (mqttd_test.go) with real paho clients.

// TestDashboard loads the dashboard of a running mqttd in headless
// Chromium: it lists the paho clients connected, its chart of messages
// in per second moves when paho publishes, its topics panel shows what
// the API has, its watch panel subscribes over WebSocket with MQTT.js and
// shows what paho publishes, and its kick button ends a paho client's
// connection. Screenshots (desktop and phone) go to the test's artifact
// directory (go test -artifacts keeps them).
func TestDashboard(t *testing.T) {
	bin := chromium(t)
	b := startMQTTD(t, buildMQTTD(t), true)
	if tok := pahoClient(t, b.tcp, "dash-sub", nil).Subscribe("load/#", 0, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("paho dash-sub: subscribe: %v", tok.Error())
	}
	pub := pahoClient(t, b.tcp, "dash-pub", nil)
	lost := make(chan error, 1)
	pahoClient(t, b.tcp, "dash-kick", lost)

	p := openPage(t, bin, "http://"+b.api+"/")
	waitClients(t, p, "dash-sub", "dash-pub", "dash-kick")
	checkRateChart(t, p, pub)
	checkTopics(t, p, b.api)
	watch(t, p, "dash/watch", "subscribed")
	if via := p.text(`document.getElementById('watch-via').textContent`); via != "ws://"+b.ws+"/dash-ws" {
		t.Errorf("the watch panel connected over %q, want the ws listener ws://%s/dash-ws", via, b.ws)
	}
	publish(t, pub, "dash/watch", "hello from paho")
	waitWatched(t, p, "hello from paho")
	p.screenshot(t.ArtifactDir(), "dashboard")

	clickTwice(t, p, `document.querySelector('#clients tr[data-id="dash-kick"] button.kick')`, "kick", lost)
	select {
	case err := <-lost:
		t.Logf("paho dash-kick: connection lost: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatalf("the kick did not end dash-kick's connection within 10 s; the page says %q", p.text(statusText))
	}
	testutil.WaitFor(t, "the page to say the client was disconnected", func() bool {
		return strings.Contains(p.text(statusText), `disconnected client "dash-kick"`)
	})
	checkPhone(t, p)
}

// statusText is what the page's header says: an action done, or what
// failed.
const statusText = `document.getElementById('status').textContent`

// waitClients waits for the clients table to list each id.
func waitClients(t *testing.T, p *browserPage, ids ...string) {
	t.Helper()
	testutil.WaitFor(t, fmt.Sprintf("%s in the clients table", ids), func() bool {
		listed := strings.Fields(p.text(`[...document.querySelectorAll('#clients tbody tr')].map(r => r.dataset.id).join(' ')`))
		for _, id := range ids {
			if !slices.Contains(listed, id) {
				return false
			}
		}
		return true
	})
}

// checkRateChart: the chart of messages in a second says 0 while nothing
// is published, and moves once paho publishes.
func checkRateChart(t *testing.T, p *browserPage, pub paho.Client) {
	t.Helper()
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
}

// checkTopics: the topics panel reads /api/v1/topics, which a broker may
// not have yet: it shows the counts of load/x where the API answers,
// "not available" where it answers 404.
func checkTopics(t *testing.T, p *browserPage, api string) {
	t.Helper()
	res, err := http.Get("http://" + api + "/api/v1/topics")
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
}

// watch asks the watch panel to watch filter and waits for it to reach
// state (subscribed, login).
func watch(t *testing.T, p *browserPage, filter, state string) {
	t.Helper()
	p.run(`document.getElementById('watch-filter').value = '` + filter + `';
		document.getElementById('watch-toggle').click()`)
	testutil.WaitFor(t, "the watch panel "+state, func() bool {
		got := p.text(`document.getElementById('watch').dataset.state`)
		if got != state && got != "connecting" && got != "idle" {
			t.Fatalf("watch panel: %s: %s", got, p.text(`document.getElementById('watch-state').textContent`))
		}
		return got == state
	})
}

// waitWatched waits for the watch panel to show every text given.
func waitWatched(t *testing.T, p *browserPage, texts ...string) {
	t.Helper()
	testutil.WaitFor(t, fmt.Sprintf("%q in the watch panel", texts), func() bool {
		shown := p.text(`document.getElementById('watch-messages').textContent`)
		for _, s := range texts {
			if !strings.Contains(shown, s) {
				return false
			}
		}
		return true
	})
}

// clickTwice clicks an action's button (a JavaScript expression giving
// it) twice: the first click only asks (the button, redrawn or not, says
// "sure?" and stays enabled), and must not have acted by then (nothing
// on acted).
func clickTwice(t *testing.T, p *browserPage, button, what string, acted <-chan error) {
	t.Helper()
	p.run(button + `.click()`)
	testutil.WaitFor(t, `the `+what+` button to ask "sure?"`, func() bool {
		return p.text(`(b => b.textContent + (b.disabled ? ' disabled' : ''))(`+button+`)`) == "sure?"
	})
	select {
	case err := <-acted:
		t.Fatalf("one click of %s acted (%v); it takes two", what, err)
	default:
	}
	p.run(button + `.click()`)
}

// checkPhone shows the page on a phone's screen: the optional columns
// hidden, nothing wider than the screen; and takes a screenshot.
func checkPhone(t *testing.T, p *browserPage) {
	t.Helper()
	if err := p.call("Emulation.setDeviceMetricsOverride",
		map[string]any{"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": true}, nil); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the phone layout (optional columns hidden, nothing wider than the screen)", func() bool {
		return p.text(`getComputedStyle(document.querySelector('#clients th.opt')).display`) == "none" &&
			p.text(`String(document.documentElement.scrollWidth <= window.innerWidth)`) == "true"
	})
	p.screenshot(t.ArtifactDir(), "dashboard-phone")
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
	offlineSubscriber(t, b.tcp, "tok-slow", "slow/#")

	p := openPage(t, bin, "http://"+b.api+"/")
	testutil.WaitFor(t, "the page to ask for the token", func() bool {
		return p.text(`String(!document.getElementById('token-form').hidden)`) == "true"
	})
	if ids := p.text(`document.querySelector('#clients tbody').textContent`); strings.Contains(ids, "tok-pub") {
		t.Fatalf("the clients table shows %q without the token", ids)
	}
	p.run(`document.getElementById('token-input').value = '` + token + `';
		document.getElementById('token-form').requestSubmit()`)
	waitClients(t, p, "tok-pub", "tok-slow")
	if kept := p.text(`sessionStorage.getItem('mqttd-token')`); kept != token {
		t.Errorf("sessionStorage keeps %q, want the token", kept)
	}

	watch(t, p, "tok/#", "subscribed")
	publish(t, pub, "tok/x", "through the API")
	waitWatched(t, p, "through the API", "from tok-pub")

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
	t.Logf("published %d messages to the offline session before it was highlighted", sent)
	if badge := p.text(`document.getElementById('clients-growing').textContent`); badge != "1 growing" {
		t.Errorf("the clients panel's badge says %q, want 1 growing", badge)
	}
	if pubRow := p.text(`document.querySelector('#clients tr[data-id="tok-pub"]').className`); pubRow != "" {
		t.Errorf("tok-pub, which queues nothing, is marked %q", pubRow)
	}
	p.screenshot(t.ArtifactDir(), "dashboard-token")
}

// TestDashboardAdmin: with a token set and an admin in the password and
// ACL files, the API's 401 challenges the browser for a Basic login; the
// admin's user name and password, given to the browser as its user would
// give them in its own prompt, let the dashboard show the clients and act
// (a kick), with no token entered in the page.
func TestDashboardAdmin(t *testing.T) {
	bin := chromium(t)
	mqttd := buildMQTTD(t)
	dir := t.TempDir()
	passwords, acl := filepath.Join(dir, "passwords"), filepath.Join(dir, "acl")
	if out, err := exec.Command(mqttd, "passwd", "-c", "-b", passwords, "ann", "s3cret").CombinedOutput(); err != nil {
		t.Fatalf("mqttd passwd: %v\n%s", err, out)
	}
	if err := os.WriteFile(acl, []byte("user ann\nadmin\ntopic #\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := startMQTTD(t, mqttd, false, "--password-file", passwords, "--acl-file", acl, "--metrics-token", "unused-T0ken")
	lost := make(chan error, 1)
	pahoLogin(t, b.tcp, "adm-dev", "ann", "s3cret", lost)

	p := openPage(t, bin, "about:blank")
	p.answerLogins("*/api/v1/*", "ann", "s3cret")
	p.navigate("http://" + b.api + "/")
	waitClients(t, p, "adm-dev")
	if kept := p.text(`String(sessionStorage.getItem('mqttd-token'))`); kept != "null" {
		t.Errorf("sessionStorage keeps a token %q: the page was let in by the Basic login", kept)
	}
	clickTwice(t, p, `document.querySelector('#clients tr[data-id="adm-dev"] button.kick')`, "kick", lost)
	// Polled through the page, whose requests wait for answerLogins
	// while no command is under way.
	testutil.WaitWithin(t, 10*time.Second, "the kick to end adm-dev's connection and the page to say so", func() bool {
		said := strings.Contains(p.text(statusText), `disconnected client "adm-dev"`)
		select {
		case <-lost:
			lost = nil
		default:
		}
		return said && lost == nil
	})
	p.screenshot(t.ArtifactDir(), "dashboard-admin")
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
	testutil.WaitFor(t, "the watch panel to find the ws listener", func() bool {
		return strings.HasPrefix(p.text(`document.getElementById('watch-url').value`), "ws://")
	})
	watch(t, p, "login/#", "login")
	if p.text(`String(!document.getElementById('watch-login').hidden)`) != "true" {
		t.Fatal("the watch panel asks for a login without showing its fields")
	}
	p.run(`document.getElementById('watch-user').value = 'ann';
		document.getElementById('watch-pass').value = 's3cret'`)
	watch(t, p, "login/#", "subscribed")
	publish(t, pub, "login/x", "for ann")
	waitWatched(t, p, "for ann")

	checkRepublish(t, p, pub)
	p.screenshot(t.ArtifactDir(), "dashboard-login")
}

// checkRepublish: the dead letter of orphan/x is listed with its reason,
// publisher, deliveries and size, and its republish button publishes it
// again, to a paho subscriber now there.
func checkRepublish(t *testing.T, p *browserPage, pub paho.Client) {
	t.Helper()
	row := `document.querySelector('#deadletters tr[data-topic="$DLQ/no_subscribers/orphan/x"]')`
	// The panel looks every 5 s.
	testutil.WaitWithin(t, 20*time.Second, "the dead letter listed with its reason", func() bool {
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
	clickTwice(t, p, row+`.querySelector('button')`, "republish", nil)
	select {
	case got := <-republished:
		if got != "nobody listens" {
			t.Fatalf("republished %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the dead letter was not republished within 10 s; the page says %q", p.text(statusText))
	}
	testutil.WaitFor(t, "the republished letter gone from the list", func() bool {
		return p.text(`String(`+row+` === null)`) == "true"
	})
}
