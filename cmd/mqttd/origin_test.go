package main

import (
	"io"
	"net"
	"os"
	"reflect"
	"regexp"
	"testing"
)

// TestWSAllowedOrigin checks that --ws-allowed-origin, and
// MQTTD_WS_ALLOWED_ORIGIN without it, reach every ws and wss listener:
// those of --listen and the default one.
func TestWSAllowedOrigin(t *testing.T) {
	f, err := parseFlags([]string{"--listen", "127.0.0.1:1", "--listen", "ws://127.0.0.1:8083",
		"--ws-allowed-origin", "http://dash.lan:1880", "--ws-allowed-origin", "https://ops.example"}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(f)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Listeners[0].AllowedOrigins; got != nil {
		t.Errorf("tcp listener: allowed_origins %q", got)
	}
	if got, want := cfg.Listeners[1].AllowedOrigins, []string{"http://dash.lan:1880", "https://ops.example"}; !reflect.DeepEqual(got, want) {
		t.Errorf("ws listener: allowed_origins %q, want %q", got, want)
	}

	env := func(k string) string {
		if k == "MQTTD_WS_ALLOWED_ORIGIN" {
			return "http://dash.lan:1880, *"
		}
		return ""
	}
	if f, err = parseFlags(nil, env, io.Discard); err != nil {
		t.Fatal(err)
	}
	if cfg, err = loadConfig(f); err != nil {
		t.Fatal(err)
	}
	var ws []string
	for _, lc := range cfg.Listeners {
		if lc.Type == "ws" {
			ws = lc.AllowedOrigins
		}
	}
	if want := []string{"http://dash.lan:1880", "*"}; !reflect.DeepEqual(ws, want) {
		t.Errorf("default ws listener: allowed_origins %q, want %q", ws, want)
	}
}

// TestDockerConfig keeps the Docker image's config loadable and working
// as README and the Dockerfile say: clients without credentials let in on
// its listeners (which are not loopback, so only allow_anonymous lets them
// in), the ports the Dockerfile exposes, the state in its volume, browser
// pages from the container's own host let in by the listener's default
// policy, and a dashboard from elsewhere added by MQTTD_WS_ALLOWED_ORIGIN.
func TestDockerConfig(t *testing.T) {
	env := func(k string) string {
		if k == "MQTTD_WS_ALLOWED_ORIGIN" {
			return "http://dash.lan:1880"
		}
		return ""
	}
	f, err := parseFlags([]string{"--config", "../../packaging/docker/mqttd.yaml"}, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(f)
	if err != nil {
		t.Fatalf("packaging/docker/mqttd.yaml: %v", err)
	}
	if a := cfg.Auth.AllowAnonymous; a == nil || !*a {
		t.Error("auth.allow_anonymous is not true: the image's listeners would refuse every client without a password file")
	}
	dockerfile, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"tcp": "0.0.0.0:1883", "ws": "0.0.0.0:8083"}
	for _, lc := range cfg.Listeners {
		if want[lc.Type] != lc.Address {
			t.Errorf("%s listener on %s, want %s", lc.Type, lc.Address, want[lc.Type])
		}
		_, port, _ := net.SplitHostPort(lc.Address)
		if !regexp.MustCompile(`(?m)^EXPOSE .*\b` + port + `\b`).Match(dockerfile) {
			t.Errorf("the Dockerfile does not expose %s, the %s listener's port", port, lc.Type)
		}
		if lc.Type == "ws" && !reflect.DeepEqual(lc.AllowedOrigins, []string{"http://dash.lan:1880"}) {
			t.Errorf("ws allowed_origins %q: want only MQTTD_WS_ALLOWED_ORIGIN's, the same host let in by default", lc.AllowedOrigins)
		}
		delete(want, lc.Type)
	}
	if len(want) > 0 {
		t.Errorf("listeners missing: %v", want)
	}
	if !regexp.MustCompile(`(?m)^VOLUME ` + regexp.QuoteMeta(cfg.DataDir) + `$`).Match(dockerfile) {
		t.Errorf("data_dir %s is not the Dockerfile's VOLUME", cfg.DataDir)
	}
}
