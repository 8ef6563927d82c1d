package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// checkConfig runs `mqttd check-config` on a file holding text, expecting
// it refused; it returns what was printed and the file's name.
func checkConfig(t *testing.T, text string) (out, name string) {
	t.Helper()
	name = filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(name, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"check-config", name}, noEnv, &stdout, &stderr, nil); code != 1 {
		t.Fatalf("exit code %d, want 1; stdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	return stderr.String(), name
}

// TestCheckConfigFirstHourMistakes checks what a new user's mistakes get
// from check-config: each refused, at the line at fault, saying what to do.
func TestCheckConfigFirstHourMistakes(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"port out of range", "listeners:\n  - type: tcp\n    address: 127.0.0.1:99999\n",
			`:3: listeners[0].address: port 99999 out of range (0 to 65535)`},
		{"unknown listener type", "listeners:\n  - type: quic\n    address: 127.0.0.1:1883\n",
			`:2: listeners[0].type: unknown listener type "quic"`},
		{"unknown durability", "durability: fast\n", `:1: durability: unknown mode "fast"`},
		{"out of range", "limits:\n  max_inflight: -3\n", `:2: limits.max_inflight: must be between`},
		{"unknown log level", "log:\n  level: loud\n", `:2: log.level: unknown level "loud"`},
		{"unknown log format", "log:\n  format: xml\n", `:2: log.format: unknown format "xml"`},
		{"gc range", "gc:\n  headroom_percent: 300\n", `:2: gc.headroom_percent: 300: want 1 to 100`},
		{"empty data_dir", "log:\n  level: info\ndata_dir: \"\"\n", `:3: data_dir: must not be empty`},
		{"no listener", "listeners: []\n", `:1: listeners: at least one is needed`},
		{"misindented key", "listeners:\n  - type: tcp\n   address: 127.0.0.1:1883\n", `:3: not YAML: `},
		{"misindented setting", "log:\n  level: info\n format: json\n", `:3: not YAML: `},
		{"tab", "log:\n\tlevel: info\n", `:2: not YAML: found character that cannot start any token (YAML indents with spaces, not tabs)`},
		{"swapped letters", "log:\n  levle: info\n", `:2: log.levle: unknown setting (did you mean log.level?)`},
		{"mosquitto.conf", "# from the Pi\n\nlistener 1883\nallow_anonymous true\n",
			`:3: this looks like a Mosquitto config file (mosquitto.conf), not mqttd's YAML; convert it with ` + "`mqttd import "},
		{"one-line mosquitto.conf", "persistence true\n", `:1: this looks like a Mosquitto config file`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, name := checkConfig(t, tc.text)
			if !strings.Contains(out, name+tc.want) {
				t.Errorf("output lacks %q:\n%s", name+tc.want, out)
			}
			if n := strings.Count(out, name+":"); n != 1 {
				t.Errorf("%d problems reported, want 1:\n%s", n, out)
			}
		})
	}
}

// TestMosquittoConfigGivenToConfig checks that --config with a Mosquitto
// file points to mqttd import, as check-config does.
func TestMosquittoConfigGivenToConfig(t *testing.T) {
	out := runConfig(t, "listener 1883 0.0.0.0\nallow_anonymous false\n")
	if !strings.Contains(out, ":1: this looks like a Mosquitto config file") || !strings.Contains(out, "mqttd import ") {
		t.Errorf("output does not point to mqttd import:\n%s", out)
	}
}

// TestFlagValueNotGivenFileLine checks that a bad value from a flag is not
// reported at the line of the config file it replaced.
func TestFlagValueNotGivenFileLine(t *testing.T) {
	out := runConfig(t, "log:\n  level: info\nlisteners:\n  - address: 127.0.0.1:1883\n",
		"--log-level", "loud", "--listen", "127.0.0.1:99999")
	for _, want := range []string{"\nlog.level: unknown level \"loud\"", "\nlisteners[0].address: port 99999 out of range"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q (with no file line):\n%s", want, out)
		}
	}
}
