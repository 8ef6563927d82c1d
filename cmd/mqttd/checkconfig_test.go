package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mqttd/auth/passwd"
	"mqttd/internal/testutil"
)

// TestCheckConfig runs `mqttd check-config` on a file with one of each
// kind of mistake and checks that each is reported with its key and line,
// in the user's words: no Go type names, a close key for a misspelt one.
func TestCheckConfig(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte(`listeners:
  - type: tcp
    adress: 127.0.0.1:1883
limits:
  max_inflite: 3
  max_queued: lots
  write_timeout: soon
  refuse_keepalive_v311: maybe
auth:
  password_file: `+filepath.Join(dir, "missing")+`
log: loud
`), 0o600)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"check-config", bad}, noEnv, &stdout, &stderr, nil); code != 1 {
		t.Fatalf("exit code %d, want 1:\n%s", code, stderr.String())
	}
	out := stderr.String()
	for _, want := range []string{
		`bad.yaml:3: listeners[0].adress: unknown setting (did you mean listeners[0].address?)`,
		`bad.yaml:5: limits.max_inflite: unknown setting (did you mean limits.max_inflight?)`,
		`bad.yaml:6: limits.max_queued: want a whole number, got "lots"`,
		`bad.yaml:7: limits.write_timeout: want a duration like 10s, 1m30s or 2h, got "soon"`,
		`bad.yaml:8: limits.refuse_keepalive_v311: want true or false, got "maybe"`,
		`bad.yaml:11: log: want keys under it`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, goName := range []string{"mqttd.", "int", "time.Duration", "struct"} {
		if strings.Contains(out, goName) {
			t.Errorf("output names a Go type (%q):\n%s", goName, out)
		}
	}

	pw := filepath.Join(dir, "passwd")
	if err := passwd.Set(pw, "alice", []byte("x"), true); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "ok.yaml")
	os.WriteFile(missing, []byte("auth:\n  password_file: "+filepath.Join(dir, "nope")+"\n"), 0o600)
	stderr.Reset()
	if code := run([]string{"check-config", missing}, noEnv, &stdout, &stderr, nil); code != 1 ||
		!strings.Contains(stderr.String(), "auth.password_file") {
		t.Errorf("a missing password file: exit %d\n%s", code, stderr.String())
	}
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte("auth:\n  password_file: "+pw+"\nlimits:\n  max_queued: 10\n"), 0o600)
	stdout.Reset()
	if code := run([]string{"check-config", good}, noEnv, &stdout, &stderr, nil); code != 0 || !strings.Contains(stdout.String(), "ok") {
		t.Errorf("a good file: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	stdout.Reset()
	if code := run([]string{"check-config", "../../mqttd.example.yaml"}, noEnv, &stdout, &stderr, nil); code != 0 {
		t.Errorf("the example config: exit %d\n%s", code, stderr.String())
	}
}

// TestCheckConfigBridges: a bridge's mistakes are reported with their
// line: an unknown key with a suggestion, a bad address, a rule with no
// direction (at the rule's line), a bad queue policy; and none of it
// shows the password.
func TestCheckConfigBridges(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bridges.yaml")
	os.WriteFile(bad, []byte(`bridges:
  - name: cloud
    addresses: ["ftp://127.0.0.1:1884"]
    password: hunter2
    queue_policy: drop_everything
    topics:
      - pattern: "sensors/#"
        qos: 1
`), 0o600)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"check-config", bad}, noEnv, &stdout, &stderr, nil); code != 1 {
		t.Fatalf("exit code %d, want 1:\n%s", code, stderr.String())
	}
	out := stderr.String()
	for _, want := range []string{
		`bridges.yaml:3: bridges[0].addresses[0]: "ftp://127.0.0.1:1884": unknown scheme ftp (want tcp, tls, ws or wss)`,
		`bridges.yaml:5: bridges[0].queue_policy: "drop_everything": want drop_oldest, drop_new or block_publishers`,
		`bridges.yaml:7: bridges[0].topics[0].direction: missing: want out, in or both`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "hunter2") {
		t.Errorf("the password is shown:\n%s", out)
	}
	os.WriteFile(bad, []byte("bridges:\n  - name: cloud\n    adresses: [\"127.0.0.1:1884\"]\n"), 0o600)
	stderr.Reset()
	run([]string{"check-config", bad}, noEnv, &stdout, &stderr, nil)
	if want := `bridges.yaml:3: bridges[0].adresses: unknown setting (did you mean bridges[0].addresses?)`; !strings.Contains(stderr.String(), want) {
		t.Errorf("missing %q in:\n%s", want, stderr.String())
	}
}

// TestCheckConfigMetricsTLS: check-config loads metrics.tls's files as the
// broker would, and refuses a certificate without its key; an ACL file
// with an admin line is a good one.
func TestCheckConfigMetricsTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testutil.NewCA(t, "test CA")
	cert, key := ca.Issue(t, "server", time.Now().Add(time.Hour), true)
	pf, af := loginFiles(t)
	for _, tc := range []struct {
		name, yaml string
		code       int
		says       string
	}{
		{"good", "metrics:\n  tls:\n    cert_file: " + cert + "\n    key_file: " + key + "\nauth:\n  password_file: " + pf + "\n  acl_file: " + af + "\n", 0, "ok"},
		{"key is the certificate", "metrics:\n  tls:\n    cert_file: " + cert + "\n    key_file: " + cert + "\n", 1, "metrics.tls"},
		{"missing", "metrics:\n  tls:\n    cert_file: " + filepath.Join(dir, "nope.pem") + "\n    key_file: " + key + "\n", 1, "metrics.tls"},
		{"no key", "metrics:\n  tls:\n    cert_file: " + cert + "\n", 1, "metrics.tls: cert_file and key_file go together"},
	} {
		file := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(file, []byte(tc.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		code := run([]string{"check-config", file}, noEnv, &stdout, &stderr, nil)
		if code != tc.code || !strings.Contains(stdout.String()+stderr.String(), tc.says) {
			t.Errorf("%s: exit %d, %s%s; want %d saying %q", tc.name, code, stdout.String(), stderr.String(), tc.code, tc.says)
		}
	}
}
