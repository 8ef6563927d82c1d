package mqttd_test

import (
	"context"
	"net"
	"strings"
	"testing"

	"mqttd"
	"mqttd/auth"
)

// TestClosedListenerRefused checks that a listener letting nobody in (no
// password file, anonymous clients refused, nothing else deciding) is an
// error naming auth.allow_closed, from Validate when the configuration
// says so and at AddListener when only the address does; an Authenticator
// or a listener's own password file lets clients in, so is no error.
func TestClosedListenerRefused(t *testing.T) {
	t.Parallel()
	no := false
	wide := mqttd.ListenerConfig{Type: "tcp", Address: "0.0.0.0:1883"}
	for name, o := range map[string]mqttd.Options{
		"wide":            {Listeners: []mqttd.ListenerConfig{wide}},
		"anonymous false": {Auth: mqttd.Auth{AuthConfig: mqttd.AuthConfig{AllowAnonymous: &no}}, Listeners: []mqttd.ListenerConfig{{Address: "127.0.0.1:1883"}}},
		"unix":            {Listeners: []mqttd.ListenerConfig{{Type: "unix", Path: "/x", Auth: &mqttd.AuthConfig{AllowAnonymous: &no}}}},
	} {
		err := o.Validate()
		if err == nil || !strings.Contains(err.Error(), "listeners[0]: lets nobody in") || !strings.Contains(err.Error(), "auth.allow_closed") {
			t.Errorf("%s: Validate() = %v, want listeners[0] named as letting nobody in", name, err)
		}
	}
	for name, o := range map[string]mqttd.Options{
		"allow_closed":     {Auth: mqttd.Auth{AuthConfig: mqttd.AuthConfig{AllowClosed: true}}, Listeners: []mqttd.ListenerConfig{wide}},
		"listener's file":  {Listeners: []mqttd.ListenerConfig{{Address: "0.0.0.0:1883", Auth: &mqttd.AuthConfig{PasswordFile: "p"}}}},
		"authenticator":    {Authenticator: auth.AllowAll{}, Listeners: []mqttd.ListenerConfig{wide}},
		"host name":        {Listeners: []mqttd.ListenerConfig{{Address: "broker.lan:1883"}}}, // known at Listen
		"loopback default": {Listeners: []mqttd.ListenerConfig{{Address: "127.0.0.1:1883"}}},
	} {
		if err := o.Validate(); err != nil {
			t.Errorf("%s: Validate() = %v, want no error", name, err)
		}
	}

	srv, err := mqttd.New(mqttd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	err = srv.AddListener("wide", wideListener{l})
	if err == nil || !strings.Contains(err.Error(), "auth.allow_closed") {
		t.Fatalf("AddListener of a listener letting nobody in: %v, want an error naming auth.allow_closed", err)
	}
	if n := len(srv.Addrs()); n != 0 {
		t.Errorf("%d listeners kept after the error, want 0", n)
	}
}
