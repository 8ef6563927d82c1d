package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/prometheus/client_golang/prometheus"

	"mqttd"
	"mqttd/bridge"
	"mqttd/internal/testutil"
	"mqttd/packets"
	"mqttd/persistence"
)

// broker is a served mqttd.Server with its listeners, for the HTTP tests.
type broker struct {
	srv *mqttd.Server
	ls  []net.Listener
	reg *prometheus.Registry
}

// startBroker serves a broker with a listener on 127.0.0.1:0 for each
// name, shut down when the test ends.
func startBroker(t *testing.T, opts mqttd.Options, names ...string) *broker {
	t.Helper()
	b := &broker{reg: prometheus.NewRegistry()}
	opts.Registerer = b.reg
	srv, err := mqttd.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	b.srv = srv
	for _, name := range names {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.AddListener(name, l); err != nil {
			t.Fatal(err)
		}
		b.ls = append(b.ls, l)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		<-served
	})
	return b
}

func (b *broker) addr() string { return b.ls[0].Addr().String() }

// serve serves the handler for o on a real HTTP server on 127.0.0.1:0
// and returns its base URL.
func (b *broker) serve(t *testing.T, o httpOptions) string {
	t.Helper()
	hs := httptest.NewServer(newHTTPHandler(b.srv, b.reg, o))
	t.Cleanup(hs.Close)
	return hs.URL
}

// get requests url with the given headers (Host sets the Host header)
// and returns the status and body.
func get(t *testing.T, url string, header ...string) (int, string) {
	t.Helper()
	code, _, body := do(t, "GET", url, "", header...)
	return code, body
}

// getJSON requests url, expecting 200, and decodes the body into v.
func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	code, body := get(t, url)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, code, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s: %v in %s", url, err, body)
	}
}

// rawClient is an MQTT connection the test drives packet by packet: a
// client that does not acknowledge what it receives.
type rawClient struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
	v  packets.Version
}

// dialMQTT connects and sends cp, expecting CONNACK 0.
func dialMQTT(t *testing.T, addr string, cp *packets.Connect) *rawClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	if cp.ProtocolVersion == 0 {
		cp.ProtocolVersion = packets.V311
	}
	cp.ProtocolName = "MQTT"
	c := &rawClient{t: t, nc: nc, br: bufio.NewReader(nc), v: cp.ProtocolVersion}
	c.send(cp)
	if ack, ok := c.read().(*packets.Connack); !ok || ack.ReasonCode != 0 {
		t.Fatalf("CONNACK %+v", ack)
	}
	return c
}

func (c *rawClient) send(p packets.Packet) {
	c.t.Helper()
	b, err := p.Append(nil, c.v)
	if err == nil {
		_, err = c.nc.Write(b)
	}
	if err != nil {
		c.t.Fatal(err)
	}
}

func (c *rawClient) read() packets.Packet {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	p, err := packets.ReadPacket(c.br, c.v, 0)
	if err != nil {
		c.t.Fatal(err)
	}
	return p
}

// subscribe subscribes and returns the SUBACK's codes.
func (c *rawClient) subscribe(filter string, qos byte) []packets.ReasonCode {
	c.t.Helper()
	c.send(&packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{{Filter: filter, Options: packets.SubOptions{QoS: qos}}}})
	ack, ok := c.read().(*packets.Suback)
	if !ok {
		c.t.Fatalf("got %+v, want SUBACK", ack)
	}
	return ack.ReasonCodes
}

// pahoClient connects a paho 3.1.1 client; tune adjusts its options.
func pahoClient(t *testing.T, addr, id string, tune func(*paho.ClientOptions)) paho.Client {
	t.Helper()
	o := paho.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(id).SetAutoReconnect(false).SetConnectRetry(false)
	if tune != nil {
		tune(o)
	}
	c := paho.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect %s: %v", id, tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(10) })
	return c
}

func pahoWait(t *testing.T, tok paho.Token) {
	t.Helper()
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("paho: %v", tok.Error())
	}
}

