package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const mosquittoPath = "/usr/sbin/mosquitto"

// lockedBuffer collects a child process's output while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startMosquitto runs Mosquitto on a free loopback port for the rest of the
// test and returns its address and process id.
func startMosquitto(t *testing.T) (string, int) {
	t.Helper()
	if _, err := os.Stat(mosquittoPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is required in CI: %v", mosquittoPath, err)
		}
		t.Skipf("%s not installed (install the mosquitto package to run this test)", mosquittoPath)
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(t.TempDir(), "mosquitto.conf")
	body := fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous true\npersistence false\nset_tcp_nodelay true\n"+
		"max_queued_messages 1000000\nmax_inflight_messages 0\nmax_queued_bytes 0\nlog_dest stderr\nlog_type error\n", port)
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(mosquittoPath, "-c", conf)
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			return addr, cmd.Process.Pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("mosquitto not accepting on %s: %v; output: %s", addr, err, out.String())
		}
		select {
		case <-exited:
			t.Fatalf("mosquitto exited: %s", out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// runBench runs the command line and returns each result line as a map.
func runBench(t *testing.T, args ...string) []map[string]string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("bench %v exited %d: %s%s", args, code, stdout.String(), stderr.String())
	}
	var lines []map[string]string
	for line := range strings.Lines(stdout.String()) {
		m := map[string]string{}
		for kv := range strings.FieldsSeq(line) {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				t.Fatalf("field %q of %q is not key=value", kv, line)
			}
			m[k] = v
		}
		lines = append(lines, m)
	}
	return lines
}

func number(t *testing.T, m map[string]string, key string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(m[key], 64)
	if err != nil {
		t.Fatalf("%s=%q in %v: %v", key, m[key], m, err)
	}
	return v
}

// checkDelivery asserts zero loss, no errors and a positive rate.
func checkDelivery(t *testing.T, m map[string]string, expected float64) {
	t.Helper()
	if got := number(t, m, "expected"); got != expected {
		t.Errorf("expected=%v, want %v", got, expected)
	}
	if d := number(t, m, "delivered"); d != expected {
		t.Errorf("delivered=%v of %v", d, expected)
	}
	if l := number(t, m, "loss_pct"); l != 0 {
		t.Errorf("loss_pct=%v", l)
	}
	if e := number(t, m, "errors"); e != 0 {
		t.Errorf("errors=%v", e)
	}
	if r := number(t, m, "rate"); r <= 0 {
		t.Errorf("rate=%v, want > 0", r)
	}
}

