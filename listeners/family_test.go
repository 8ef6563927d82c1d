package listeners_test

import (
	"net"
	"strconv"
	"testing"
	"time"

	"mqttd/listeners"
)

// haveIPv6Loopback reports whether this machine can listen on [::1].
func haveIPv6Loopback(t *testing.T) bool {
	t.Helper()
	l, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// dialable reports whether a TCP connection to host:port is accepted.
func dialable(t *testing.T, host string, port int) bool {
	t.Helper()
	c, err := net.DialTimeout("tcp", net.JoinHostPort(host, strconv.Itoa(port)), 5*time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// TestListenBindsTheFamilyAsked opens each kind of network listener on
// 0.0.0.0, which must take IPv4 only, and on [::], which takes both
// families (as Mosquitto); each is named as configured. Clients dial only
// the loopback addresses.
func TestListenBindsTheFamilyAsked(t *testing.T) {
	p := newPKI(t)
	v6 := haveIPv6Loopback(t)
	types := []listeners.Config{
		{Type: listeners.TCP},
		{Type: listeners.TLS, TLS: p.tlsConfig(false)},
		{Type: listeners.WS},
		{Type: listeners.WSS, TLS: p.tlsConfig(false)},
	}
	for _, cfg := range types {
		for _, host := range []string{"0.0.0.0", "::"} {
			t.Run(cfg.Type+" "+host, func(t *testing.T) {
				cfg.Address = net.JoinHostPort(host, "0")
				l := listen(t, cfg)
				a, ok := l.Addr().(*net.TCPAddr)
				if !ok {
					t.Fatalf("listening on %T %v", l.Addr(), l.Addr())
				}
				if a.IP.String() != host {
					t.Errorf("named %v, want %s", l.Addr(), net.JoinHostPort(host, strconv.Itoa(a.Port)))
				}
				if !dialable(t, "127.0.0.1", a.Port) {
					t.Errorf("%s does not accept on 127.0.0.1", cfg.Address)
				}
				if got, want := v6 && dialable(t, "::1", a.Port), v6 && host == "::"; got != want {
					t.Errorf("%s: accepts on [::1]: %v, want %v", cfg.Address, got, want)
				}
			})
		}
	}
}

// TestNetworkOfAddress: the network each kind of address listens with.
func TestNetworkOfAddress(t *testing.T) {
	for addr, want := range map[string]string{
		"0.0.0.0:1883":   "tcp4",
		"127.0.0.1:9090": "tcp4",
		"[::]:1883":      "tcp",
		"[::1]:1883":     "tcp",
		"localhost:1883": "tcp",
		":1883":          "tcp",
		"no port":        "tcp",
	} {
		if got := listeners.Network(addr); got != want {
			t.Errorf("Network(%q) = %s, want %s", addr, got, want)
		}
	}
}