// TestHTTPAPI drives a broker with real clients and reads its state
// through the JSON API: sessions online and offline with their fields,
// a client's subscriptions (its id escaped in the path), retained topics
// with and without payloads, bad requests; and the endpoints around it.
func TestHTTPAPI(t *testing.T) {
	b := startBroker(t, mqttd.Options{}, "main")
	base := b.serve(t, httpOptions{})

	// An offline persistent session with messages queued for it.
	dev1 := pahoClient(t, b.addr(), "dev-1", func(o *paho.ClientOptions) {
		o.SetCleanSession(false).SetUsername("alice").SetKeepAlive(30 * time.Second)
	})
	pahoWait(t, dev1.Subscribe("sensors/#", 1, nil))
	dev1.Disconnect(10)
	// Until the broker has seen it go, messages for it would go out on
	// the connection, in flight rather than queued.
	waitFor(t, "dev-1 offline", func() bool { return b.srv.Stats().SessionsOnline == 0 })
	pub := pahoClient(t, b.addr(), "pub", func(o *paho.ClientOptions) { o.SetKeepAlive(60 * time.Second) })
	for range 3 {
		pahoWait(t, pub.Publish("sensors/t", 1, false, "21.5"))
	}
	pahoWait(t, pub.Publish("status/dev-1", 1, true, "online since 09:00"))
	// A 5.0 client that does not acknowledge: two messages in flight.
	cp := &packets.Connect{ProtocolVersion: packets.V5, ClientID: "dev-2", KeepAlive: 45, Username: "bob", UsernameFlag: true}
	cp.Properties.SessionExpiry = 600
	cp.Properties.Set(packets.PropSessionExpiry)
	dev2 := dialMQTT(t, b.addr(), cp)
	if codes := dev2.subscribe("cmd/#", 1); codes[0] != 1 {
		t.Fatalf("SUBACK %v", codes)
	}
	for range 2 {
		pahoWait(t, pub.Publish("cmd/reboot", 1, false, "now"))
		if p, ok := dev2.read().(*packets.Publish); !ok || p.Topic != "cmd/reboot" {
			t.Fatalf("dev-2 got %+v", p)
		}
	}
	slash := dialMQTT(t, b.addr(), &packets.Connect{ClientID: "site/3", CleanStart: true})
	slash.subscribe("site/3/#", 0)
	dots := dialMQTT(t, b.addr(), &packets.Connect{ClientID: "..", CleanStart: true})
	dots.subscribe("dots", 0)

	var clients struct {
		Clients []mqttd.ClientState
		Next    string
	}
	getJSON(t, base+"/api/v1/clients", &clients)
	ids := make([]string, len(clients.Clients))
	byID := map[string]mqttd.ClientState{}
	for i, c := range clients.Clients {
		ids[i] = c.ID
		byID[c.ID] = c
	}
	if !slices.Equal(ids, []string{"..", "dev-1", "dev-2", "pub", "site/3"}) || clients.Next != "" {
		t.Fatalf("clients %q, next %q", ids, clients.Next)
	}
	d1 := byID["dev-1"]
	if d1.Connected || !d1.Persistent || d1.Protocol != "3.1.1" || d1.Username != "alice" || d1.KeepAlive != 0 ||
		d1.Queued != 3 || d1.Inflight != 0 || d1.QueuedBytes == 0 || d1.Subscriptions != 1 || d1.Remote == "" || d1.ExpiresAt.IsZero() {
		t.Errorf("offline dev-1: %+v", d1)
	}
	d2 := byID["dev-2"]
	if !d2.Connected || !d2.Persistent || d2.Protocol != "5.0" || d2.Username != "bob" || d2.KeepAlive != 45 ||
		d2.Inflight != 2 || d2.Queued != 0 || d2.Remote != dev2.nc.LocalAddr().String() || d2.Listener != "main" || !d2.ExpiresAt.IsZero() {
		t.Errorf("dev-2: %+v", d2)
	}
	if p := byID["pub"]; !p.Connected || p.Persistent || p.KeepAlive != 60 || p.Protocol != "3.1.1" || p.Username != "" {
		t.Errorf("pub: %+v", p)
	}

	// The JSON keys, as documented in README.
	code, body := get(t, base+"/api/v1/clients?limit=1&after=..")
	var raw struct {
		Clients []map[string]any `json:"clients"`
		Next    string           `json:"next"`
	}
	if err := json.Unmarshal([]byte(body), &raw); code != 200 || err != nil || len(raw.Clients) != 1 || raw.Next != "dev-1" {
		t.Fatalf("limit=1: %d %s", code, body)
	}
	var keys []string
	for k := range raw.Clients[0] {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if want := []string{"connected", "expires_at", "id", "inflight", "keepalive", "listener", "offline_since", "persistent",
		"protocol", "queued", "queued_bytes", "remote", "subscriptions", "username"}; !slices.Equal(keys, want) {
		t.Errorf("keys of an offline client %q, want %q", keys, want)
	}

	var subs struct {
		Subscriptions []mqttd.SubscriptionState
		Next          string
	}
	getJSON(t, base+"/api/v1/clients/dev-2/subscriptions", &subs)
	if !slices.Equal(subs.Subscriptions, []mqttd.SubscriptionState{{Filter: "cmd/#", QoS: 1}}) {
		t.Errorf("dev-2's subscriptions: %+v", subs.Subscriptions)
	}
	getJSON(t, base+"/api/v1/clients/"+url.PathEscape("site/3")+"/subscriptions", &subs)
	if len(subs.Subscriptions) != 1 || subs.Subscriptions[0].Filter != "site/3/#" {
		t.Errorf("site/3's subscriptions: %+v", subs.Subscriptions)
	}
	getJSON(t, base+"/api/v1/clients/%2E%2E/subscriptions", &subs) // not cleaned away as a path's ..
	if len(subs.Subscriptions) != 1 || subs.Subscriptions[0].Filter != "dots" {
		t.Errorf("the subscriptions of ..: %+v", subs.Subscriptions)
	}
	if code, body := get(t, base+"/api/v1/clients/nobody/subscriptions"); code != 404 || !strings.Contains(body, `"error"`) {
		t.Errorf("an unknown client: %d %s", code, body)
	}

	var retained struct{ Retained []mqttd.RetainedState }
	getJSON(t, base+"/api/v1/retained", &retained)
	if r := retained.Retained; len(r) != 1 || r[0].Topic != "status/dev-1" || r[0].QoS != 1 || r[0].PayloadSize != 18 || r[0].Payload != nil {
		t.Errorf("retained: %+v", r)
	}
	getJSON(t, base+"/api/v1/retained?payload=true", &retained)
	if r := retained.Retained; len(r) != 1 || string(r[0].Payload) != "online since 09:00" {
		t.Errorf("retained with payloads: %+v", r)
	}

	for _, q := range []string{"limit=0", "limit=-3", "limit=many", "payload=maybe"} {
		if code, body := get(t, base+"/api/v1/retained?"+q); code != 400 || !strings.Contains(body, `"error"`) {
			t.Errorf("?%s: %d %s, want 400 with an error", q, code, body)
		}
	}
	if code, _ := get(t, base+"/api/v1/clients?limit=5000"); code != 200 {
		t.Errorf("limit=5000: %d, want 200 (at most 1000 given)", code)
	}

	for path, want := range map[string]string{"/healthz": "ok\n", "/readyz": "ready\n"} {
		if code, body := get(t, base+path); code != 200 || body != want {
			t.Errorf("%s: %d %q", path, code, body)
		}
	}
	if code, body := get(t, base+"/metrics"); code != 200 || !strings.Contains(body, "mqttd_") {
		t.Errorf("/metrics: %d", code)
	}
	if code, _ := get(t, base+"/debug/pprof/"); code != 404 {
		t.Errorf("/debug/pprof/ without pprof: %d, want 404", code)
	}
}

// TestHTTPPages follows next through every page: each session comes once,
// in order, however it is cut.
func TestHTTPPages(t *testing.T) {
	b := startBroker(t, mqttd.Options{}, "main")
	base := b.serve(t, httpOptions{})
	var want []string
	for i := range 25 {
		id := fmt.Sprintf("c%02d", i)
		want = append(want, id)
		c := dialMQTT(t, b.addr(), &packets.Connect{ClientID: id, CleanStart: i%2 == 0})
		if i%2 == 1 {
			c.send(&packets.Disconnect{}) // offline, kept
		}
	}
	waitFor(t, "the sessions to go offline", func() bool { return b.srv.Stats().SessionsOnline == 13 })
	for _, limit := range []int{1, 7, 25, 100} {
		var got []string
		q := url.Values{"limit": {fmt.Sprint(limit)}}
		for pages := 1; ; pages++ {
			if pages > 30 {
				t.Fatalf("limit %d: more pages than sessions", limit)
			}
			var page struct {
				Clients []mqttd.ClientState
				Next    string
			}
			getJSON(t, base+"/api/v1/clients?"+q.Encode(), &page)
			if len(page.Clients) > limit {
				t.Fatalf("limit %d: a page of %d", limit, len(page.Clients))
			}
			for _, c := range page.Clients {
				got = append(got, c.ID)
			}
			if page.Next == "" {
				break
			}
			q.Set("after", page.Next)
		}
		if !slices.Equal(got, want) {
			t.Errorf("limit %d: %q", limit, got)
		}
	}
}

// waitFor polls cond until it holds, failing the test after 10 s.
var waitFor = testutil.WaitFor

// TestHTTPToken checks who may use the API and pprof: anyone through a
// loopback address and name when no token is set; nobody on another
// address without a token (the handler told so, as tests bind only
// loopback); with a token, only who sends it. /metrics, /healthz and
// /readyz stay open throughout.
func TestHTTPToken(t *testing.T) {
	b := startBroker(t, mqttd.Options{}, "main")
	const token = "s3cret-T0ken"
	api, prof := "/api/v1/clients", "/debug/pprof/cmdline"
	for _, tc := range []struct {
		name  string
		o     httpOptions
		ask   []string // headers
		allow bool
		code  int // when not allowed
		says  string
	}{
		{"loopback, no token", httpOptions{}, nil, true, 0, ""},
		{"loopback, a rebinding page's Host", httpOptions{}, []string{"Host", "evil.example:9183"}, false, 403, "loopback"},
		{"loopback, localhost", httpOptions{}, []string{"Host", "localhost:9183"}, true, 0, ""},
		{"loopback, [::1]", httpOptions{}, []string{"Host", "[::1]:9183"}, true, 0, ""},
		{"exposed, no token", httpOptions{exposed: true}, nil, false, 403, "metrics.token"},
		{"exposed, token not sent", httpOptions{exposed: true, token: token}, nil, false, 401, "Bearer"},
		{"exposed, wrong token", httpOptions{exposed: true, token: token}, []string{"Authorization", "Bearer s3cret-T0kem"}, false, 401, "Bearer"},
		{"exposed, token's prefix", httpOptions{exposed: true, token: token}, []string{"Authorization", "Bearer s3cret"}, false, 401, "Bearer"},
		{"exposed, as basic auth", httpOptions{exposed: true, token: token}, []string{"Authorization", "Basic " + token}, false, 401, "Bearer"},
		{"exposed, token", httpOptions{exposed: true, token: token}, []string{"Authorization", "Bearer " + token, "Host", "mqttd.lan:9183"}, true, 0, ""},
		{"exposed, token, lower case", httpOptions{exposed: true, token: token}, []string{"Authorization", "bearer " + token}, true, 0, ""},
		{"loopback, token set but not sent", httpOptions{token: token}, nil, false, 401, "Bearer"},
		{"loopback, token", httpOptions{token: token}, []string{"Authorization", "Bearer " + token}, true, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.pprof = true
			base := b.serve(t, tc.o)
			for _, path := range []string{api, prof} {
				code, body := get(t, base+path, tc.ask...)
				switch {
				case tc.allow && code != 200:
					t.Errorf("%s: %d %s, want 200", path, code, body)
				case !tc.allow && (code != tc.code || !strings.Contains(body, tc.says)):
					t.Errorf("%s: %d %s, want %d saying %q", path, code, body, tc.code, tc.says)
				}
			}
			for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
				if code, _ := get(t, base+path, "Host", "evil.example"); code != 200 {
					t.Errorf("%s: %d, want 200 (open)", path, code)
				}
			}
		})
	}
}

