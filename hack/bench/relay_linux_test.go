package main

import (
	"testing"
)

// TestRelayCarriesTheLatencyScenario: the latency reference's relay passes
// every message of both QoS levels to the subscriber and acknowledges the
// QoS 1 ones, so the scenario measured against it loses nothing.
func TestRelayCarriesTheLatencyScenario(t *testing.T) {
	r, err := newRelay("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.serve() }()
	defer func() {
		r.shutdown()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	lines := runBench(t, "-addr", r.addr.String(), "-scenario", "latency", "-rate", "500", "-duration", "200ms", "-idle", "500ms", "-timeout", "20s")
	if len(lines) != 2 {
		t.Fatalf("%d result lines, want one per QoS: %v", len(lines), lines)
	}
	for _, m := range lines {
		checkDelivery(t, m, 100)
		if p50 := number(t, m, "p50_us"); p50 <= 0 {
			t.Errorf("qos=%s: p50_us=%v, want a latency", m["qos"], p50)
		}
	}
}
