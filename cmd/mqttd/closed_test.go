package main

import (
	"bytes"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"mqttd/internal/testutil"
)

// readmeCommand returns the arguments of the README's example command
// line holding marker, after "go run ./cmd/mqttd".
func readmeCommand(t *testing.T, marker string) []string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(readme)) {
		line, _, _ = strings.Cut(line, "#")
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "go run ./cmd/mqttd "); ok && strings.Contains(rest, marker) {
			return strings.Fields(rest)
		}
	}
	t.Fatalf("README.md has no example command with %q", marker)
	return nil
}

// TestReadmeTLSExample runs the README's TLS example as written, with the
// password file its passwd example makes, its files in a temporary
// directory and its address on loopback: a real TLS client gets in as the
// file's user, with a wrong password or without a username it is refused.
func TestReadmeTLSExample(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{"passwords": filepath.Join(dir, "passwords"),
		"server.pem": filepath.Join(dir, "server.pem"), "server.key": filepath.Join(dir, "server.key"),
		"tls://0.0.0.0:8883": "tls://127.0.0.1:0"}
	writeSelfSigned(t, files["server.pem"], files["server.key"], "broker")
	passwdArgs := readmeCommand(t, "passwd -c")
	for i, a := range passwdArgs {
		passwdArgs[i] = cmpOr(files[a], a)
	}
	var stderr bytes.Buffer
	if code := runPasswd(passwdArgs[1:], strings.NewReader("s3cret\ns3cret\n"), &stderr); code != 0 {
		t.Fatalf("mqttd %s: exit %d: %s", strings.Join(passwdArgs, " "), code, stderr.String())
	}
	user := passwdArgs[len(passwdArgs)-1]
	args := readmeCommand(t, "--listen tls://")
	for i, a := range args {
		args[i] = cmpOr(files[a], a)
	}
	c := startCommand(t, append(args, "--data-dir", filepath.Join(dir, "data"))...)
	addr := c.mqttAddr()
	login := func(user, password string) error {
		o := paho.NewClientOptions().AddBroker("ssl://" + addr).SetClientID("c-" + user).
			SetTLSConfig(&tls.Config{RootCAs: testutil.CertPool(t, files["server.pem"])}).
			SetUsername(user).SetPassword(password).SetAutoReconnect(false).SetConnectRetry(false)
		pc := paho.NewClient(o)
		tok := pc.Connect()
		if !tok.WaitTimeout(10 * time.Second) {
			t.Fatal("connect timed out")
		}
		if tok.Error() == nil {
			pc.Disconnect(10)
		}
		return tok.Error()
	}
	if err := login(user, "s3cret"); err != nil {
		t.Errorf("%s with the password file's password: %v", user, err)
	}
	if err := login(user, "wrong"); err == nil {
		t.Errorf("%s let in with a wrong password", user)
	}
	if err := login("", ""); err == nil {
		t.Error("a client without a username let in")
	}
	c.stop()
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TestClosedListenerIsAnError checks that a configuration whose listener
// lets nobody in (the README's old TLS example, with no password file)
// stops the command at start and check-config, naming the listener and
// the settings that fix it, and that allow_closed: true lets it run.
func TestClosedListenerIsAnError(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key")
	writeSelfSigned(t, cert, key, "broker")
	var stdout, stderr bytes.Buffer
	code := run([]string{"--listen", "tls://0.0.0.0:8883", "--tls-cert", cert, "--tls-key", key,
		"--data-dir", filepath.Join(dir, "data")}, noEnv, &stdout, &stderr, nil)
	if code != 2 {
		t.Fatalf("exit code %d, want 2:\n%s", code, stderr.String())
	}
	for _, w := range []string{"listeners[0]: lets nobody in", "auth.password_file", "auth.allow_closed: true"} {
		if !strings.Contains(stderr.String(), w) {
			t.Errorf("start: output does not say %q:\n%s", w, stderr.String())
		}
	}

	yaml := "listeners:\n  - type: tls\n    address: 0.0.0.0:8883\n    cert_file: " + cert + "\n    key_file: " + key + "\n"
	out, name := checkConfig(t, yaml)
	for _, w := range []string{name + ":2: listeners[0]: lets nobody in", "auth.allow_closed"} {
		if !strings.Contains(out, w) {
			t.Errorf("check-config: output does not say %q:\n%s", w, out)
		}
	}
	ok := filepath.Join(dir, "ok.yaml")
	os.WriteFile(ok, []byte(yaml+"auth:\n  allow_closed: true\n"), 0o600)
	stdout.Reset()
	stderr.Reset()
	if code := run([]string{"check-config", ok}, noEnv, &stdout, &stderr, nil); code != 0 {
		t.Errorf("check-config with allow_closed: exit %d:\n%s%s", code, stdout.String(), stderr.String())
	}
}

// TestStartHintFitsConfig checks that the banner's hint for accepting
// other machines keeps the listeners configured (a TLS one stays TLS, on
// its port, with its certificate) and the password file given, and
// points to the config file's addresses when there is one.
func TestStartHintFitsConfig(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key")
	writeSelfSigned(t, cert, key, "broker")
	c := startCommand(t, "--listen", "tls://127.0.0.1:0", "--tls-cert", cert, "--tls-key", key,
		"--data-dir", filepath.Join(dir, "data"))
	port := strings.TrimPrefix(c.mqttAddr(), "127.0.0.1:")
	c.stop()
	want := "mqttd passwd -c passwords USER && mqttd --listen tls://0.0.0.0:" + port +
		" --tls-cert " + cert + " --tls-key " + key + " --password-file passwords\n"
	if out := c.out.String(); !strings.Contains(out, want) {
		t.Errorf("the hint is not %q:\n%s", want, out)
	}

	pw := filepath.Join(dir, "pw")
	os.WriteFile(pw, nil, 0o600)
	cfg := filepath.Join(dir, "mqttd.yaml")
	os.WriteFile(cfg, []byte("listeners:\n  - address: 127.0.0.1:0\n  - type: ws\n    address: 127.0.0.1:0\n"), 0o600)
	c = startCommand(t, "--config", cfg, "--password-file", pw, "--data-dir", filepath.Join(dir, "data"))
	port = strings.TrimPrefix(c.mqttAddr(), "127.0.0.1:")
	c.stop()
	out := c.out.String()
	if want := "in " + cfg + ", set the listeners' addresses to 0.0.0.0:" + port + ", 0.0.0.0:"; !strings.Contains(out, want) {
		t.Errorf("the hint does not say %q:\n%s", want, out)
	}
	if strings.Contains(out, "mqttd passwd -c") {
		t.Errorf("the hint says to make a password file when one is given:\n%s", out)
	}
}

// TestImportClosedListener checks that a Mosquitto listener no client can
// log in to (on the network, no password file) is translated as it is,
// with allow_closed and a note saying how to let users in, and that the
// translation passes check-config.
func TestImportClosedListener(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mosquitto.conf")
	writeFile(t, path, "listener 1883\n")
	out, stderr, code := runImportFile(t, path)
	if code != importOK || !decodeImported(t, out).Auth.AllowClosed {
		t.Fatalf("exit %d (want %d), or no allow_closed:\n%s\n%s", code, importOK, out, stderr)
	}
	if !strings.Contains(stderr, "no client can log in to :1883") || !strings.Contains(stderr, "auth.password_file") {
		t.Errorf("no note on the closed listener:\n%s", stderr)
	}
	checkConfigPasses(t, out)
}