// TestHTTPOptionsFor checks the decision the command makes from the
// address it bound: only a loopback one serves the API without a token,
// and the log warns of one that cannot serve it.
func TestHTTPOptionsFor(t *testing.T) {
	for _, tc := range []struct {
		addr    net.Addr
		token   string
		exposed bool
		warns   bool
	}{
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9183}, "", false, false},
		{&net.TCPAddr{IP: net.IPv6loopback, Port: 9183}, "", false, false},
		{&net.TCPAddr{IP: net.IPv4zero, Port: 9183}, "", true, true},
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 9183}, "", true, true},
		{&net.TCPAddr{IP: net.IPv4(192, 168, 1, 10), Port: 9183}, "", true, true},
		{&net.TCPAddr{IP: net.IPv4(192, 168, 1, 10), Port: 9183}, "t", true, false},
	} {
		o, warning := httpOptionsFor(tc.addr, metricsConfig{Token: tc.token, PProf: true}, nil)
		if o.exposed != tc.exposed || (warning != "") != tc.warns || o.token != tc.token || !o.pprof {
			t.Errorf("%s (token %q): %+v, warning %q", tc.addr, tc.token, o, warning)
		}
	}
}

// failingStore is an in-memory store whose commits fail while fail is set.
type failingStore struct {
	persistence.Store
	mu   sync.Mutex
	fail error
}