func TestScenariosAgainstMosquitto(t *testing.T) {
	addr, pid := startMosquitto(t)
	common := []string{"-addr", addr, "-timeout", "10s", "-idle", "1s"}
	// Nanosecond run times count a run of 500 messages; 10 ms ticks, the
	// fallback, may not.
	_, fine := threadsCPU(pid)
	for _, tc := range []struct {
		scenario string
		args     []string
		expected float64
	}{
		{"fanin", []string{"-pubs", "2", "-msgs", "500"}, 1000},
		{"fanout", []string{"-subs", "5", "-msgs", "100"}, 500},
		{"qos1", []string{"-msgs", "500"}, 500},
		{"qos1", []string{"-msgs", "500", "-poll"}, 500},
		{"qos2", []string{"-msgs", "500", "-window", "10"}, 500},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			lines := runBench(t, append(append([]string{"-scenario", tc.scenario, "-pid", strconv.Itoa(pid)}, common...), tc.args...)...)
			if len(lines) != 1 || lines[0]["scenario"] != tc.scenario {
				t.Fatalf("want one %s line, got %v", tc.scenario, lines)
			}
			checkDelivery(t, lines[0], tc.expected)
			for _, k := range []string{"cpu_us_per_msg", "broker_cpu_pct", "gen_cpu_pct"} {
				if v := number(t, lines[0], k); v < 0 || v == 0 && fine == nil {
					t.Errorf("%s=%v, want > 0", k, v)
				}
			}
		})
	}
	t.Run("latency", func(t *testing.T) {
		lines := runBench(t, append([]string{"-scenario", "latency", "-rate", "200", "-duration", "300ms"}, common...)...)
		if len(lines) != 2 || lines[0]["qos"] != "0" || lines[1]["qos"] != "1" {
			t.Fatalf("want a QoS 0 and a QoS 1 line, got %v", lines)
		}
		for _, m := range lines {
			checkDelivery(t, m, 60)
			p50, p99, max := number(t, m, "p50_us"), number(t, m, "p99_us"), number(t, m, "max_us")
			if p50 <= 0 || p50 > p99 || p99 > max || max > 1e6 {
				t.Errorf("QoS %s latencies p50=%v p99=%v max=%v µs are not ordered or exceed 1 s", m["qos"], p50, p99, max)
			}
		}
	})
	t.Run("conns", func(t *testing.T) {
		lines := runBench(t, append([]string{"-scenario", "conns", "-conns", "50", "-settle", "500ms", "-hold", "100ms",
			"-pid", strconv.Itoa(pid)}, common...)...)
		m := lines[0]
		if c := number(t, m, "connected"); c != 50 {
			t.Errorf("connected=%v of 50", c)
		}
		if e := number(t, m, "errors"); e != 0 {
			t.Errorf("errors=%v", e)
		}
		if b, a := number(t, m, "rss_before_kb"), number(t, m, "rss_after_kb"); b <= 0 || a <= 0 {
			t.Errorf("rss_before_kb=%v rss_after_kb=%v, want both > 0", b, a)
		}
		for _, k := range []string{"broker_cpu_pct", "gen_cpu_pct", "gen_cpu_us_per_conn"} {
			if v := number(t, m, k); v < 0 {
				t.Errorf("%s=%v, want ≥ 0", k, v)
			}
		}
	})
	t.Run("device", func(t *testing.T) {
		// 20 devices at 100 msg/s: each publishes every 200 ms, once in the
		// warm-up and then 30 times in all over the measured 300 ms.
		lines := runBench(t, append([]string{"-scenario", "device", "-devices", "20", "-rate", "100", "-duration", "300ms",
			"-settle", "300ms", "-pid", strconv.Itoa(pid)}, common...)...)
		if len(lines) != 1 || lines[0]["scenario"] != "device" {
			t.Fatalf("want one device line, got %v", lines)
		}
		m := lines[0]
		if got := number(t, m, "msgs"); got != 30 {
			t.Errorf("msgs=%v, want 30 in the measured interval", got)
		}
		sent := number(t, m, "sent")
		if sent != 50 {
			t.Errorf("sent=%v, want 20 in the warm-up and 30 after", sent)
		}
		for _, k := range []string{"delivered_qos1", "delivered_qos0", "acked"} {
			if got := number(t, m, k); got != sent {
				t.Errorf("%s=%v, want %v", k, got, sent)
			}
		}
		if l, e := number(t, m, "loss_pct"), number(t, m, "errors"); l != 0 || e != 0 {
			t.Errorf("loss_pct=%v errors=%v, want 0", l, e)
		}
		if p50, p99 := number(t, m, "p50_us"), number(t, m, "p99_us"); p50 <= 0 || p50 > p99 || p99 > 1e6 {
			t.Errorf("p50=%v p99=%v µs are not ordered or exceed 1 s", p50, p99)
		}
		if c := number(t, m, "cpu_us_per_msg"); c < 0 {
			t.Errorf("cpu_us_per_msg=%v", c)
		}
		if b, a := number(t, m, "rss_before_kb"), number(t, m, "rss_after_kb"); b <= 0 || a <= 0 {
			t.Errorf("rss_before_kb=%v rss_after_kb=%v, want both > 0", b, a)
		}
	})
}

func TestScenarioLossIsReportedNotHung(t *testing.T) {
	addr, _ := startMosquitto(t)
	// The subscription matches nothing that is published, so every message
	// is lost and the run must end at the idle timeout, not the deadline.
	cfg := config{addr: addr, timeout: 5 * time.Second, idle: 200 * time.Millisecond, size: 64, window: 10, log: &bytes.Buffer{}}
	start := time.Now()
	r, err := runFlow(cfg, flow{
		name: "miss", pubs: 1, subs: 1, msgs: 50, filter: "elsewhere/#",
		topics: func(int) []string { return []string{"bench/miss"} },
	})
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := r.num("delivered"); d != 0 {
		t.Errorf("delivered=%v, want 0", d)
	}
	if l, _ := r.num("loss_pct"); l != 100 {
		t.Errorf("loss_pct=%v, want 100", l)
	}
	if e, _ := r.num("errors"); e != 0 {
		t.Errorf("errors=%v, want 0: loss is not an error", e)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("took %v; the idle timeout is 200ms", el)
	}
}
