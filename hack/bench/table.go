package main

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// metric is one column of a scenario's result line that the comparison
// table summarises.
type metric struct {
	key   string
	label string
}

// tableMetrics lists, per scenario, what the comparison table shows.
var tableMetrics = map[string][]metric{
	"fanin":    throughput("msg/s", "msg"),
	"fanout":   throughput("deliveries/s", "delivery"),
	"qos1":     throughput("msg/s", "msg"),
	"qos2":     throughput("msg/s", "msg"),
	"durable1": throughput("msg/s", "msg"),
	"durable2": throughput("msg/s", "msg"),
	"latency": {
		{"p50_us", "p50 µs (lower is better)"},
		{"p99_us", "p99 µs (lower is better)"},
		{"p999_us", "p99.9 µs (lower is better)"},
		{"cpu_us_per_msg", "broker CPU µs/msg (lower is better)"},
	},
	"conns": {
		{"rate", "connects/s"},
		{"broker_cpu_us_per_conn", "broker CPU µs/conn (lower is better)"},
		{"broker_cpu_pct", "broker CPU % of the run (100: broker-bound)"},
		{"gen_cpu_pct", "generator CPU % of the run (100: generator-bound)"},
		{"burst_bytes_per_conn", "RSS bytes/conn as the burst left it"},
		{"bytes_per_conn", "RSS bytes/conn (lower is better)"},
	},
	"device": {
		{"cpu_us_per_msg", "broker CPU µs/msg (lower is better)"},
		{"p50_us", "p50 µs (lower is better)"},
		{"p99_us", "p99 µs (lower is better)"},
		{"p999_us", "p99.9 µs (lower is better)"},
		{"rss_per_conn", "RSS bytes/device (lower is better)"},
		{"rss_burst_per_conn", "RSS bytes/device as the burst left it"},
		{"loss_pct", "loss %"},
	},
	"bridge": {
		{"rate", "forwarded msg/s, first publish to last arrival at the remote"},
		{"pub_rate", "local publishers msg/s, uplink up"},
		{"ack_p50_us", "PUBACK p50 µs, uplink up (lower is better)"},
		{"ack_p99_us", "PUBACK p99 µs, uplink up (lower is better)"},
		{"cpu_us_per_msg", "gateway CPU µs/msg (lower is better)"},
		{"gen_cpu_pct", "generator CPU % of the run (its CPU runs the remote too)"},
		{"loss_pct", "loss %"},
		{"dups", "duplicates"},
	},
	"bridge-fill": {
		{"pub_rate", "local publishers msg/s, uplink down"},
		{"ack_p50_us", "PUBACK p50 µs, uplink down (lower is better)"},
		{"ack_p99_us", "PUBACK p99 µs, uplink down (lower is better)"},
		{"cpu_us_per_msg", "gateway CPU µs/msg queued (lower is better)"},
	},
	"bridge-drain": {
		{"rate", "drained msg/s, first to last arrival at the remote"},
		{"wait_secs", "s from the remote's restart to the first arrival"},
		{"cpu_us_per_msg", "gateway CPU µs/msg (lower is better)"},
		{"loss_pct", "loss % (the queue lost in the outage)"},
		{"dups", "duplicates"},
	},
}

// throughput is the rows of a flow measured by its rate, in unit, with
// the broker's CPU per each message or delivery.
func throughput(unit, each string) []metric {
	return []metric{
		{"rate", unit},
		{"cpu_us_per_msg", "broker CPU µs/" + each + " (lower is better)"},
		{"busiest_cpu_us_per_msg", "busiest process's CPU µs/" + each + " (a core each: the rate's bound is its inverse)"},
		{"gen_cpu_pct", "generator CPU % of the run (100: generator-bound)"},
		{"loss_pct", "loss %"},
		{"cluster_dropped", "dropped between nodes (mqttd_cluster_dropped_total)"},
	}
}

// scenarioOrder is the order of the table's rows.
var scenarioOrder = []string{"fanin", "fanout", "qos1", "qos2", "durable1", "durable2", "latency", "conns", "device",
	"bridge", "bridge-fill", "bridge-drain"}

// samples holds every figure read from result lines, by broker, table row
// and metric, with brokers and rows in the order first seen, and the runs
// that failed (a line with failed=1, written by compare) by broker and row.
type samples struct {
	brokers []string
	rows    []string
	vals    map[string][]float64
	fails   map[string]int
}

func (s *samples) get(broker, row, key string) []float64 { return s.vals[broker+"|"+row+"|"+key] }

