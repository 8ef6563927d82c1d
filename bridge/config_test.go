package bridge

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func qos(q int) *int { return &q }

func valid() Config {
	return Config{Name: "cloud", Addresses: []string{"127.0.0.1:1883"},
		Topics: []Rule{{Pattern: "sensors/#", Direction: Out}}}
}

func TestValidateNamesEachProblem(t *testing.T) {
	if errs := Validate([]Config{valid()}); len(errs) != 0 {
		t.Fatalf("a valid bridge refused: %v", errs)
	}
	for _, tc := range []struct {
		change func(*Config)
		want   string
	}{
		{func(c *Config) { c.Name = "a b" }, "bridges[0].name:"},
		{func(c *Config) { c.Addresses = nil }, "bridges[0].addresses: no address"},
		{func(c *Config) { c.Addresses = []string{"ftp://x"} }, "bridges[0].addresses[0]: \"ftp://x\": unknown scheme"},
		{func(c *Config) { c.Addresses = []string{"tcp://u:p@host:1883"} }, "not in the address"},
		{func(c *Config) { c.Protocol = "4" }, "bridges[0].protocol:"},
		{func(c *Config) { c.Password, c.PasswordEnv = "x", "X" }, "bridges[0].password: give at most one"},
		{func(c *Config) { c.KeepAlive = 1500 * 1e6 }, "bridges[0].keepalive:"},
		{func(c *Config) { c.QueuePolicy = "drop_all" }, "bridges[0].queue_policy:"},
		{func(c *Config) { c.MaxQueuedMessages = -1 }, "bridges[0].max_queued_messages:"},
		{func(c *Config) { c.TLS.CertFile = "c.pem" }, "bridges[0].tls.cert_file:"},
		{func(c *Config) { c.Topics = nil }, "bridges[0].topics: no topic rule"},
		{func(c *Config) { c.Topics[0].Direction = "" }, "bridges[0].topics[0].direction: missing"},
		{func(c *Config) { c.Topics[0].Direction = "up" }, "bridges[0].topics[0].direction: \"up\""},
		{func(c *Config) { c.Topics[0].QoS = qos(3) }, "bridges[0].topics[0].qos:"},
		{func(c *Config) { c.Topics[0].LocalPrefix = "a/+/" }, "bridges[0].topics[0].local_prefix:"},
		{func(c *Config) { c.Topics[0].Pattern = "a/#/b" }, "bridges[0].topics[0].pattern:"},
		{func(c *Config) { c.Topics[0].Pattern = "" }, "bridges[0].topics[0].pattern: empty"},
		{func(c *Config) { c.Topics[0].Pattern = "$share/g/a" }, "cannot be bridged"},
	} {
		c := valid()
		c.Topics = append([]Rule(nil), c.Topics...)
		tc.change(&c)
		errs := Validate([]Config{c})
		if len(errs) == 0 || !strings.Contains(errors.Join(errs...).Error(), tc.want) {
			t.Errorf("want an error containing %q, got %v", tc.want, errs)
		}
	}
	for name, ok := range map[string]bool{
		"": false, strings.Repeat("a", 64): true, strings.Repeat("a", 65): false, "Az09_.-": true,
		"a\n": false, "a/b": false, "é": false, "a+": false, "a:": false, "@": false, "[": false, "`": false, "{": false,
	} {
		c := valid()
		c.Name = name
		if errs := Validate([]Config{c}); (len(errs) == 0) != ok {
			t.Errorf("name %q: %v, want valid %v", name, errs, ok)
		}
	}
	if errs := Validate([]Config{valid(), valid()}); len(errs) != 1 || !strings.Contains(errs[0].Error(), "names two bridges") {
		t.Errorf("two bridges of one name: %v", errs)
	}
}

