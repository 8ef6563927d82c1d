package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"mqttd"
)

// serveMetrics serves the metrics address of b as serveHTTP does, with
// mc on 127.0.0.1:0, and returns the address it bound.
func serveMetrics(t *testing.T, b *broker, mc metricsConfig) string {
	t.Helper()
	mc.Address = "127.0.0.1:0"
	hs, addr, err := serveHTTP(mc, nil, b.srv, b.reg, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hs.Close() })
	return addr.String()
}

// heldConn opens a connection and has one /healthz answered on it, so
// that the server has taken it, and keeps it open.
func heldConn(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	br := bufio.NewReader(nc)
	if err := healthz(nc, br); err != nil {
		t.Fatal(err)
	}
	return nc, br
}

// healthz asks for /healthz on a kept-alive connection.
func healthz(nc net.Conn, br *bufio.Reader) error {
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprint(nc, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.ReadAll(resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/healthz: %s", resp.Status)
	}
	return nil
}

// closedWithin reports nil once the server closes nc (end of file or a
// reset), or why not within d.
func closedWithin(nc net.Conn, br *bufio.Reader, d time.Duration) error {
	nc.SetReadDeadline(time.Now().Add(d))
	b, err := br.ReadByte()
	var ne net.Error
	switch {
	case err == nil:
		return fmt.Errorf("the server sent %q, want the connection closed", b)
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("still open after %s", d)
	}
	return nil
}

// TestHTTPIdleTimeout: a kept-alive connection to the metrics address
// that sends nothing more is closed after metrics.idle_timeout.
func TestHTTPIdleTimeout(t *testing.T) {
	b := startBroker(t, mqttd.Options{})
	addr := serveMetrics(t, b, metricsConfig{IdleTimeout: 100 * time.Millisecond})
	nc, br := heldConn(t, addr)
	if err := closedWithin(nc, br, 5*time.Second); err != nil {
		t.Errorf("idle connection: %v", err)
	}
}

// TestHTTPMaxConnections: with metrics.max_connections open, a new
// connection is closed unanswered and counted, and once those close a
// /healthz is answered again.
func TestHTTPMaxConnections(t *testing.T) {
	b := startBroker(t, mqttd.Options{})
	const max = 3
	addr := serveMetrics(t, b, metricsConfig{MaxConnections: max})
	var held []net.Conn
	for range max {
		nc, _ := heldConn(t, addr)
		held = append(held, nc)
	}
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	fmt.Fprint(extra, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	if err := closedWithin(extra, bufio.NewReader(extra), 5*time.Second); err != nil {
		t.Errorf("connection %d of %d allowed: %v", max+1, max, err)
	}
	if n := counterValue(t, b, "mqttd_http_connections_refused_total"); n != 1 {
		t.Errorf("mqttd_http_connections_refused_total = %v, want 1", n)
	}
	for _, nc := range held {
		nc.Close()
	}
	waitFor(t, "/healthz answered once the held connections closed", func() bool {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			return false
		}
		defer nc.Close()
		return healthz(nc, bufio.NewReader(nc)) == nil
	})
}

// counterValue is the value of a counter b's registry holds.
func counterValue(t *testing.T, b *broker, name string) float64 {
	t.Helper()
	families, err := b.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s", name)
	return 0
}

// TestMetricsLimitsConfig checks the keys of the metrics address's
// bounds and that a negative one is refused by name.
func TestMetricsLimitsConfig(t *testing.T) {
	for _, tc := range []struct {
		yaml, err string
		want      metricsConfig
	}{
		{"metrics:\n  max_connections: 10\n  idle_timeout: 5s\n", "", metricsConfig{Address: defaultMetricsAddress, MaxConnections: 10, IdleTimeout: 5 * time.Second}},
		{"metrics:\n  max_connections: -1\n", "metrics.max_connections", metricsConfig{}},
		{"metrics:\n  idle_timeout: -1s\n", "metrics.idle_timeout", metricsConfig{}},
	} {
		path := filepath.Join(t.TempDir(), "mqttd.yaml")
		if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := parseFlags([]string{"--config", path}, func(string) string { return "" }, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := loadConfig(f)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, want an error naming %s", tc.yaml, err, tc.err)
			}
			continue
		}
		if err != nil || cfg.Metrics != tc.want {
			t.Errorf("%q: %+v, %v; want %+v", tc.yaml, cfg.Metrics, err, tc.want)
		}
	}
}