func (s *failingStore) failWith(err error) {
	s.mu.Lock()
	s.fail = err
	s.mu.Unlock()
}

func (s *failingStore) Apply(b *persistence.Batch) error {
	s.mu.Lock()
	err := s.fail
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.Store.Apply(b)
}

// TestHTTPReadyz checks /readyz: 200 while serving; 503 saying why once
// a commit failed, 200 again once the store takes writes (found by the
// broker's probe, with no client traffic); 503 naming a listener that
// stopped.
func TestHTTPReadyz(t *testing.T) {
	store := &failingStore{Store: persistence.NewMemory()}
	b := startBroker(t, mqttd.Options{Store: store}, "main", "second")
	base := b.serve(t, httpOptions{})
	readyz := func() (int, string) { return get(t, base+"/readyz") }
	waitFor(t, "/readyz 200", func() bool { code, _ := readyz(); return code == 200 })

	c := dialMQTT(t, b.addr(), &packets.Connect{ClientID: "keeper"}) // persistent: stored
	store.failWith(errors.New("no space left on the test device"))
	if codes := c.subscribe("k/#", 1); codes[0] != packets.SubackFailure {
		t.Fatalf("SUBACK %v while the store fails", codes)
	}
	if code, body := readyz(); code != 503 || !strings.Contains(body, "store") || !strings.Contains(body, "no space left on the test device") {
		t.Errorf("/readyz after a failed commit: %d %q", code, body)
	}
	store.failWith(nil)
	waitFor(t, "/readyz 200 once the store takes writes", func() bool { code, _ := readyz(); return code == 200 })

	b.ls[1].Close()
	waitFor(t, "/readyz to name the stopped listener", func() bool {
		code, body := readyz()
		return code == 503 && strings.Contains(body, "listener second stopped")
	})
}