func TestMapping(t *testing.T) {
	c := Config{Topics: []Rule{
		{Pattern: "sensors/#", Direction: Out, QoS: qos(1), LocalPrefix: "site/", RemotePrefix: "gw1/"},
		{Pattern: "cmd/+", Direction: In, QoS: qos(2), LocalPrefix: "local/", RemotePrefix: "cloud/"},
		{Pattern: "both/#", Direction: Both},
		{Pattern: "", Direction: Out, QoS: qos(0), LocalPrefix: "exact/topic", RemotePrefix: "remote/exact"},
	}}
	for _, tc := range []struct {
		in, want string
		qos      byte
		ok       bool
	}{
		{"site/sensors/t1", "gw1/sensors/t1", 1, true},
		{"site/sensors", "gw1/sensors", 1, true},
		{"sensors/t1", "", 0, false},
		{"local/cmd/x", "", 0, false}, // an in rule only
		{"both/a", "both/a", DefaultQoS, true},
		{"exact/topic", "remote/exact", 0, true},
	} {
		got, q, ok := c.ToRemote(tc.in)
		if got != tc.want || q != tc.qos || ok != tc.ok {
			t.Errorf("ToRemote(%q) = %q, %d, %v; want %q, %d, %v", tc.in, got, q, ok, tc.want, tc.qos, tc.ok)
		}
	}
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"cloud/cmd/x", "local/cmd/x", true},
		{"cloud/cmd/x/y", "", false},
		{"gw1/sensors/t1", "", false}, // an out rule only
		{"both/b", "both/b", true},
	} {
		got, _, ok := c.ToLocal(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ToLocal(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
	// A prefix ending in a separator is not taken for the level above it.
	c = Config{Topics: []Rule{{Pattern: "#", Direction: Out, LocalPrefix: "a/", RemotePrefix: "b/"}}}
	if got, _, ok := c.ToRemote("a"); ok {
		t.Errorf("ToRemote(a) = %q under prefix a/", got)
	}
}

func TestParseAddress(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:1884":          "tcp://127.0.0.1:1884",
		"mqtt://host":             "tcp://host:1883",
		"mqtts://host":            "tls://host:8883",
		"ssl://host:8884":         "tls://host:8884",
		"ws://host:8080":          "ws://host:8080/mqtt",
		"wss://host/ws":           "wss://host:443/ws",
		"tcp://[::1]":             "tcp://[::1]:1883",
		"tls://cloud.example.com": "tls://cloud.example.com:8883",
	} {
		a, err := ParseAddress(in)
		if err != nil || a.String() != want {
			t.Errorf("ParseAddress(%q) = %v, %v; want %s", in, a, err, want)
		}
	}
	for _, in := range []string{"tcp://", "tcp://host:1883/path", "http://host", "tcp://a:b@host"} {
		if _, err := ParseAddress(in); err == nil {
			t.Errorf("ParseAddress(%q) accepted", in)
		}
	}
}

func TestDefaults(t *testing.T) {
	c := valid().WithDefaults("gw")
	if c.ClientID != "gw.cloud" || c.Protocol != "5" || c.KeepAlive != DefaultKeepAlive ||
		c.SessionExpiry != DefaultSessionExpiry || c.QueuePolicy != DropOldest ||
		c.MaxQueuedMessages != DefaultMaxQueuedMessages || c.StateTopic != "$SYS/broker/bridge/cloud/state" ||
		c.Topics[0].QoSOrDefault() != DefaultQoS {
		t.Errorf("defaults: %+v", c)
	}
	c = valid()
	c.CleanStart = true
	if c = c.WithDefaults("gw"); c.SessionExpiry != 0 {
		t.Errorf("a clean-start bridge asks the remote to keep its session for %s", c.SessionExpiry)
	}
}

// TestSecretNeverPrinted: the password is hidden from fmt, JSON and YAML,
// and read from a file or the environment.
func TestSecretNeverPrinted(t *testing.T) {
	c := valid()
	c.Password = "hunter2"
	j, _ := json.Marshal(c)
	y, _ := yaml.Marshal(c)
	for what, s := range map[string]string{"fmt %v": fmt.Sprintf("%v", c), "fmt %+v": fmt.Sprintf("%+v", c),
		"json": string(j), "yaml": string(y)} {
		if strings.Contains(s, "hunter2") {
			t.Errorf("%s shows the password: %s", what, s)
		}
	}
	if v, err := c.PasswordValue(); v != "hunter2" || err != nil {
		t.Errorf("PasswordValue = %q, %v", v, err)
	}
	p := filepath.Join(t.TempDir(), "pw")
	os.WriteFile(p, []byte("from-file\n"), 0o600)
	c = valid()
	c.PasswordFile = p
	if v, err := c.PasswordValue(); v != "from-file" || err != nil {
		t.Errorf("PasswordValue from a file = %q, %v", v, err)
	}
	t.Setenv("MQTTD_TEST_BRIDGE_PW", "from-env")
	c = valid()
	c.PasswordEnv = "MQTTD_TEST_BRIDGE_PW"
	if v, err := c.PasswordValue(); v != "from-env" || err != nil {
		t.Errorf("PasswordValue from the environment = %q, %v", v, err)
	}
	c.PasswordEnv = "MQTTD_TEST_BRIDGE_UNSET"
	if _, err := c.PasswordValue(); err == nil {
		t.Error("an unset variable gave a password")
	}
}
