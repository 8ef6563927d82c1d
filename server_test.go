package mqttd_test

import (
	"context"
	"errors"
	"net"
	"runtime"
	"testing"
	"time"

	"mqttd"
	"mqttd/packets"
)

// Shutdown must not tell stuck 5.0 clients one after the other: it
// returns within a bound that does not grow with their number.
func TestShutdownDoesNotSerializeStuckClients(t *testing.T) {
	srv, err := mqttd.New(mqttd.Options{Limits: mqttd.Limits{WriteTimeout: 30 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	l := newPipeListener()
	srv.AddListener("pipe", l)
	go srv.Serve()
	for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
		rc := l.dial(t)
		rc.v = packets.V5
		rc.send(&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V5, ClientID: id, CleanStart: true})
		rc.read() // CONNACK; from now on this client reads nothing
	}
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second): // each stuck client may take 1 s; six in a row would not make it
		t.Fatal("Shutdown did not return in 5 s")
	}
}

// failingListener accepts nothing: its Accept fails at once with a
// permanent error, as a listener whose socket was closed under it does.
type failingListener struct{ net.Listener }

func (failingListener) Accept() (net.Conn, error) { return nil, errListenerBroken }

var errListenerBroken = errors.New("listener broken")

// TestServeReturnsWhenEveryListenerFailed checks that Serve returns the
// listeners' error once the last one has failed, not before, rather than
// leaving a broker that accepts nothing running silently.
func TestServeReturnsWhenEveryListenerFailed(t *testing.T) {
	srv, err := mqttd.New(mqttd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := srv.AddListener("broken", failingListener{l}); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	select {
	case err := <-served:
		if !errors.Is(err, errListenerBroken) {
			t.Errorf("Serve returned %v, want the listener's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve still running with no listener left")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// TestNewStartsNothing checks that New starts no goroutine, so a Server
// that is configured but never served costs nothing and needs no
// Shutdown.
func TestNewStartsNothing(t *testing.T) {
	before := runtime.NumGoroutine()
	for range 10 {
		if _, err := mqttd.New(mqttd.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	if after := runtime.NumGoroutine(); after > before {
		t.Errorf("10 calls of New left %d goroutines running", after-before)
	}
}
