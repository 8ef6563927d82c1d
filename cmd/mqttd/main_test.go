package main

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"mqttd"
)

func noEnv(string) string { return "" }

// runConfig runs the command with a config file and args, expecting a
// configuration error; it returns what was printed.
func runConfig(t *testing.T, yaml string, args ...string) string {
	t.Helper()
	if yaml != "" {
		path := filepath.Join(t.TempDir(), "mqttd.yaml")
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append([]string{"--config", path}, args...)
	}
	var stdout, stderr bytes.Buffer
	if code := run(args, noEnv, &stdout, &stderr, nil); code != 2 {
		t.Fatalf("exit code %d, want 2; stderr:\n%s", code, stderr.String())
	}
	return stderr.String()
}

func TestConfigErrorsNameTheKey(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		args       []string
		want       []string
	}{
		{"unknown key", "listners: []\n", nil, []string{"listners"}},
		{"unknown nested key", "limits:\n  max_inflite: 3\n", nil, []string{"max_inflite"}},
		{"wrong type", "limits:\n  max_inflight: lots\n", nil, []string{"lots"}},
		{"several bad values at once", "limits:\n  max_inflight: 70000\n  max_keepalive: -1\nlog:\n  level: loud\n", nil,
			[]string{"limits.max_inflight", "limits.max_keepalive", "log.level"}},
		{"bad listener type", "listeners:\n  - type: udp\n    address: 127.0.0.1:1\n", nil, []string{"listeners[0].type"}},
		{"bad flag value", "", []string{"--log-format", "xml"}, []string{"log.format"}},
		{"stray argument", "", []string{"serve-everything"}, []string{"serve-everything"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := runConfig(t, tc.yaml, tc.args...)
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output does not name %q:\n%s", w, out)
				}
			}
		})
	}
}

func TestConfigFileAndFlags(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mqttd.yaml")
	yaml := "listeners:\n  - type: tcp\n    address: 127.0.0.1:2883\ndata_dir: /var/lib/mqttd\nlog:\n  level: debug\n  format: json\nlimits:\n  max_inflight: 7\n  write_timeout: 3s\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"MQTTD_CONFIG": path, "MQTTD_LOG_LEVEL": "warn"}
	f, err := parseFlags([]string{"--listen", "127.0.0.1:3883", "--listen", "127.0.0.1:4883"},
		func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Listeners) != 2 || cfg.Listeners[1].Address != "127.0.0.1:4883" {
		t.Errorf("--listen did not replace the listeners: %+v", cfg.Listeners)
	}
	if cfg.DataDir != "/var/lib/mqttd" || cfg.Log.Format != "json" || cfg.Limits.MaxInflight != 7 || cfg.Limits.WriteTimeout != 3*time.Second {
		t.Errorf("file settings not applied: %+v", cfg)
	}
	if cfg.Log.Level != "warn" {
		t.Errorf("MQTTD_LOG_LEVEL did not override the file: %q", cfg.Log.Level)
	}
}

func TestDefaultsNeedNoFile(t *testing.T) {
	f, err := parseFlags(nil, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Listeners) != 2 || cfg.Listeners[0].Address != "127.0.0.1:1883" ||
		!reflect.DeepEqual(cfg.Listeners[1], mqttd.ListenerConfig{Type: "ws", Address: "127.0.0.1:8083"}) || cfg.DataDir != "data" {
		t.Errorf("defaults: %+v", cfg)
	}
}

func TestVersion(t *testing.T) {
	var stdout bytes.Buffer
	if code := run([]string{"version"}, noEnv, &stdout, io.Discard, nil); code != 0 || !strings.HasPrefix(stdout.String(), "mqttd ") {
		t.Fatalf("version: code %d output %q", code, stdout.String())
	}
}

