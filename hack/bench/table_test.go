package main

import (
	"bytes"
	"slices"
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
	if err := writeTable(strings.NewReader(in), &out, "mqttd"); err != nil {
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

func TestWriteTableThreeBrokersDeviceAndTransport(t *testing.T) {
	in := strings.Join([]string{
		"broker=mosquitto round=1 scenario=qos1 rate=100 loss_pct=0.00",
		"broker=mqttd round=1 scenario=qos1 rate=600 loss_pct=0.00",
		"broker=flashmq round=1 scenario=qos1 rate=400 loss_pct=0.00",
		"broker=mosquitto round=1 scenario=device devices=5000 rate=1000 cpu_us_per_msg=40 p50_us=100 p99_us=300 p999_us=900 rss_per_conn=1000 loss_pct=0.00",
		"broker=mqttd round=1 scenario=device devices=5000 rate=1000 cpu_us_per_msg=20 p50_us=90 p99_us=250 p999_us=600 rss_per_conn=2000 loss_pct=0.00",
		"broker=flashmq round=1 scenario=device devices=5000 rate=1000 cpu_us_per_msg=10 p50_us=80 p99_us=200 rss_per_conn=1000 loss_pct=0.00",
		"broker=mqttd round=1 scenario=device devices=10000 rate=10000 cpu_us_per_msg=15 p50_us=120 p99_us=400 rss_per_conn=2000 loss_pct=0.00",
		"broker=mosquitto round=1 scenario=qos1 rate=50 loss_pct=0.00 transport=tls",
		"broker=mqttd round=1 scenario=qos1 rate=200 loss_pct=0.00 transport=tls",
		"broker=mqttd round=1 scenario=qos1 rate=900 loss_pct=0.00 poll=1",
	}, "\n")
	var out bytes.Buffer
	if err := writeTable(strings.NewReader(in), &out, "mqttd"); err != nil {
		t.Fatal(err)
	}
	var rows []string
	for line := range strings.Lines(out.String()) {
		rows = append(rows, strings.Join(strings.Fields(line), " "))
	}
	for _, want := range []string{
		"scenario metric mosquitto mqttd flashmq mqttd/mosquitto mqttd/flashmq",
		"qos1 msg/s 100 (n=1) 600 (n=1) 400 (n=1) 6.00 1.50",
		"qos1 tls msg/s 50 (n=1) 200 (n=1) - 4.00 -",
		"qos1 poll msg/s - 900 (n=1) - - -",
		"device n=5000 rate=1000 broker CPU µs/msg (lower is better) 40 (n=1) 20 (n=1) 10 (n=1) 0.50 2.00",
		"device n=5000 rate=1000 RSS bytes/device (lower is better) 1000 (n=1) 2000 (n=1) 1000 (n=1) 2.00 2.00",
		"device n=10000 rate=10000 p50 µs (lower is better) - 120 (n=1) - - -",
		"device n=5000 rate=1000 p99.9 µs (lower is better) 900 (n=1) 600 (n=1) - 0.67 -",
	} {
		if !slices.Contains(rows, want) {
			t.Errorf("no row %q in:\n%s", want, out.String())
		}
	}
	if i, j := slices.Index(rows, "qos1 msg/s 100 (n=1) 600 (n=1) 400 (n=1) 6.00 1.50"),
		slices.Index(rows, "device n=5000 rate=1000 p50 µs (lower is better) 100 (n=1) 90 (n=1) 80 (n=1) 0.90 1.12"); i < 0 || j < i {
		t.Errorf("qos1 row at %d, device p50 row at %d: want both, qos1 first", i, j)
	}
}

// The ratios are mqttd's over the others' wherever mqttd's column is. A
// figure no broker has gets no row (loss here); one only some have, "-"
// for the others.
func TestWriteTableRatiosAreMqttdsWhicheverComesFirst(t *testing.T) {
	in := "broker=mqttd scenario=qos1 rate=600 cpu_us_per_msg=1.5\nbroker=flashmq scenario=qos1 rate=300\n"
	var out bytes.Buffer
	if err := writeTable(strings.NewReader(in), &out, "mqttd"); err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(out.String())
	want := strings.Fields("scenario metric mqttd flashmq mqttd/flashmq qos1 msg/s 600 (n=1) 300 (n=1) 2.00 " +
		"qos1 broker CPU µs/msg (lower is better) 1.50 (n=1) - -")
	if !slices.Equal(got, want) {
		t.Errorf("table %q, want fields %q", out.String(), want)
	}
}

// A bridge run compare marks failed=1 shows as failed in its broker's
// cells, beside the other broker's figures and the ratio's "-".
func TestWriteTableBridgeRowsAndFailedRuns(t *testing.T) {
	in := strings.Join([]string{
		"broker=mosquitto round=1 scenario=bridge failed=1",
		"broker=mqttd round=1 scenario=bridge rate=50000 pub_rate=50010 loss_pct=0.00",
		"broker=mqttd round=2 scenario=bridge failed=1",
		"broker=mqttd round=1 scenario=bridge-drain rate=60000 wait_secs=0.90",
		"broker=mosquitto round=1 scenario=bridge-drain rate=6000 wait_secs=1.00",
	}, "\n")
	var out bytes.Buffer
	if err := writeTable(strings.NewReader(in), &out, "mqttd"); err != nil {
		t.Fatal(err)
	}
	var rows []string
	for line := range strings.Lines(out.String()) {
		rows = append(rows, strings.Join(strings.Fields(line), " "))
	}
	for _, want := range []string{
		"bridge forwarded msg/s, first publish to last arrival at the remote failed (n=1) 50000 (n=1, 1 failed) -",
		"bridge local publishers msg/s, uplink up failed (n=1) 50010 (n=1, 1 failed) -",
		"bridge PUBACK p50 µs, uplink up (lower is better) failed (n=1) failed (n=1) -",
		"bridge-drain drained msg/s, first to last arrival at the remote 6000 (n=1) 60000 (n=1) 10.00",
		"bridge-drain s from the remote's restart to the first arrival 1 (n=1) 0.90 (n=1) 0.90",
	} {
		if !slices.Contains(rows, want) {
			t.Errorf("no row %q in:\n%s", want, out.String())
		}
	}
}

// TestWriteTableSubject: -subject picks the broker whose ratios the table
// shows, as compare's cluster set shows the cluster's to the others.
func TestWriteTableSubject(t *testing.T) {
	in := strings.Join([]string{
		"broker=mqttd round=1 scenario=fanin rate=400 loss_pct=0.00",
		"broker=cluster round=1 scenario=fanin rate=100 loss_pct=0.00",
		"broker=nats round=1 scenario=fanin rate=50 loss_pct=0.00",
	}, "\n")
	var out bytes.Buffer
	if err := writeTable(strings.NewReader(in), &out, "cluster"); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := [][]string{
		{"scenario", "metric", "mqttd", "cluster", "nats", "cluster/mqttd", "cluster/nats"},
		{"fanin", "msg/s", "400", "(n=1)", "100", "(n=1)", "50", "(n=1)", "0.25", "2.00"},
	}
	for i, w := range want {
		if got := strings.Fields(lines[i]); strings.Join(got, " ") != strings.Join(w, " ") {
			t.Errorf("line %d = %q, want fields %q", i, lines[i], w)
		}
	}
}
