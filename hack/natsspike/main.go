// Command natsspike is the measured spike of issue 38: what NATS, the
// engine the cluster is to be built on, gives between nodes on this
// machine. It starts three nats-servers embedded in this one process
// (github.com/nats-io/nats-server/v2), clustered over routes on 127.0.0.1
// ports chosen by the system, and measures with nats.go clients, once with
// the publisher on node A and the subscriber on node C (cross-node) and once
// with both on node A (same node, the reference):
//
//   - latency: -rate messages a second for -duration, each stamped with its
//     send time; publish-to-delivery p50, p99 and p99.9;
//   - QoS 0 analogue: -msgs core NATS messages published as fast as the
//     connection takes them; arrivals a second and loss;
//   - QoS 1 analogue: -msgs messages with at most -window unacknowledged,
//     each acknowledged by the subscriber's reply; acknowledged messages a
//     second.
//
// All payloads are -size bytes. Every phase is bounded by -msgs or
// -duration and by -timeout. The three nodes and the clients share the
// process's cores, so the figures include the servers' work and the
// clients'.
//
//	go run ./hack/natsspike
//	go run ./hack/natsspike -msgs 100000 -rate 5000 -duration 5s -window 100 -size 64
//
// With -node-port it runs a single node instead, with a cluster block on
// that port and routes to -routes, for -idle, doing nothing: three of
// them make a cluster whose idle memory can be read from /proc:
//
//	go run ./hack/natsspike -node-port 16221 -routes 16222,16223 -idle 30s
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "natsspike:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("natsspike", flag.ContinueOnError)
	var cfg config
	fs.IntVar(&cfg.msgs, "msgs", 100000, "messages in each throughput phase")
	fs.IntVar(&cfg.rate, "rate", 5000, "messages a second in the latency phase")
	fs.DurationVar(&cfg.duration, "duration", 5*time.Second, "length of the latency phase")
	fs.IntVar(&cfg.window, "window", 100, "unacknowledged messages in the QoS 1 analogue")
	fs.IntVar(&cfg.size, "size", 64, "payload bytes (at least 16)")
	fs.DurationVar(&cfg.timeout, "timeout", 20*time.Second, "bound on each phase's wait")
	nodePort := fs.Int("node-port", 0, "run one idle node with its cluster listener on this port")
	routes := fs.String("routes", "", "with -node-port: the other nodes' cluster ports, comma-separated")
	idle := fs.Duration("idle", 30*time.Second, "with -node-port: how long the node runs")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *nodePort != 0 {
		return idleNode(*nodePort, *routes, *idle, stdout)
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	results, err := measure(cfg)
	if err != nil {
		return err
	}
	report(stdout, cfg, results)
	return nil
}

func (c config) validate() error {
	switch {
	case c.msgs < 1, c.rate < 1, c.window < 1, c.duration <= 0, c.timeout <= 0:
		return errors.New("-msgs, -rate, -window, -duration and -timeout must be positive")
	case c.size < 16:
		return errors.New("-size must be at least 16 (a sequence number and a timestamp)")
	}
	return nil
}

// measure runs the three measurements cross-node and on the same node.
func measure(cfg config) ([]placementResult, error) {
	nodes, err := startCluster(3, cfg.timeout)
	if err != nil {
		return nil, err
	}
	defer stopCluster(nodes)
	a, c := nodes[0].ClientURL(), nodes[2].ClientURL()
	var results []placementResult
	for _, pl := range []struct{ name, sub string }{{"cross-node (A to C)", c}, {"same node (A to A)", a}} {
		r, err := measurePlacement(cfg, pl.name, a, pl.sub, fmt.Sprintf("spike.%d", len(results)))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", pl.name, err)
		}
		results = append(results, r)
	}
	return results, nil
}

func measurePlacement(cfg config, name, pubURL, subURL, prefix string) (placementResult, error) {
	pub, err := nats.Connect(pubURL, nats.Name("natsspike-pub"))
	if err != nil {
		return placementResult{}, err
	}
	defer pub.Close()
	sub, err := nats.Connect(subURL, nats.Name("natsspike-sub"))
	if err != nil {
		return placementResult{}, err
	}
	defer sub.Close()
	p := &pair{pub: pub, sub: sub, prefix: prefix, base: time.Now(), cfg: cfg}
	r := placementResult{Name: name}
	if r.Latency, err = p.latency(); err != nil {
		return r, fmt.Errorf("latency: %w", err)
	}
	if r.QoS0, err = p.qos0(); err != nil {
		return r, fmt.Errorf("qos0: %w", err)
	}
	if r.QoS1, err = p.qos1(); err != nil {
		return r, fmt.Errorf("qos1: %w", err)
	}
	return r, nil
}

func report(w io.Writer, cfg config, results []placementResult) {
	fmt.Fprintf(w, "3 nodes in one process on 127.0.0.1; %d-byte payloads; latency at %d msg/s for %v; %d msgs per throughput phase; QoS 1 window %d\n\n",
		cfg.size, cfg.rate, cfg.duration, cfg.msgs, cfg.window)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "placement\tp50 µs\tp99 µs\tp99.9 µs\tlatency recv/sent\tQoS0 msg/s\tQoS0 loss\tQoS1 msg/s\tQoS1 acked/sent\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f\t%d/%d\t%.0f\t%.2f%%\t%.0f\t%d/%d\t\n", r.Name,
			us(r.Latency.P50), us(r.Latency.P99), us(r.Latency.P999), r.Latency.Received, r.Latency.Sent,
			r.QoS0.rate(), r.QoS0.loss(), r.QoS1.rate(), r.QoS1.Arrived, r.QoS1.Sent)
	}
	tw.Flush()
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// idleNode runs one node with a cluster block until idle has passed or a
// signal comes, printing its pid and client URL for whoever reads its
// memory.
func idleNode(clusterPort int, routes string, idle time.Duration, stdout io.Writer) error {
	var ports []int
	for _, f := range strings.Split(routes, ",") {
		if f == "" {
			continue
		}
		p, err := strconv.Atoi(f)
		if err != nil {
			return fmt.Errorf("-routes: %w", err)
		}
		ports = append(ports, p)
	}
	s, err := startNode(nodeOptions(fmt.Sprintf("node-%d", clusterPort), clusterPort, ports), 10*time.Second)
	if err != nil {
		return err
	}
	defer stopCluster([]*server.Server{s})
	fmt.Fprintf(stdout, "pid %d client %s cluster 127.0.0.1:%d routes %v\n", os.Getpid(), s.ClientURL(), clusterPort, ports)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	select {
	case <-sig:
	case <-time.After(idle):
	}
	return nil
}
