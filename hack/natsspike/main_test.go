package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// TestMeasureCountsEveryMessage runs the spike in a tiny configuration and
// checks what it counts, not how fast: on an idle loopback cluster core
// NATS loses nothing, so every message must arrive and be acknowledged.
// The probe's deadline is long: under hack/test the machine also runs the
// cluster's crash and netsplit tests, and interest took over 10 s to cross.
func TestMeasureCountsEveryMessage(t *testing.T) {
	cfg := config{msgs: 300, rate: 1000, duration: 200 * time.Millisecond, window: 10, size: 32, timeout: 30 * time.Second}
	results, err := measure(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2 {
		t.Fatalf("%d placements measured, want cross-node and same node", len(results))
	}
	for _, r := range results {
		checkPlacement(t, cfg, r)
	}
}

func checkPlacement(t *testing.T, cfg config, r placementResult) {
	t.Helper()
	wantLatency := int(float64(cfg.rate) * cfg.duration.Seconds())
	if l := r.Latency; l.Sent != wantLatency || l.Received != l.Sent {
		t.Errorf("%s: latency phase sent %d received %d, want %d of each", r.Name, l.Sent, l.Received, wantLatency)
	}
	if l := r.Latency; l.P50 <= 0 || l.P99 < l.P50 || l.P999 < l.P99 {
		t.Errorf("%s: percentiles p50 %v p99 %v p99.9 %v: want 0 < p50 <= p99 <= p99.9", r.Name, l.P50, l.P99, l.P999)
	}
	for phase, f := range map[string]flowResult{"qos0": r.QoS0, "qos1": r.QoS1} {
		if f.Sent != cfg.msgs || f.Arrived != f.Sent {
			t.Errorf("%s %s: sent %d arrived %d, want %d of each", r.Name, phase, f.Sent, f.Arrived, cfg.msgs)
		}
		if f.Elapsed <= 0 || f.rate() <= 0 || f.loss() != 0 {
			t.Errorf("%s %s: elapsed %v rate %v loss %v%%", r.Name, phase, f.Elapsed, f.rate(), f.loss())
		}
	}
}

// TestRunReportsBothPlacements runs the command as a user does and checks
// that its table has a row for each placement with every message counted.
func TestRunReportsBothPlacements(t *testing.T) {
	var out bytes.Buffer
	err := run([]string{"-msgs", "200", "-rate", "1000", "-duration", "100ms", "-window", "5", "-size", "16"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{"cross-node (A to C)", "same node (A to A)"} {
		line := lineWith(out.String(), row)
		if !strings.Contains(line, "100/100") || !strings.Contains(line, "200/200") {
			t.Errorf("row %q = %q: want 100/100 latency arrivals and 200/200 acknowledged\n%s", row, line, out.String())
		}
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-size", "8"}, {"-msgs", "0"}, {"-window", "-1"}, {"-routes", "x", "-node-port", "1"}} {
		if err := run(args, &bytes.Buffer{}); err == nil {
			t.Errorf("run(%q) accepted", args)
		}
	}
}

func lineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

// TestProbeAnsweredAfterNoResponders: a probe published before anyone
// subscribes is answered by the server with an empty "no responders"
// status message; the QoS 1 phase's reply handler, which waits for
// credit, must not take it, or no probe answer after it is seen (the
// qos1 phase then failed with no answer to a probe within its timeout).
func TestProbeAnsweredAfterNoResponders(t *testing.T) {
	srv, err := startNode(nodeOptions("solo", -1, nil), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer stopCluster([]*server.Server{srv})
	pub, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sub, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	p := &pair{pub: pub, sub: sub, prefix: "t", base: time.Now(), cfg: config{timeout: 5 * time.Second}}
	never := make(chan struct{})
	defer close(never)
	inbox, r, ready, err := p.replies(func(*nats.Msg) { <-never })
	if err != nil {
		t.Fatal(err)
	}
	defer r.Unsubscribe()
	if err := pub.PublishMsg(&nats.Msg{Subject: "t.x", Reply: inbox, Data: probe}); err != nil {
		t.Fatal(err)
	}
	if err := pub.Flush(); err != nil {
		t.Fatal(err)
	}
	s, err := p.subscribe("t.x", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Unsubscribe()
	if err := p.waitRoutes("t.x", inbox, ready); err != nil {
		t.Fatal(err)
	}
}
