package main

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/rs/zerolog"

	"mqttd"
	"mqttd/internal/testutil"
	"mqttd/packets"
)

// newRequest makes a request with the given headers (Host sets the Host
// header) and body.
func newRequest(t *testing.T, method, url, body string, header ...string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
		} else {
			req.Header.Set(header[i], header[i+1])
		}
	}
	return req
}

// do sends a request with the given headers (Host sets the Host header)
// and body, and returns the status, the Allow header and the body.
func do(t *testing.T, method, url, body string, header ...string) (code int, allow, text string) {
	t.Helper()
	req := newRequest(t, method, url, body, header...)
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Allow"), string(b)
}

// act sends an action from a loopback client without a token, expecting
// want, and returns the body.
func act(t *testing.T, method, url string, want int) string {
	t.Helper()
	code, _, body := do(t, method, url, "", actionHeader, "1")
	if code != want {
		t.Fatalf("%s %s: %d %s, want %d", method, url, code, body, want)
	}
	if !json.Valid([]byte(body)) {
		t.Errorf("%s %s: body %q is not JSON", method, url, body)
	}
	return body
}

// TestHTTPActions drives every action with real clients: a kick with and
// without the session, an offline session deleted, a retained message
// cleared (its topic escaped in the path), dead letters republished and
// dropped, a reload, the log level; each with its refusals: unknown ids
// and topics (404), an online session (409), $SYS (403), bad input
// (400), a wrong method (405 with Allow).
func TestHTTPActions(t *testing.T) {
	b := startBroker(t, mqttd.Options{Limits: mqttd.Limits{MaxQueued: 1}}, "main")
	var reloads atomic.Int32
	var log testutil.LockedBuffer
	base := b.serve(t, httpOptions{log: zerolog.New(&log), reload: func() error {
		if reloads.Add(1) == 2 {
			return errors.New("password file kept as it was")
		}
		return nil
	}})
	api := base + "/api/v1"

	// A 5.0 client told why, its session kept; then ended with it.
	cp := &packets.Connect{ProtocolVersion: packets.V5, ClientID: "dev/1", KeepAlive: 30}
	cp.Properties.SessionExpiry = 600
	cp.Properties.Set(packets.PropSessionExpiry)
	dev := dialMQTT(t, b.addr(), cp)
	act(t, "POST", api+"/clients/"+url.PathEscape("dev/1")+"/disconnect", 200)
	if d, ok := dev.read().(*packets.Disconnect); !ok || d.ReasonCode != packets.AdministrativeAction {
		t.Fatalf("got %+v, want DISCONNECT 0x98", d)
	}
	if st, ok := b.srv.Client("dev/1"); !ok || st.Connected {
		t.Fatalf("after the kick: %+v %v, want the session offline", st, ok)
	}
	if line := log.String(); !strings.Contains(line, `"message":"API: disconnected client \"dev/1\""`) ||
		!strings.Contains(line, `"by":"loopback"`) || !strings.Contains(line, `"remote":"127.0.0.1:`) {
		t.Errorf("the action's log line: %s", line)
	}
	act(t, "POST", api+"/clients/dev%2F1/disconnect", 409)
	act(t, "POST", api+"/clients/nobody/disconnect", 404)
	act(t, "POST", api+"/clients/dev%2F1/disconnect?session=forever", 400)
	dialMQTT(t, b.addr(), cp)
	act(t, "DELETE", api+"/sessions/dev%2F1", 409)
	act(t, "POST", api+"/clients/dev%2F1/disconnect?session=discard", 200)
	if _, ok := b.srv.Client("dev/1"); ok {
		t.Fatal("the session is still there after a kick with session=discard")
	}

	// An offline session with a full queue: a dead letter; then deleted.
	off := pahoClient(t, b.addr(), "off", func(o *paho.ClientOptions) { o.SetCleanSession(false) })
	pahoWait(t, off.Subscribe("t/#", 1, nil))
	off.Disconnect(10)
	waitFor(t, "off offline", func() bool { return b.srv.Stats().SessionsOnline == 0 })
	pub := pahoClient(t, b.addr(), "pub", nil)
	for _, topic := range []string{"t/1", "t/2", "t/3"} {
		pahoWait(t, pub.Publish(topic, 1, false, topic))
	}
	pahoWait(t, pub.Publish("r/1", 1, true, "kept"))
	waitFor(t, "two dead letters", func() bool { l, _ := b.srv.DeadLetters("", 0, 0); return len(l) == 2 })
	var letters struct {
		DeadLetters []mqttd.DeadLetterState `json:"dead_letters"`
	}
	getJSON(t, api+"/deadletters?payload=true", &letters)
	if l := letters.DeadLetters; len(l) != 2 || l[0].Topic != "$DLQ/queue_full/t/2" || l[0].ClientID != "off" || string(l[0].Payload) != "t/2" {
		t.Fatalf("dead letters %+v", l)
	}
	act(t, "DELETE", api+"/sessions/off", 200)
	act(t, "DELETE", api+"/sessions/off", 404)
	got := make(chan string, 1)
	pahoWait(t, pub.Subscribe("t/2", 1, func(_ paho.Client, m paho.Message) { got <- string(m.Payload()) }))
	act(t, "POST", api+"/deadletters/"+url.PathEscape("$DLQ/queue_full/t/2")+"/republish", 200)
	select {
	case p := <-got:
		if p != "t/2" {
			t.Errorf("republished %q", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the republished message did not arrive")
	}
	act(t, "DELETE", api+"/deadletters/"+url.PathEscape("$DLQ/queue_full/t/3"), 200)
	act(t, "DELETE", api+"/deadletters/"+url.PathEscape("$DLQ/queue_full/t/3"), 404)
	act(t, "POST", api+"/deadletters/"+url.PathEscape("$DLQ/queue_full/t/2")+"/republish", 404)
	if l, _ := b.srv.DeadLetters("", 0, 0); len(l) != 0 {
		t.Errorf("letters left: %+v", l)
	}

	act(t, "DELETE", api+"/retained/"+url.PathEscape("r/1"), 200)
	act(t, "DELETE", api+"/retained/"+url.PathEscape("r/1"), 404)
	act(t, "DELETE", api+"/retained/"+url.PathEscape("$SYS/broker/uptime"), 403)

	act(t, "POST", api+"/reload", 200)
	if body := act(t, "POST", api+"/reload", 500); !strings.Contains(body, "password file kept") {
		t.Errorf("a failed reload says %s", body)
	}

	defer zerolog.SetGlobalLevel(zerolog.GlobalLevel())
	act(t, "PUT", api+"/log/level?level=warn", 200)
	if zerolog.GlobalLevel() != zerolog.WarnLevel {
		t.Errorf("level %s after ?level=warn", zerolog.GlobalLevel())
	}
	if code, _, body := do(t, "PUT", api+"/log/level", `{"level": "debug"}`, actionHeader, "1"); code != 200 || zerolog.GlobalLevel() != zerolog.DebugLevel {
		t.Errorf("JSON body: %d %s, level %s", code, body, zerolog.GlobalLevel())
	}
	if code, _, body := do(t, "PUT", api+"/log/level", "chatty", actionHeader, "1"); code != 400 || !strings.Contains(body, "chatty") {
		t.Errorf("a bad level: %d %s, want 400 naming it", code, body)
	}

	for _, tc := range []struct{ method, path, allow string }{
		{"GET", "/reload", "POST"},
		{"GET", "/clients/x/disconnect", "POST"},
		{"POST", "/sessions/x", "DELETE"},
		{"GET", "/log/level", "PUT"},
		{"POST", "/retained/x", "DELETE"},
	} {
		if code, allow, _ := do(t, tc.method, api+tc.path, "", actionHeader, "1"); code != 405 || !strings.Contains(allow, tc.allow) {
			t.Errorf("%s %s: %d Allow %q, want 405 allowing %s", tc.method, tc.path, code, allow, tc.allow)
		}
	}
}

// TestHTTPActionRefusals: an action needs the token when one is set; on
// a loopback address without one it needs the action header, and an
// Origin naming another host is refused either way: a web page cannot
// make a visitor's browser act. The same requests with what they lack
// are served, and a read needs none of the action's proofs.
func TestHTTPActionRefusals(t *testing.T) {
	b := startBroker(t, mqttd.Options{}, "main")
	const token = "s3cret-T0ken"
	for _, tc := range []struct {
		name   string
		o      httpOptions
		header []string
		code   int
		says   string
	}{
		{"loopback, no action header", httpOptions{}, nil, 403, actionHeader},
		{"loopback, a form's content type", httpOptions{}, []string{"Content-Type", "application/x-www-form-urlencoded"}, 403, actionHeader},
		{"loopback, another site's origin", httpOptions{}, []string{actionHeader, "1", "Origin", "http://evil.example"}, 403, "Origin"},
		{"loopback, a rebinding page's Host", httpOptions{}, []string{actionHeader, "1", "Host", "evil.example:9183"}, 403, "loopback"},
		{"loopback, action header", httpOptions{}, []string{actionHeader, "1"}, 200, ""},
		{"loopback, same origin", httpOptions{}, []string{actionHeader, "1", "Origin", "http://localhost:9183", "Host", "localhost:9183"}, 200, ""},
		{"token set, not sent", httpOptions{token: token}, []string{actionHeader, "1"}, 401, "Bearer"},
		{"exposed, token set, not sent", httpOptions{token: token, exposed: true}, []string{actionHeader, "1"}, 401, "Bearer"},
		{"exposed, no token set", httpOptions{exposed: true}, []string{actionHeader, "1"}, 403, "metrics.token"},
		{"token, another site's origin", httpOptions{token: token}, []string{"Authorization", "Bearer " + token, "Origin", "http://evil.example"}, 403, "Origin"},
		{"token", httpOptions{token: token, exposed: true}, []string{"Authorization", "Bearer " + token, "Host", "mqttd.lan:9183"}, 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.reload = func() error { return nil }
			base := b.serve(t, tc.o)
			code, _, body := do(t, "POST", base+"/api/v1/reload", "", tc.header...)
			if code != tc.code || !strings.Contains(body, tc.says) {
				t.Errorf("%d %s, want %d saying %q", code, body, tc.code, tc.says)
			}
		})
	}
	base := b.serve(t, httpOptions{})
	if code, body := get(t, base+"/api/v1/overview", "Origin", "http://evil.example"); code != 200 {
		t.Errorf("a read with a foreign Origin: %d %s, want 200 (reads stay as they were)", code, body)
	}
}

// TestHTTPOverviewAndClients: the overview, a search, the offline
// sessions and one client's detail, through the API.
func TestHTTPOverviewAndClients(t *testing.T) {
	b := startBroker(t, mqttd.Options{Version: "v1.2.3"}, "main")
	base := b.serve(t, httpOptions{})
	api := base + "/api/v1"
	off := pahoClient(t, b.addr(), "sensor-off", func(o *paho.ClientOptions) { o.SetCleanSession(false) })
	pahoWait(t, off.Subscribe("x/#", 1, nil))
	off.Disconnect(10)
	waitFor(t, "sensor-off offline", func() bool { return b.srv.Stats().SessionsOnline == 0 })
	on := pahoClient(t, b.addr(), "sensor-on", nil)
	pahoWait(t, on.Subscribe("y/#", 0, nil))
	pahoClient(t, b.addr(), "pump", nil)

	var o mqttd.Overview
	getJSON(t, api+"/overview", &o)
	if o.Version != "v1.2.3" || o.SessionsOnline != 2 || o.SessionsOffline != 1 || o.Store != "none" ||
		len(o.Listeners) != 1 || o.Listeners[0].Address != b.addr() {
		t.Errorf("overview %+v", o)
	}
	var list struct {
		Clients []mqttd.ClientState `json:"clients"`
		Next    string              `json:"next"`
	}
	getJSON(t, api+"/clients?search=sensor&limit=1", &list)
	if len(list.Clients) != 1 || list.Clients[0].ID != "sensor-off" || list.Next != "sensor-off" {
		t.Errorf("search, page 1: %+v", list)
	}
	getJSON(t, api+"/clients?offline=true", &list)
	if len(list.Clients) != 1 || list.Clients[0].ID != "sensor-off" || list.Clients[0].OfflineSince.IsZero() {
		t.Errorf("offline: %+v", list)
	}
	if code, body := get(t, api+"/clients?offline=maybe"); code != 400 {
		t.Errorf("offline=maybe: %d %s", code, body)
	}
	var detail struct {
		Client        mqttd.ClientState         `json:"client"`
		Subscriptions []mqttd.SubscriptionState `json:"subscriptions"`
	}
	getJSON(t, api+"/clients/sensor-on", &detail)
	if detail.Client.ID != "sensor-on" || !detail.Client.Connected || len(detail.Subscriptions) != 1 || detail.Subscriptions[0].Filter != "y/#" {
		t.Errorf("detail %+v", detail)
	}
	if code, _ := get(t, api+"/clients/nobody"); code != 404 {
		t.Errorf("an unknown client: %d, want 404", code)
	}
}
