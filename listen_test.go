package mqttd_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"

	"mqttd"
	"mqttd/internal/testutil"
	"mqttd/packets"
)

func TestListenerConfigErrorsNameTheKey(t *testing.T) {
	t.Parallel()
	err := mqttd.Options{Listeners: []mqttd.ListenerConfig{
		{Type: "tcp", Address: "127.0.0.1:1883", CertFile: "c.pem", Path: "/x"},
		{Type: "tls", Address: "127.0.0.1:8883", MinVersion: "1.1", CipherSuites: []string{"TLS_RSA_WITH_RC4_128_SHA"},
			RequireClientCert: true},
		{Type: "ws", Address: "127.0.0.1:8083", Path: "mqtt", ProxyProtocol: true},
		{Type: "unix", Address: "127.0.0.1:1", FileMode: "rw", ProxyTrusted: []string{"10.0.0.0/33"}},
		{Type: "udp", Address: "127.0.0.1:1"},
		{Type: "tcp", Address: "127.0.0.1:1", MaxConnections: -1, HandshakeTimeout: -time.Second},
		{Type: "tcp", Address: "127.0.0.1:99999"},
		{Type: "ws", Address: "127.0.0.1"},
		{Type: "tls", Address: "127.0.0.1:nosuchport", CertFile: "c.pem", KeyFile: "k.pem"},
	}}.Validate()
	if err == nil {
		t.Fatal("Validate accepted bad listeners")
	}
	for _, want := range []string{
		"listeners[0].cert_file: only for tls and wss", "listeners[0].path: only for ws, wss and unix",
		"listeners[1].cert_file: missing", "listeners[1].key_file: missing", "listeners[1].client_ca_file: missing",
		"listeners[1].min_version", "listeners[1].cipher_suites", "listeners[2].path: must start with /",
		"listeners[2].proxy_trusted: missing", "listeners[3].path: missing", "listeners[3].address",
		"listeners[3].file_mode", "listeners[3].proxy_trusted", "listeners[4].type",
		"listeners[5].max_connections", "listeners[5].handshake_timeout",
		`listeners[6].address: port 99999 out of range (0 to 65535) in "127.0.0.1:99999"`,
		`listeners[7].address: want host:port`, `listeners[8].address: unknown port "nosuchport"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate does not say %q:\n%v", want, err)
		}
	}
}

// TestListenTransports sends a message from a TCP publisher to
// subscribers over WebSocket, WSS, TLS and a unix socket, all opened by
// Listen from Options; each gets the same bytes.
func TestListenTransports(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "mqttd.sock")
	cert, key := writeServerCert(t)
	srv := listenAll(t, mqttd.Options{Listeners: []mqttd.ListenerConfig{
		{Address: "127.0.0.1:0"},
		{Type: "ws", Address: "127.0.0.1:0"},
		{Type: "wss", Address: "127.0.0.1:0", CertFile: cert, KeyFile: key},
		{Type: "tls", Address: "127.0.0.1:0", CertFile: cert, KeyFile: key},
		{Type: "unix", Path: sock},
	}})
	addrs := srv.Addrs()
	pool := certPool(t, cert)
	payload := make([]byte, 256)
	for i := range payload {
		payload[i] = byte(i)
	}
	got := make(chan string, 3)
	for _, url := range []string{"ws://" + addrs[1].String() + "/mqtt", "wss://" + addrs[2].String() + "/mqtt", "ssl://" + addrs[3].String()} {
		scheme, _, _ := strings.Cut(url, ":")
		c := pahoConnect(t, "", "sub-"+scheme, func(o *paho.ClientOptions) {
			o.Servers = nil
			o.AddBroker(url)
			o.SetTLSConfig(&tls.Config{RootCAs: pool})
		})
		tok := c.Subscribe("x/#", 1, func(_ paho.Client, m paho.Message) {
			if bytes.Equal(m.Payload(), payload) {
				got <- url
			} else {
				got <- url + " got other bytes"
			}
		})
		if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("subscribe over %s: %v", url, tok.Error())
		}
	}
	nc, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	ux := &rawConn{t: t, nc: nc, br: bufio.NewReader(nc), v: packets.V311}
	ux.send(&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V311, ClientID: "unix-sub", CleanStart: true})
	if ack, ok := ux.read().(*packets.Connack); !ok || ack.ReasonCode != 0 {
		t.Fatalf("CONNACK over unix: %+v", ack)
	}
	ux.send(&packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{{Filter: "x/#"}}})
	if _, ok := ux.read().(*packets.Suback); !ok {
		t.Fatal("no SUBACK over unix")
	}
	tcp := pahoConnect(t, addrs[0].String(), "tcp-pub", nil)
	if tok := tcp.Publish("x/1", 1, false, payload); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publish: %v", tok.Error())
	}
	if p, ok := ux.read().(*packets.Publish); !ok || !bytes.Equal(p.Payload, payload) {
		t.Fatalf("over unix: %+v", p)
	}
	for range 3 {
		select {
		case m := <-got:
			if strings.HasSuffix(m, "other bytes") {
				t.Fatal(m)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a subscriber got nothing within 10 s")
		}
	}
}

// TestHTTPOnMQTTPort checks that a browser or WebSocket client sent to
// the MQTT port is closed with a log line that says what happened, on
// both readers.
func TestHTTPOnMQTTPort(t *testing.T) {
	t.Parallel()
	for _, hidden := range []bool{false, true} {
		t.Run(map[bool]string{false: "poller", true: "goroutine reader"}[hidden], func(t *testing.T) {
			logs := &lockedBuffer{}
			var on []serverOption
			if hidden {
				on = append(on, wrapListener(hideSocket))
			}
			_, addr := startServer(t, mqttd.Options{Logger: zerolog.New(logs)}, on...)
			rc := dialRaw(t, addr)
			rc.write([]byte("GET /mqtt HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n\r\n"))
			rc.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := rc.br.ReadByte(); err == nil {
				t.Fatal("the broker answered an HTTP request")
			}
			waitFor(t, "the log line", func() bool { return strings.Contains(logs.String(), "HTTP request on an MQTT port") })
		})
	}
}

// TestListenerMaxConnections checks a listener's own limit through the
// engine: a connection past it is closed, and one the broker closed
// makes room again.
func TestListenerMaxConnections(t *testing.T) {
	t.Parallel()
	srv := listenAll(t, mqttd.Options{Listeners: []mqttd.ListenerConfig{{Address: "127.0.0.1:0", MaxConnections: 1}}})
	addr := srv.Addrs()[0].String()
	first := connectRaw(t, addr, &packets.Connect{ClientID: "first", CleanStart: true})
	second := dialRaw(t, addr)
	second.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := second.br.ReadByte(); err == nil || isTimeoutErr(err) {
		t.Fatalf("a connection past max_connections: read %v, want it closed", err)
	}
	if got := srv.Stats().Rejected["listener_max_connections"]; got != 1 {
		t.Errorf("rejected[listener_max_connections] = %d, want 1", got)
	}
	// A second CONNECT is a protocol error: the broker closes the first.
	first.send(&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V311, ClientID: "first"})
	waitFor(t, "the first connection to close", func() bool { return srv.Stats().Connections == 0 })
	connectRaw(t, addr, &packets.Connect{ClientID: "third", CleanStart: true})
}

// TestFailedHandshakeCounted: a connection a TLS listener closes before
// MQTT (here a plain HTTP request) is counted with the connections
// refused at accept.
func TestFailedHandshakeCounted(t *testing.T) {
	t.Parallel()
	cert, key := writeServerCert(t)
	srv := listenAll(t, mqttd.Options{Listeners: []mqttd.ListenerConfig{{Type: "tls", Address: "127.0.0.1:0", CertFile: cert, KeyFile: key}}})
	rc := dialRaw(t, srv.Addrs()[0].String())
	rc.write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	waitFor(t, "the failed handshake to be counted", func() bool { return srv.Stats().Rejected["handshake_failed"] == 1 })
}

// clientCA writes a CA certificate for client certificates to a file,
// and returns it with a function issuing certificates named cn.
func clientCA(t *testing.T) (caFile string, issue func(cn string) tls.Certificate) {
	t.Helper()
	ca := testutil.NewCA(t, "test client CA")
	return ca.File, func(cn string) tls.Certificate {
		t.Helper()
		return ca.IssuePair(t, cn)
	}
}

// TestUseIdentityAsUsername checks a mutual-TLS listener with
// use_identity_as_username: the client certificate's common name is the
// username the ACL sees, whatever username the CONNECT gives, and no
// password is asked for.
func TestUseIdentityAsUsername(t *testing.T) {
	t.Parallel()
	cert, key := writeServerCert(t)
	caFile, issue := clientCA(t)
	aclFile := writeFile(t, t.TempDir(), "acl", "user admin\ntopic readwrite #\n\npattern readwrite devices/%u/#\n")
	srv := listenAll(t, mqttd.Options{Auth: mqttd.Auth{AuthConfig: mqttd.AuthConfig{ACLFile: aclFile}},
		Listeners: []mqttd.ListenerConfig{{Type: "tls", Address: "127.0.0.1:0", CertFile: cert, KeyFile: key,
			ClientCAFile: caFile, RequireClientCert: true, UseIdentityAsUsername: true}}})
	pool := certPool(t, cert)
	nc, err := tls.Dial("tcp", srv.Addrs()[0].String(), &tls.Config{RootCAs: pool,
		Certificates: []tls.Certificate{issue("sensor-7")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	rc := &rawConn{t: t, nc: nc, br: bufio.NewReader(nc), v: packets.V5}
	rc.send(&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V5, ClientID: "s7", CleanStart: true,
		UsernameFlag: true, Username: "admin"})
	if ack, ok := rc.read().(*packets.Connack); !ok || ack.ReasonCode != 0 {
		t.Fatalf("CONNACK %+v", ack)
	}
	codes := subscribe(rc, packets.Subscription{Filter: "devices/sensor-7/#"}, packets.Subscription{Filter: "#"},
		packets.Subscription{Filter: "devices/admin/#"})
	if codes[0] != 0 || codes[1] != packets.NotAuthorized || codes[2] != packets.NotAuthorized {
		t.Errorf("SUBACK %v, want [0 0x87 0x87]: the certificate, not the CONNECT, names the client", codes)
	}
}

// TestPerListenerAuth opens two listeners from Options, the second with
// an auth block of its own: a password file there (which refuses
// anonymous clients) and an ACL; the first keeps the broker's settings
// (anonymous clients, every topic), where a username, which it cannot
// check, is taken as anonymous.
func TestPerListenerAuth(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pw := writePasswords(t, dir, "alice")
	aclFile := writeFile(t, dir, "acl", "user alice\ntopic read sensors/#\n")
	srv := listenAll(t, mqttd.Options{Listeners: []mqttd.ListenerConfig{
		{Address: "127.0.0.1:0"},
		{Address: "127.0.0.1:0", Auth: &mqttd.AuthConfig{PasswordFile: pw, ACLFile: aclFile}},
	}})
	open, guarded := srv.Addrs()[0].String(), srv.Addrs()[1].String()
	rc := connectAs(t, open, packets.V5, as("anon", "", ""))
	if codes := subscribe(rc, packets.Subscription{Filter: "#"}); codes[0] != 0 {
		t.Errorf("open listener: SUBACK %v", codes)
	}
	expectRefused(t, guarded, packets.V5, as("anon2", "", ""), packets.NotAuthorized)
	alice := connectAs(t, guarded, packets.V5, as("alice", "alice", "pw-alice"))
	if codes := subscribe(alice, packets.Subscription{Filter: "#"}, packets.Subscription{Filter: "sensors/#"}); codes[0] != packets.NotAuthorized || codes[1] != 0 {
		t.Errorf("guarded listener: SUBACK %v, want [0x87 0]", codes)
	}
	expectNothing(rc)
	// On the open listener a username is not checked, while the guarded
	// one checks it: there it counts as anonymous, and cannot pass for
	// alice (her session, her rules).
	expectRefused(t, open, packets.V5, as("alice", "alice", ""), packets.NotAuthorized)
}

// TestRestoredSessionKeepsItsListener: a persistent session restored at
// start is judged, while still offline, by the ACL of the listener its
// client last came through, as it was before the restart.
func TestRestoredSessionKeepsItsListener(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	strict := writeFile(t, dir, "strict.acl", "topic read public/#\n")
	open := writeFile(t, dir, "open.acl", "topic readwrite #\n")
	// The same address both times: a listener's name, which the session
	// keeps, is its type and address.
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := free.Addr().String()
	free.Close()
	if err := os.Mkdir(filepath.Join(dir, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	opts := mqttd.Options{DataDir: filepath.Join(dir, "data"), Auth: mqttd.Auth{AuthConfig: mqttd.AuthConfig{ACLFile: strict}},
		Listeners: []mqttd.ListenerConfig{{Address: addr, Auth: &mqttd.AuthConfig{ACLFile: open}}}}
	run := func() (*mqttd.Server, func()) {
		srv, err := mqttd.New(opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Listen(); err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() { served <- srv.Serve() }()
		return srv, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := srv.Shutdown(ctx); err != nil {
				t.Errorf("Shutdown: %v", err)
			}
			<-served
		}
	}
	_, stop := run()
	dev := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "dev"})
	if codes := subscribe(dev, packets.Subscription{Filter: "t/#", Options: packets.SubOptions{QoS: 1}}); codes[0] != 1 {
		t.Fatalf("SUBACK %v", codes)
	}
	dev.send(&packets.Disconnect{})
	dev.expectClosed()
	stop()

	srv, stop := run()
	defer stop()
	pub := connectAs(t, addr, packets.V311, as("pub", "", ""))
	publishQoS1(pub, 1, "t/x", false)
	back := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "dev"})
	expectPublish(back, "t/x")
	if n := srv.Stats().ReadDenied; n != 0 {
		t.Errorf("%d deliveries denied: the restored session was judged by the broker's ACL, not its listener's", n)
	}
}

// TestHandshakeBoundsCounted checks that a listener's max_handshakes and
// max_handshakes_per_address reach it and that what they refuse is
// counted by reason: silent connections from loopback meet only the
// first, those a PROXY header says come from one address the second.
func TestHandshakeBoundsCounted(t *testing.T) {
	t.Parallel()
	srv := listenAll(t, mqttd.Options{Listeners: []mqttd.ListenerConfig{
		{Type: "ws", Address: "127.0.0.1:0", MaxHandshakes: 2},
		{Type: "ws", Address: "127.0.0.1:0", ProxyProtocol: true, ProxyTrusted: []string{"127.0.0.1"}, MaxHandshakesPerAddress: 2,
			Auth: &mqttd.AuthConfig{AllowClosed: true}}, // nobody logs in here: behind a proxy, anonymous clients are refused
	}})
	addrs := srv.Addrs()
	for range 3 {
		dialRaw(t, addrs[0].String())
	}
	waitFor(t, "1 of 3 refused by max_handshakes", func() bool { return srv.Stats().Rejected["handshakes_pending"] == 1 })
	for range 3 {
		dialRaw(t, addrs[1].String()).write([]byte("PROXY TCP4 192.0.2.1 192.0.2.100 40000 8083\r\n"))
	}
	waitFor(t, "1 of 3 refused by max_handshakes_per_address", func() bool {
		return srv.Stats().Rejected["handshakes_pending_per_address"] == 1
	})
}

// TestHandshakeBoundsValidated checks that a negative bound is an error
// naming its key.
func TestHandshakeBoundsValidated(t *testing.T) {
	t.Parallel()
	_, err := mqttd.New(mqttd.Options{Listeners: []mqttd.ListenerConfig{
		{Type: "tls", Address: "127.0.0.1:0", CertFile: "c", KeyFile: "k", MaxHandshakes: -1, MaxHandshakesPerAddress: -1},
	}})
	for _, key := range []string{"listeners[0].max_handshakes:", "listeners[0].max_handshakes_per_address:"} {
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("error %v does not name %s", err, key)
		}
	}
}

// TestWebSocketOriginCounted checks that a page refused for its origin is
// counted as websocket_origin.
func TestWebSocketOriginCounted(t *testing.T) {
	t.Parallel()
	srv := listenAll(t, mqttd.Options{Listeners: []mqttd.ListenerConfig{{Type: "ws", Address: "127.0.0.1:0"}}})
	_, port, _ := net.SplitHostPort(srv.Addrs()[0].String())
	h := http.Header{"Origin": {"http://attacker.example:" + port}, "Host": {"attacker.example:" + port}}
	ws, resp, err := websocket.DefaultDialer.Dial("ws://"+srv.Addrs()[0].String()+"/mqtt", h)
	if err == nil {
		ws.Close()
		t.Fatal("a page whose name was rebound to 127.0.0.1 was let in")
	}
	if resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("upgrade: %v (%v), want 403", err, resp)
	}
	if got := srv.Stats().Rejected["websocket_origin"]; got != 1 {
		t.Fatalf("rejected[websocket_origin] = %d, want 1", got)
	}
}

// TestOverviewListenerPaths: the overview gives a ws or wss listener's
// URL path (the dashboard's watch panel connects there), the default
// when none is configured, and none for other listeners.
func TestOverviewListenerPaths(t *testing.T) {
	t.Parallel()
	srv := listenAll(t, mqttd.Options{Listeners: []mqttd.ListenerConfig{
		{Address: "127.0.0.1:0"},
		{Type: "ws", Address: "127.0.0.1:0"},
		{Type: "ws", Address: "127.0.0.1:0", Path: "/broker/ws"},
	}})
	var paths []string
	for _, l := range srv.Overview().Listeners {
		paths = append(paths, l.Path)
	}
	if want := []string{"", "/mqtt", "/broker/ws"}; !slices.Equal(paths, want) {
		t.Fatalf("the overview's listener paths %q, want %q", paths, want)
	}
}