// TestCommandHTTP runs the command with --metrics: the banner gives the
// port bound, /healthz and /readyz answer, pprof is off; then with
// MQTTD_PPROF and --metrics-token: pprof is on, and the API and pprof
// need the token.
func TestCommandHTTP(t *testing.T) {
	start := func(env map[string]string, args ...string) (base string, stop func()) {
		t.Helper()
		sig := make(chan os.Signal, 1)
		var out syncBuffer
		code := make(chan int, 1)
		args = append([]string{"--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--data-dir", filepath.Join(t.TempDir(), "data")}, args...)
		go func() { code <- run(args, func(k string) string { return env[k] }, io.Discard, &out, sig) }()
		waitOutput(t, &out, "metrics on http://")
		m := regexp.MustCompile(`metrics on (http://127\.0\.0\.1:\d+)/metrics`).FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("no metrics address in:\n%s", out.String())
		}
		return m[1], func() {
			sig <- syscall.SIGTERM
			select {
			case c := <-code:
				if c != 0 {
					t.Errorf("exit code %d:\n%s", c, out.String())
				}
			case <-time.After(15 * time.Second):
				t.Fatal("mqttd did not stop within 15 s of SIGTERM")
			}
		}
	}

	base, stop := start(nil)
	if code, body := get(t, base+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	waitFor(t, "/readyz 200", func() bool { code, _ := get(t, base+"/readyz"); return code == 200 })
	if code, _ := get(t, base+"/debug/pprof/"); code != 404 {
		t.Errorf("/debug/pprof/ without --pprof: %d, want 404", code)
	}
	if code, _ := get(t, base+"/api/v1/clients"); code != 200 {
		t.Errorf("/api/v1/clients on loopback without a token: %d", code)
	}
	stop()

	base, stop = start(map[string]string{"MQTTD_PPROF": "true"}, "--metrics-token", "tok3n")
	defer stop()
	for _, path := range []string{"/debug/pprof/", "/api/v1/clients"} {
		if code, _ := get(t, base+path); code != 401 {
			t.Errorf("%s without the token: %d, want 401", path, code)
		}
		if code, _ := get(t, base+path, "Authorization", "Bearer tok3n"); code != 200 {
			t.Errorf("%s with the token: %d, want 200", path, code)
		}
	}
}

