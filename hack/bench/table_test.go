package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestWriteTableMediansAndRatio(t *testing.T) {
	in := strings.Join([]string{
		"broker=mosquitto scenario=fanin rate=100 loss_pct=0.00",
		"broker=mqttd scenario=fanin rate=300 loss_pct=0.00",
		"broker=mosquitto scenario=fanin rate=120 loss_pct=1.00",
		"broker=mqttd scenario=fanin rate=100 loss_pct=0.00",
		"broker=mosquitto scenario=fanin rate=90 loss_pct=0.00",
		"broker=mqttd scenario=fanin rate=200 loss_pct=0.00",
		"broker=mosquitto scenario=latency qos=1 p50_us=10 p99_us=20 p999_us=30",
		"broker=mosquitto scenario=conns rate=5000 bytes_per_conn=1000",
		"mqttd failed to start",
	}, "\n")
	var out bytes.Buffer
	if err := writeTable(strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := [][]string{
		{"scenario", "metric", "mosquitto", "mqttd", "mqttd/mosquitto"},
		{"fanin", "msg/s", "100", "(n=3)", "200", "(n=3)", "2.00"},
		{"fanin", "loss", "%", "0", "(n=3)", "0", "(n=3)", "-"},
		{"latency", "qos1", "p50", "µs", "(lower", "is", "better)", "10", "(n=1)", "-", "-"},
	}
	for i, w := range want {
		if got := strings.Fields(lines[i]); strings.Join(got, " ") != strings.Join(w, " ") {
			t.Errorf("line %d = %q, want fields %q", i, lines[i], w)
		}
	}
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "conns") || !strings.Contains(last, "1000 (n=1)") {
		t.Errorf("last line = %q, want the conns RSS row", last)
	}
}

func TestMedian(t *testing.T) {
	if _, ok := median(nil); ok {
		t.Error("median of nothing reported ok")
	}
	if m, _ := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median of 1..4 = %v, want 2.5", m)
	}
}