// readSamples reads result lines prefixed with broker=NAME, as written by
// hack/bench/compare; lines without a broker or known scenario are skipped.
func readSamples(in io.Reader) (*samples, error) {
	s := &samples{vals: map[string][]float64{}, fails: map[string]int{}}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		f := fields(sc.Text())
		b, scen := f["broker"], f["scenario"]
		if b == "" || tableMetrics[scen] == nil {
			continue
		}
		if !slices.Contains(s.brokers, b) {
			s.brokers = append(s.brokers, b)
		}
		row := scen
		switch scen {
		case "latency":
			row += " qos" + f["qos"]
		case "device":
			row += " n=" + f["devices"] + " rate=" + f["rate"]
		}
		if t := f["transport"]; t != "" && t != "tcp" {
			row += " " + t
		}
		if f["poll"] == "1" {
			row += " poll"
		}
		if !slices.Contains(s.rows, row) {
			s.rows = append(s.rows, row)
		}
		if f["failed"] == "1" {
			s.fails[b+"|"+row]++
		}
		for _, m := range tableMetrics[scen] {
			if v, err := strconv.ParseFloat(f[m.key], 64); err == nil {
				k := b + "|" + row + "|" + m.key
				s.vals[k] = append(s.vals[k], v)
			}
		}
	}
	slices.SortStableFunc(s.rows, func(a, b string) int {
		return slices.Index(scenarioOrder, strings.Fields(a)[0]) - slices.Index(scenarioOrder, strings.Fields(b)[0])
	})
	return s, sc.Err()
}

// writeTable writes the median of each metric per broker and the ratio of
// the subject's (mqttd's, in compare's usual table) median to each other
// broker's. Without the subject (it did not build or start) the second
// broker seen takes its place, so that a run of two other brokers still
// compares them.
func writeTable(in io.Reader, out io.Writer, subject string) error {
	s, err := readSamples(in)
	if err != nil {
		return err
	}
	subj := slices.Index(s.brokers, subject)
	if subj < 0 {
		subj = 1
	}
	var others []int
	for i := range s.brokers {
		if i != subj && len(s.brokers) > 1 {
			others = append(others, i)
		}
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	header := "scenario\tmetric\t" + strings.Join(s.brokers, "\t") + "\t"
	for _, o := range others {
		header += s.brokers[subj] + "/" + s.brokers[o] + "\t"
	}
	fmt.Fprintln(tw, header)
	for _, row := range s.rows {
		for _, m := range tableMetrics[strings.Fields(row)[0]] {
			line := row + "\t" + m.label + "\t"
			var meds []float64
			var have []bool
			shown := false
			for _, b := range s.brokers {
				vs := s.get(b, row, m.key)
				med, ok := median(vs)
				meds, have = append(meds, med), append(have, ok)
				fails := s.fails[b+"|"+row]
				line += formatMedian(med, ok, len(vs), fails) + "\t"
				shown = shown || ok || fails > 0
			}
			if !shown {
				continue // a figure no broker has: one a run without -pid lacks
			}
			for _, o := range others {
				line += ratio(meds[subj], meds[o], have[subj] && have[o]) + "\t"
			}
			fmt.Fprintln(tw, line)
		}
	}
	return tw.Flush()
}

// fields splits a result line into its key=value pairs.
func fields(line string) map[string]string {
	m := map[string]string{}
	for kv := range strings.FieldsSeq(line) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

func median(vs []float64) (float64, bool) {
	if len(vs) == 0 {
		return 0, false
	}
	s := slices.Sorted(slices.Values(vs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2], true
	}
	return (s[n/2-1] + s[n/2]) / 2, true
}

// formatMedian shows a median of runs figures, and how many runs failed.
func formatMedian(v float64, ok bool, runs, fails int) string {
	switch {
	case !ok && fails > 0:
		return fmt.Sprintf("failed (n=%d)", fails)
	case !ok:
		return "-"
	case fails > 0:
		return fmt.Sprintf("%s (n=%d, %d failed)", strconv.FormatFloat(v, 'f', precision(v), 64), runs, fails)
	}
	return fmt.Sprintf("%s (n=%d)", strconv.FormatFloat(v, 'f', precision(v), 64), runs)
}

func ratio(a, b float64, ok bool) string {
	if !ok || b == 0 {
		return "-"
	}
	return strconv.FormatFloat(a/b, 'f', 2, 64)
}

// precision keeps small figures (loss, latency) readable without giving
// rates meaningless decimals.
func precision(v float64) int {
	if v >= 100 || v == float64(int64(v)) {
		return 0
	}
	return 2
}