// TestBinaryServesAndStopsOnSIGTERM runs the real binary as a child
// process: it must print where it listens and where its state is (the
// full path of a relative --data-dir), serve MQTT, create its data
// directory and exit 0 on SIGTERM.
func TestBinaryServesAndStopsOnSIGTERM(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "mqttd")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cwd := t.TempDir()
	dataDir := filepath.Join(cwd, "state")
	cmd := exec.Command(bin, "--listen", "127.0.0.1:0", "--metrics", "off", "--data-dir", "state", "--log-level", "debug")
	cmd.Dir = cwd
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	listening := regexp.MustCompile(`MQTT listening on (127\.0\.0\.1:\d+)`)
	stateIn := regexp.MustCompile(`state in (\S+) `)
	var addr, state string
	fresh := false // the banner says the store is new: nothing was in state/ before
	timeout := time.After(20 * time.Second)
	for addr == "" || state == "" || !fresh {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatal("mqttd exited before listening")
			}
			if m := listening.FindStringSubmatch(line); m != nil {
				addr = m[1]
			}
			if m := stateIn.FindStringSubmatch(line); m != nil {
				state = m[1]
			}
			fresh = fresh || strings.Contains(line, "a new store")
		case <-timeout:
			t.Fatalf("mqttd did not say where it listens (%q), keeps its state (%q) and that the store is new (%v)", addr, state, fresh)
		}
	}
	if want := filepath.Join(dataDir, "mqttd.db"); state != want {
		t.Errorf("the banner says state in %s, want %s", state, want)
	}
	if st, err := os.Stat(dataDir); err != nil || !st.IsDir() {
		t.Errorf("data directory not created: %v", err)
	}

	got := make(chan string, 1)
	c := paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + addr).SetClientID("cmd-test").SetAutoReconnect(false))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	if tok := c.Subscribe("cmd/test", 1, func(_ paho.Client, m paho.Message) { got <- string(m.Payload()) }); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	c.Publish("cmd/test", 1, false, "hello").WaitTimeout(10 * time.Second)
	select {
	case m := <-got:
		if m != "hello" {
			t.Errorf("got %q", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("message not delivered")
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	go func() {
		for range lines {
		}
	}()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
		exited <- nil
	case <-time.After(15 * time.Second):
		t.Fatal("mqttd did not stop within 15 s of SIGTERM")
	}
}

// TestExampleConfig keeps the example shipped at the repository root
// loadable, with the documented defaults.
func TestExampleConfig(t *testing.T) {
	f, err := parseFlags([]string{"--config", "../../mqttd.example.yaml"}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(f)
	if err != nil {
		t.Fatalf("mqttd.example.yaml: %v", err)
	}
	def, err := loadConfig(cliFlags{})
	if err != nil {
		t.Fatal(err)
	}
	got, want := cfg.Options.WithDefaults(), def.Options.WithDefaults()
	if !reflect.DeepEqual(got.Limits, want.Limits) || cfg.DataDir != def.DataDir || cfg.Log != def.Log || cfg.Metrics.Address != def.Metrics.Address {
		t.Errorf("the example's values differ from the defaults:\n%+v %+v\n%+v %+v", got.Limits, cfg.Metrics.Address, want.Limits, def.Metrics.Address)
	}
}

// TestStateLines checks the banner's word on the state: the store's full
// path, and for a store this start made, that nothing was kept there
// before, naming a relative data_dir and how to keep one place.
func TestStateLines(t *testing.T) {
	cwd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel := stateLines("data", "sync", true)
	if want := "state in " + filepath.Join(cwd, "data", "mqttd.db") + " (durability sync)\n"; !strings.Contains(rel, want) {
		t.Errorf("relative: %q, want %q in it", rel, want)
	}
	if !strings.Contains(rel, "a new store") || !strings.Contains(rel, `data_dir "data" is relative`) || !strings.Contains(rel, "--data-dir") {
		t.Errorf("relative, new: %q", rel)
	}
	abs := filepath.Join(t.TempDir(), "state")
	if got := stateLines(abs, "interval", true); !strings.Contains(got, "a new store") || strings.Contains(got, "relative") {
		t.Errorf("absolute, new: %q", got)
	}
	if got := stateLines("data", "sync", false); strings.Contains(got, "new store") {
		t.Errorf("a store kept before: %q", got)
	}
}