// TestMetricsConfig checks the metrics block's keys, flags and variables.
func TestMetricsConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mqttd.yaml")
	if err := os.WriteFile(path, []byte("metrics:\n  address: 127.0.0.1:9183\n  token: from-file\n  pprof: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	load := func(env map[string]string, args ...string) (metricsConfig, error) {
		f, err := parseFlags(append([]string{"--config", path}, args...), func(k string) string { return env[k] }, io.Discard)
		if err != nil {
			return metricsConfig{}, err
		}
		cfg, err := loadConfig(f)
		return cfg.Metrics, err
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want metricsConfig
	}{
		{"file", nil, nil, metricsConfig{Address: "127.0.0.1:9183", Token: "from-file", PProf: true}},
		{"flags", nil, []string{"--pprof=false", "--metrics-token", "from-flag", "--metrics", "[::1]:1"}, metricsConfig{Address: "[::1]:1", Token: "from-flag"}},
		{"environment", map[string]string{"MQTTD_PPROF": "false", "MQTTD_METRICS_TOKEN": "from-env"}, nil, metricsConfig{Address: "127.0.0.1:9183", Token: "from-env"}},
		{"bare flag over the environment", map[string]string{"MQTTD_PPROF": "false"}, []string{"--pprof"}, metricsConfig{Address: "127.0.0.1:9183", Token: "from-file", PProf: true}},
	} {
		got, err := load(tc.env, tc.args...)
		if err != nil || got != tc.want {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
	if _, err := load(map[string]string{"MQTTD_PPROF": "yes please"}); err == nil || !strings.Contains(err.Error(), "MQTTD_PPROF") {
		t.Errorf("MQTTD_PPROF=yes please: %v", err)
	}
	if _, err := load(nil, "--metrics-token", "two words"); err == nil || !strings.Contains(err.Error(), "metrics.token") {
		t.Errorf("a token with a space: %v", err)
	}
}

// TestHTTPBridges: /api/v1/bridges shows each bridge's state and
// counters, and never its password.
func TestHTTPBridges(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := l.Addr().String()
	l.Close()
	qos := 1
	b := startBroker(t, mqttd.Options{Bridges: []bridge.Config{{Name: "cloud", Addresses: []string{down},
		Username: "gw", Password: "hunter2", Topics: []bridge.Rule{{Pattern: "q/#", Direction: bridge.Out, QoS: &qos}}}}}, "main")
	base := b.serve(t, httpOptions{})
	waitFor(t, "a failed connection attempt", func() bool { return b.srv.Bridges()[0].Failures > 0 })
	code, body := get(t, base+"/api/v1/bridges")
	if code != 200 || strings.Contains(body, "hunter2") {
		t.Fatalf("%d %s", code, body)
	}
	var got struct{ Bridges []mqttd.BridgeState }
	getJSON(t, base+"/api/v1/bridges", &got)
	if len(got.Bridges) != 1 || got.Bridges[0].Name != "cloud" || got.Bridges[0].Connected ||
		!strings.Contains(got.Bridges[0].LastError, "refused") || got.Bridges[0].Address != "tcp://"+down {
		t.Errorf("bridges: %+v", got.Bridges)
	}
}
