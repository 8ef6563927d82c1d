package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// TestSIGHUPReloadsConfig changes the config file of a running command
// and sends SIGHUP: a limit read where it is used (max_connections) and
// log.level apply at once; a limit built in at start (max_inflight) and a
// listener are named as needing a restart; a file with a problem changes
// nothing.
func TestSIGHUPReloadsConfig(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "mqttd.yaml")
	write := func(s string) {
		if err := os.WriteFile(cfg, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("listeners:\n  - address: 127.0.0.1:0\nlimits:\n  max_connections: 100\n")
	c := startCommand(t, "--config", cfg, "--data-dir", filepath.Join(dir, "data"))
	addr := c.mqttAddr()

	write("listeners:\n  - address: 127.0.0.1:1\nlimits:\n  max_connections: 1\n  max_inflight: 5\nlog:\n  level: debug\n")
	c.sig <- syscall.SIGHUP
	c.wait(`"applied":["limits.max_connections","log.level"],"needs_restart":["limits.max_inflight","listeners"]`)

	// One connection is now the most; a second is closed at once, which
	// the debug level, now on, logs.
	first := paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + addr).SetClientID("first").SetAutoReconnect(false))
	if tok := first.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("first connection: %v", tok.Error())
	}
	defer first.Disconnect(10)
	second, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	second.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := second.Read(make([]byte, 1)); err == nil {
		t.Error("a connection past max_connections got bytes, want it closed")
	}
	c.wait("max_connections")

	write("limits:\n  max_connections: lots\n")
	c.sig <- syscall.SIGHUP
	c.wait("config file not reloaded")

	c.stop()
}

// TestSIGHUPReloadsBridges: bridges added, changed and removed in the
// config file are applied on SIGHUP, and named in the log.
func TestSIGHUPReloadsBridges(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "mqttd.yaml")
	write := func(s string) {
		if err := os.WriteFile(cfg, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("listeners:\n  - address: 127.0.0.1:0\n")
	c := startCommand(t, "--config", cfg, "--data-dir", filepath.Join(dir, "data"))
	bridge := "bridges:\n  - name: cloud\n    addresses: [\"" + down + "\"]\n    topics:\n      - {pattern: \"q/#\", direction: out, remote_prefix: %q}\n"
	write("listeners:\n  - address: 127.0.0.1:0\n" + fmt.Sprintf(bridge, "a/"))
	c.sig <- syscall.SIGHUP
	c.wait(`"added":["cloud"],"changed":[],"removed":[]`)
	c.wait(`"applied":["bridges"],"needs_restart":[]`)
	write("listeners:\n  - address: 127.0.0.1:0\n" + fmt.Sprintf(bridge, "b/"))
	c.sig <- syscall.SIGHUP
	c.wait(`"added":[],"changed":["cloud"],"removed":[]`)
	write("listeners:\n  - address: 127.0.0.1:0\n")
	c.sig <- syscall.SIGHUP
	c.wait(`"added":[],"changed":[],"removed":["cloud"]`)
	c.stop()
}
