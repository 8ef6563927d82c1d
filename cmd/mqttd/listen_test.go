package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"mqttd"
	"mqttd/auth/passwd"
	"mqttd/internal/testutil"
)

func TestListenForms(t *testing.T) {
	f, err := parseFlags([]string{"--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-client-ca", "ca.pem", "--password-file", "p",
		"--listen", "127.0.0.1:1", "--listen", "tcp://127.0.0.1:2", "--listen", "tls://0.0.0.0:8883",
		"--listen", "ws://127.0.0.1:8083", "--listen", "wss://127.0.0.1:8084/broker", "--listen", "unix:///run/mqttd.sock"},
		noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(f)
	if err != nil {
		t.Fatal(err)
	}
	want := []mqttd.ListenerConfig{
		{Type: "tcp", Address: "127.0.0.1:1"},
		{Type: "tcp", Address: "127.0.0.1:2"},
		{Type: "tls", Address: "0.0.0.0:8883", CertFile: "c.pem", KeyFile: "k.pem", ClientCAFile: "ca.pem", RequireClientCert: true},
		{Type: "ws", Address: "127.0.0.1:8083"},
		{Type: "wss", Address: "127.0.0.1:8084", Path: "/broker", CertFile: "c.pem", KeyFile: "k.pem", ClientCAFile: "ca.pem", RequireClientCert: true},
		{Type: "unix", Path: "/run/mqttd.sock"},
	}
	if !reflect.DeepEqual(cfg.Listeners, want) {
		t.Errorf("listeners:\n%+v\nwant\n%+v", cfg.Listeners, want)
	}
	out := runConfig(t, "", "--listen", "quic://127.0.0.1:1", "--listen", "tls://127.0.0.1:2")
	for _, w := range []string{`unknown scheme "quic"`, "listeners[1].cert_file: missing"} {
		if !strings.Contains(out, w) {
			t.Errorf("output does not say %q:\n%s", w, out)
		}
	}
}

// TestListenersNamedAsConfigured checks that a listener on 0.0.0.0 is
// shown and logged as 0.0.0.0 (IPv4 only, as bound), not as [::].
func TestListenersNamedAsConfigured(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "passwords")
	if err := passwd.Set(pw, "alice", []byte("a-secret"), true); err != nil {
		t.Fatal(err)
	}
	c := startCommand(t, "--listen", "0.0.0.0:0", "--listen", "ws://[::]:0", "--password-file", pw,
		"--data-dir", filepath.Join(dir, "data"))
	c.wait("(ws://[::]:")
	out := c.out.String()
	for _, re := range []string{`MQTT listening on 0\.0\.0\.0:\d+ \(tcp\)`, `"listener":"tcp:0\.0\.0\.0:\d+"`,
		`MQTT listening on \[::\]:\d+ \(ws://\[::\]:\d+/mqtt\)`, `"listener":"ws:\[::\]:\d+"`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("output does not match %s:\n%s", re, out)
		}
	}
	c.stop()
}

// syncBuffer is the command's stderr, written by the broker's goroutines
// while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitOutput polls out until it holds want, failing after 10 s.
func waitOutput(t *testing.T, out *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !strings.Contains(out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("output does not say %q:\n%s", want, out.String())
		}
		<-tick.C
	}
}

// writeSelfSigned writes a self-signed certificate for 127.0.0.1 with
// common name cn and its key.
var writeSelfSigned = testutil.WriteSelfSigned

// TestSIGHUPReloadsCertificates runs the command with a TLS listener and
// sends it SIGHUP with a broken certificate file, then a good one.
func TestSIGHUPReloadsCertificates(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeSelfSigned(t, cert, key, "first")
	c := startCommand(t, "--listen", "tls://127.0.0.1:0", "--tls-cert", cert, "--tls-key", key,
		"--data-dir", filepath.Join(dir, "data"))
	os.WriteFile(cert, []byte("not a certificate"), 0o600)
	c.sig <- syscall.SIGHUP
	c.wait("reload on SIGHUP failed")
	c.wait("kept the previous certificates")
	writeSelfSigned(t, cert, key, "second")
	c.sig <- syscall.SIGHUP
	c.wait("and the listeners' certificates on SIGHUP")
	c.stop()
}

// command is the mqttd command running in a test through run, with what
// it prints.
type command struct {
	t    *testing.T
	sig  chan os.Signal
	out  syncBuffer
	code chan int
}

// startCommand runs the command with args (and JSON logs) and waits until
// it listens.
func startCommand(t *testing.T, args ...string) *command {
	t.Helper()
	c := &command{t: t, sig: make(chan os.Signal, 1), code: make(chan int, 1)}
	// Off unless the test asks for it: tests never take the default's
	// port, which a broker on the machine may have.
	args = append(append([]string{"--metrics", "off"}, args...), "--log-format", "json")
	go func() { c.code <- run(args, noEnv, io.Discard, &c.out, c.sig) }()
	c.wait("MQTT listening on")
	return c
}

// wait waits until the output says want.
func (c *command) wait(want string) {
	c.t.Helper()
	waitOutput(c.t, &c.out, want)
}

// mqttAddr is the first MQTT address the command printed.
func (c *command) mqttAddr() string {
	return regexp.MustCompile(`MQTT listening on (127\.0\.0\.1:\d+)`).FindStringSubmatch(c.out.String())[1]
}

// stop sends SIGTERM and checks that the command exits with 0 in time.
func (c *command) stop() {
	c.t.Helper()
	c.sig <- syscall.SIGTERM
	select {
	case code := <-c.code:
		if code != 0 {
			c.t.Fatalf("exit code %d:\n%s", code, c.out.String())
		}
	case <-time.After(15 * time.Second):
		c.t.Fatal("mqttd did not stop within 15 s of SIGTERM")
	}
}

// TestSIGHUPReloadsAuth runs the command with a password file given in
// its config and adds a user on SIGHUP: refused before, let in after. A
// password file broken meanwhile keeps the users it had.
func TestSIGHUPReloadsAuth(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "passwords")
	if err := passwd.Set(pw, "alice", []byte("a-secret"), true); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "mqttd.yaml")
	os.WriteFile(cfg, []byte("listeners:\n  - address: 127.0.0.1:0\nauth:\n  password_file: "+pw+"\n"), 0o600)
	c := startCommand(t, "--config", cfg, "--data-dir", filepath.Join(dir, "data"))
	c.wait("listener open to users of " + pw + " only")
	addr := c.mqttAddr()
	login := func(user, password string) error {
		pc := paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + addr).SetClientID("c-" + user).
			SetUsername(user).SetPassword(password).SetAutoReconnect(false).SetConnectRetry(false))
		tok := pc.Connect()
		if !tok.WaitTimeout(10 * time.Second) {
			t.Fatal("connect timed out")
		}
		if tok.Error() == nil {
			pc.Disconnect(10)
		}
		return tok.Error()
	}
	if err := login("bob", "b-secret"); err == nil {
		t.Fatal("bob let in before he was added")
	}
	if err := passwd.Set(pw, "bob", []byte("b-secret"), false); err != nil {
		t.Fatal(err)
	}
	c.sig <- syscall.SIGHUP
	c.wait("reloaded the password and ACL files")
	if err := login("bob", "b-secret"); err != nil {
		t.Fatalf("bob after SIGHUP: %v", err)
	}
	os.WriteFile(pw, []byte("no colon here\n"), 0o600)
	c.sig <- syscall.SIGHUP
	c.wait("password file kept as it was")
	if err := login("alice", "a-secret"); err != nil {
		t.Fatalf("alice after a broken reload: %v", err)
	}
	c.stop()
}
