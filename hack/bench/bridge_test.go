package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"mqttd"
	"mqttd/bridge"
	"mqttd/internal/testutil"
)

// serveBroker runs an in-process mqttd on addr until stop, which the test's
// end calls too.
func serveBroker(t *testing.T, opts mqttd.Options, addr string) (srv *mqttd.Server, stop func()) {
	t.Helper()
	srv, err := mqttd.New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return srv, testutil.ServeAt(t, srv, addr)
}

// freeLoopback returns a loopback address nothing listens on.
func freeLoopback(t *testing.T) string {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// gatewayTo runs a gateway mqttd whose bridge forwards bench/# at QoS 1
// to remote under gw/, as hack/bench/compare configures it.
func gatewayTo(t *testing.T, remote string) (*mqttd.Server, string) {
	t.Helper()
	qos := 1
	addr := freeLoopback(t)
	gw, _ := serveBroker(t, mqttd.Options{DataDir: t.TempDir(), Bridges: []bridge.Config{{
		Name: "bench", Addresses: []string{remote}, ClientID: "bench-gw",
		ReconnectMin: 20 * time.Millisecond, ReconnectMax: 100 * time.Millisecond,
		Topics: []bridge.Rule{{Pattern: "bench/#", Direction: bridge.Out, QoS: &qos, RemotePrefix: "gw/"}},
	}}}, addr)
	return gw, addr
}

// waitQueued waits, within 10 s, until the gateway's bridge is
// disconnected and holds n messages.
func waitQueued(t *testing.T, gw *mqttd.Server, n int) {
	t.Helper()
	testutil.WaitFor(t, fmt.Sprintf("the bridge disconnected with %d messages held", n), func() bool {
		b := gw.Bridges()[0]
		return !b.Connected && b.Queued+b.Inflight == n
	})
}

// checkArrivals asserts that every one of n messages arrived once, in
// order, without errors.
func checkArrivals(t *testing.T, m map[string]string, n float64) {
	t.Helper()
	checkDelivery(t, m, n)
	for _, k := range []string{"dups", "reordered", "unexpected"} {
		if v := number(t, m, k); v != 0 {
			t.Errorf("%s=%v, want 0", k, v)
		}
	}
}

// checkPublishers asserts that the gateway acknowledged all n, with
// latencies that make sense.
func checkPublishers(t *testing.T, m map[string]string, n float64) {
	t.Helper()
	if a := number(t, m, "acked"); a != n {
		t.Errorf("acked=%v of %v", a, n)
	}
	if r := number(t, m, "pub_rate"); r <= 0 {
		t.Errorf("pub_rate=%v", r)
	}
	if p50, p99 := number(t, m, "ack_p50_us"), number(t, m, "ack_p99_us"); p50 <= 0 || p50 > p99 || p99 > 5e6 {
		t.Errorf("ack_p50_us=%v ack_p99_us=%v: not ordered, or over 5 s", p50, p99)
	}
}

// TestBridgeScenarios runs the three steps compare drives against an
// in-process gateway bridged to an in-process remote, taking the remote
// down and up between them as compare does.
func TestBridgeScenarios(t *testing.T) {
	raddr := freeLoopback(t)
	rdir := t.TempDir()
	_, stopRemote := serveBroker(t, mqttd.Options{DataDir: rdir}, raddr)
	gw, gaddr := gatewayTo(t, raddr)
	pid := strconv.Itoa(os.Getpid())
	common := []string{"-addr", gaddr, "-remote", raddr, "-pid", pid, "-timeout", "20s", "-idle", "1s", "-pubs", "2"}

	lines := runBench(t, append([]string{"-scenario", "bridge", "-msgs", "400", "-window", "10", "-session", "drain1"}, common...)...)
	if len(lines) != 1 || lines[0]["scenario"] != "bridge" {
		t.Fatalf("want one bridge line, got %v", lines)
	}
	checkArrivals(t, lines[0], 800)
	checkPublishers(t, lines[0], 800)

	stopRemote()
	lines = runBench(t, append([]string{"-scenario", "bridge-fill", "-msgs", "300"}, common...)...)
	if len(lines) != 1 || lines[0]["scenario"] != "bridge-fill" {
		t.Fatalf("want one bridge-fill line, got %v", lines)
	}
	checkPublishers(t, lines[0], 600)
	if e := number(t, lines[0], "errors"); e != 0 {
		t.Errorf("errors=%v", e)
	}
	waitQueued(t, gw, 600)

	serveBroker(t, mqttd.Options{DataDir: rdir}, raddr)
	lines = runBench(t, append([]string{"-scenario", "bridge-drain", "-msgs", "300", "-session", "drain1"}, common...)...)
	if len(lines) != 1 || lines[0]["scenario"] != "bridge-drain" {
		t.Fatalf("want one bridge-drain line, got %v", lines)
	}
	checkArrivals(t, lines[0], 600)
	if w := number(t, lines[0], "wait_secs"); w < 0 || w > 10 {
		t.Errorf("wait_secs=%v", w)
	}
}

// TestBridgeScenarioFailsWithoutABridge: a gateway that forwards nothing
// fails the run, within its timeout, rather than measuring loss.
func TestBridgeScenarioFailsWithoutABridge(t *testing.T) {
	raddr, gaddr := freeLoopback(t), freeLoopback(t)
	serveBroker(t, mqttd.Options{}, raddr)
	serveBroker(t, mqttd.Options{}, gaddr)
	var stdout, stderr bytes.Buffer
	start := time.Now()
	code := run([]string{"-scenario", "bridge", "-addr", gaddr, "-remote", raddr, "-timeout", "1s"}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "the bridge does not forward") {
		t.Fatalf("exit %d, stderr %q; want 1 and the bridge named", code, stderr.String())
	}
	if stdout.Len() != 0 {
		t.Errorf("printed a result: %q", stdout.String())
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("took %v with -timeout 1s", el)
	}
}

// TestBridgeDrainNeedsTheSession: a remote that kept no session is
// named, not measured as total loss.
func TestBridgeDrainNeedsTheSession(t *testing.T) {
	raddr := freeLoopback(t)
	serveBroker(t, mqttd.Options{}, raddr)
	var stdout, stderr bytes.Buffer
	code := run([]string{"-scenario", "bridge-drain", "-remote", raddr, "-session", "nosuch", "-timeout", "5s"}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "the remote has no session nosuch") {
		t.Fatalf("exit %d, stderr %q; want 1 and the missing session", code, stderr.String())
	}
}

func TestBridgeArgs(t *testing.T) {
	for _, args := range [][]string{
		{"-scenario", "bridge"},                                    // no -remote
		{"-scenario", "bridge-drain", "-remote", "127.0.0.1:1"},    // no -session
		{"-scenario", "bridge", "-remote", "127.0.0.1:1", "-poll"}, // the remote shares the generator's CPU
		{"-scenario", "bridge-fill", "-transport", "ws"},           // tcp only
	} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 2 {
			t.Errorf("run(%q) exited %d, want 2 (stderr %q)", args, code, stderr.String())
		}
	}
}

func stamp(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

// TestArrivalsCountsEachMessageOnce: duplicates, reordering within a
// publisher and foreign payloads are counted apart from new messages.
func TestArrivalsCountsEachMessageOnce(t *testing.T) {
	a := newArrivals(2, 3) // publisher 0: 0..2, publisher 1: 3..5
	for i, p := range [][]byte{stamp(0), stamp(3), stamp(2), stamp(1), stamp(2), stamp(5), stamp(6), []byte("x")} {
		a.add(time.Duration(i+1)*time.Millisecond, p)
	}
	if u := a.unique.Load(); u != 5 || a.dups != 1 || a.reordered != 1 || a.unexpected != 2 {
		t.Errorf("unique %d, dups %d, reordered %d, unexpected %d; want 5, 1, 1, 2", u, a.dups, a.reordered, a.unexpected)
	}
	if a.first != time.Millisecond || a.last != 6*time.Millisecond {
		t.Errorf("first %v, last %v; want 1ms and 6ms", a.first, a.last)
	}
}
