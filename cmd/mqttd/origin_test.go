package main

import (
	"io"
	"reflect"
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

// TestDockerConfig keeps the Docker image's config loadable.
func TestDockerConfig(t *testing.T) {
	f, err := parseFlags([]string{"--config", "../../packaging/docker/mqttd.yaml"}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loadConfig(f); err != nil {
		t.Fatalf("packaging/docker/mqttd.yaml: %v", err)
	}
}
