package main

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rs/zerolog"
)

// TestMetricsAddressDefault: with nothing configured the metrics address
// (and with it the management API) is 127.0.0.1:9183, where mqttd ctl
// looks; off, from a flag, the environment or the file, or an empty
// address in the file, serves none.
func TestMetricsAddressDefault(t *testing.T) {
	load := func(yaml string, env map[string]string, args ...string) string {
		t.Helper()
		if yaml != "" {
			path := filepath.Join(t.TempDir(), "mqttd.yaml")
			if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			args = append(args, "--config", path)
		}
		f, err := parseFlags(args, func(k string) string { return env[k] }, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := loadConfig(f)
		if err != nil {
			t.Fatalf("%q %v: %v", yaml, args, err)
		}
		return cfg.Metrics.Address
	}
	if got := load("", nil); got != "127.0.0.1:9183" || defaultAPI != "http://"+got {
		t.Fatalf("default %q, ctl's %q", got, defaultAPI)
	}
	if got := load("metrics:\n  token: abc\n", nil); got != "127.0.0.1:9183" {
		t.Fatalf("a metrics block without an address: %q", got)
	}
	for _, tc := range []struct {
		name, yaml string
		env        map[string]string
		args       []string
	}{
		{"--metrics off", "", nil, []string{"--metrics", "off"}},
		{"MQTTD_METRICS=off", "", map[string]string{"MQTTD_METRICS": "off"}, nil},
		{"address: off", "metrics:\n  address: off\n", nil, nil},
		{`address: ""`, "metrics:\n  address: \"\"\n", nil, nil},
		{"--metrics off over the file's", "metrics:\n  address: 127.0.0.1:9100\n", nil, []string{"--metrics", "off"}},
	} {
		if got := load(tc.yaml, tc.env, tc.args...); got != "" {
			t.Errorf("%s: address %q, want none", tc.name, got)
		}
	}
}

// TestMetricsAddressTaken: when the default address is taken (here a
// port the test holds, passed as the default), the broker warns, naming
// the setting, and goes on without it; an address set that cannot be
// bound is an error, and the command exits with it.
func TestMetricsAddressTaken(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	taken := held.Addr().String()
	var logged bytes.Buffer
	l, err := listenMetrics(taken, taken, zerolog.New(&logged))
	if l != nil || err != nil {
		t.Fatalf("the default taken: %v, %v", l, err)
	}
	if s := logged.String(); !strings.Contains(s, `"level":"warn"`) || !strings.Contains(s, "metrics.address") || !strings.Contains(s, taken) {
		t.Fatalf("warning: %s", s)
	}
	if l, err := listenMetrics(taken, defaultMetricsAddress, zerolog.Nop()); l != nil || !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("an address set, taken: %v, %v", l, err)
	}
	if l, err := listenMetrics("", defaultMetricsAddress, zerolog.Nop()); l != nil || err != nil {
		t.Fatalf("none: %v, %v", l, err)
	}
	var stderr bytes.Buffer
	code := run([]string{"--listen", "127.0.0.1:0", "--metrics", taken, "--data-dir", filepath.Join(t.TempDir(), "data")},
		noEnv, io.Discard, &stderr, nil)
	if code != 1 || !strings.Contains(stderr.String(), "cannot serve metrics") || !strings.Contains(stderr.String(), taken) {
		t.Fatalf("the command with --metrics %s taken: exit %d\n%s", taken, code, stderr.String())
	}
}
