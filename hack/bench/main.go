// Command bench is an MQTT 3.1.1 load generator that measures any broker by
// address. Each scenario prints one machine-readable result line per run:
//
//	go run ./hack/bench -addr 127.0.0.1:1883 -scenario fanin
//	scenario=fanin qos=0 pubs=8 subs=1 msgs=400000 expected=400000 delivered=400000 loss_pct=0.00 secs=1.23 rate=325203 errors=0
//
// -transport tls, ws or wss (with -cafile) reaches the broker over TLS or
// WebSocket instead of TCP. -pubaddr and -subaddr put a flow's publishers
// and subscribers on other brokers than -addr, in turn over lists: the
// nodes of a cluster (cluster.go).
//
// Scenarios: fanin, fanout, qos1, qos2, durable1, durable2 (qos1 and qos2 with a
// persistent subscriber), latency, conns, device (many clients each publishing
// QoS 1 to its own topic every few seconds), and bridge, bridge-fill and
// bridge-drain (a bridge from the broker at -addr to the one at -remote,
// bridge.go). -relay serves, instead, the latency reference: a relay that
// does the least a broker can (relay_linux.go).
// Every scenario is bounded by -timeout and reports undelivered messages as
// loss. It exits 1 when a scenario cannot run or reports errors.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"mqttd/internal/freeport"
	"os"
	"strings"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// command is a parsed command line: one of the modes, with its settings.
type command struct {
	cfg      config
	scenario string
	table    string
	subject  string
	freeport bool
	relay    bool
}

func parseArgs(args []string, stderr io.Writer) (command, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c command
	cfg := &c.cfg
	fs.StringVar(&c.scenario, "scenario", "", "fanin, fanout, qos1, qos2, durable1, durable2, latency, conns, device, bridge, bridge-fill or bridge-drain")
	fs.BoolVar(&c.freeport, "freeport", false, "print a free TCP port on 127.0.0.1 and exit")
	fs.StringVar(&c.table, "table", "", "print the medians table of a file of broker=NAME result lines and exit")
	fs.StringVar(&c.subject, "subject", "mqttd", "-table: the broker whose ratios to each other broker the table shows")
	fs.BoolVar(&c.relay, "relay", false, "serve on -addr, until killed, the latency reference's relay: PUBLISHes forwarded as they come, no broker (Linux)")
	fs.StringVar(&cfg.addr, "addr", "127.0.0.1:1883", "broker address (host:port); bridge scenarios: the gateway, whose bridge forwards bench/# to -remote")
	fs.Var(&cfg.pubAddrs, "pubaddr", "flows: the publishers' broker addresses, comma-separated, taken in turn (default -addr): the nodes of a cluster")
	fs.Var(&cfg.subAddrs, "subaddr", "flows: the subscribers' broker addresses, comma-separated, taken in turn (default -addr); with -pubaddr, a probe waits until each subscriber gets messages from every publisher's address before the run")
	fs.StringVar(&cfg.remote, "remote", "", "bridge, bridge-drain: the address (host:port) of the broker the gateway's bridge forwards to")
	fs.StringVar(&cfg.prefix, "prefix", "gw/", "bridge scenarios: the bridge's remote prefix (bench/x here is PREFIXbench/x at the remote)")
	fs.StringVar(&cfg.session, "session", "", "bridge: after the run, leave a persistent session of this client id on the remote for bridge-fill's messages; bridge-drain: resume it")
	kind := fs.String("transport", "tcp", "tcp, tls, ws or wss (WebSocket at /mqtt)")
	caFile := fs.String("cafile", "", "tls, wss: CA file (PEM) to verify the broker with; none: not verified")
	poll := fs.Bool("poll", false, "clients read by polling their sockets (up to 1,000 empty reads, then one that sleeps), so that the generator's wake-ups do not set the pace of the flows that take turns with the broker (qos1, qos2); its CPU share then reads near 100%. Linux; not for conns or device")
	fs.DurationVar(&cfg.timeout, "timeout", 60*time.Second, "upper bound on one scenario")
	fs.DurationVar(&cfg.idle, "idle", 2*time.Second, "wait for missing messages this long after publishers finish")
	fs.IntVar(&cfg.pubs, "pubs", 0, "fanin: publishers (default 8); bridge scenarios: publishers at the gateway (default 1; bridge-drain: as bridge-fill had)")
	fs.IntVar(&cfg.subs, "subs", 0, "fanout: subscribers (default 100)")
	fs.IntVar(&cfg.msgs, "msgs", 0, "messages per publisher (fanin 50000, fanout 5000, qos1/qos2 200000, durable1/durable2 and bridge scenarios 50000)")
	fs.IntVar(&cfg.size, "size", 64, "payload bytes (at least 8)")
	fs.IntVar(&cfg.window, "window", 100, "unacknowledged QoS 1/2 messages per publisher")
	fs.IntVar(&cfg.qos, "qos", -1, "latency: QoS 0 or 1 (default both, one line each)")
	fs.IntVar(&cfg.rate, "rate", 1000, "latency, device: messages per second (device: of all devices together)")
	fs.DurationVar(&cfg.duration, "duration", 0, "latency: how long to publish (default 5s); device: how long to measure after the warm-up (default 10s)")
	fs.IntVar(&cfg.devices, "devices", 10000, "device: clients, each publishing every devices/rate seconds")
	fs.IntVar(&cfg.conns, "conns", 10000, "conns: clients to open")
	fs.IntVar(&cfg.concurrency, "concurrency", 64, "conns, device: dials in flight")
	fs.Var(&cfg.pids, "pid", "broker pid, to report its CPU time (per message, per connection) and, in conns and device, its RSS growth per connection; flows and bridge scenarios: a comma-separated list, their CPU summed (a cluster's processes)")
	fs.DurationVar(&cfg.hold, "hold", 12*time.Second, "conns: how long the connections stay idle before the broker's RSS is read (mqttd gives its spare heap back after 10 s of quiet)")
	fs.DurationVar(&cfg.settle, "settle", 5*time.Second, "conns, device: longest wait for the broker's RSS to settle")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	cfg.log = stderr
	if len(cfg.pids) > 0 {
		cfg.pid = cfg.pids[0]
	}
	var err error
	if cfg.transport, err = newTransport(*kind, *caFile, cfg.addr); err != nil {
		return c, err
	}
	cfg.transport.poll = *poll
	switch {
	case cfg.window < 1 || cfg.window > 65535:
		return c, errors.New("-window must be between 1 and 65535")
	case cfg.qos > 2:
		return c, errors.New("-qos must be 0, 1 or 2")
	case *poll && (c.scenario == "conns" || c.scenario == "device"):
		return c, errors.New("-poll is for the flows: thousands of polling clients would measure the generator")
	case *poll && !canPoll:
		return c, errors.New("-poll: Linux only")
	case len(cfg.pids) > 1 && (c.scenario == "conns" || c.scenario == "device"):
		return c, errors.New("-pid: conns and device read one broker's RSS: give one pid")
	}
	if err := checkAddrArgs(c, fs); err != nil {
		return c, err
	}
	return c, checkBridgeArgs(c, *poll)
}

// checkAddrArgs refuses -pubaddr and -subaddr where no flow runs: conns,
// device and the bridge scenarios dial -addr (and -remote) only.
func checkAddrArgs(c command, fs *flag.FlagSet) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		if f.Name != "pubaddr" && f.Name != "subaddr" {
			return
		}
		if c.scenario == "conns" || c.scenario == "device" || strings.HasPrefix(c.scenario, "bridge") {
			err = fmt.Errorf("-%s is for the flows, not %s", f.Name, c.scenario)
		}
	})
	return err
}

// checkBridgeArgs refuses what the bridge scenarios cannot run with.
func checkBridgeArgs(c command, poll bool) error {
	cfg := c.cfg
	switch {
	case !strings.HasPrefix(c.scenario, "bridge"):
		return nil
	case cfg.transport.kind != "tcp":
		return errors.New("the bridge scenarios run over tcp")
	case poll:
		return errors.New("-poll is not for the bridge scenarios: the remote broker shares the generator's CPU")
	case cfg.remote == "" && c.scenario != "bridge-fill":
		return fmt.Errorf("-scenario %s needs -remote, the broker the gateway's bridge forwards to", c.scenario)
	case cfg.session == "" && c.scenario == "bridge-drain":
		return errors.New("-scenario bridge-drain needs -session, the session -scenario bridge left on the remote")
	}
	return nil
}

func run(args []string, stdout, stderr io.Writer) int {
	c, err := parseArgs(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "bench:", err)
		}
		return 2
	}
	switch {
	case c.freeport:
		var port int
		if port, err = freePort(); err == nil {
			fmt.Fprintln(stdout, port)
		}
	case c.table != "":
		err = printTable(c.table, c.subject, stdout)
	case c.relay:
		var r *relay
		if r, err = newRelay(c.cfg.addr); err == nil {
			fmt.Fprintln(stderr, "bench: relay on", r.addr)
			err = r.serve()
		}
	default:
		var results []*result
		results, err = runScenario(c.scenario, c.cfg)
		for _, r := range results {
			if k := c.cfg.transport.kind; k != "tcp" {
				r.add("transport", k)
			}
			if c.cfg.transport.poll {
				r.add("poll", "1")
			}
			fmt.Fprintln(stdout, r)
			if n, _ := r.num("errors"); n > 0 {
				err = errors.Join(err, fmt.Errorf("%s: %v errors", c.scenario, n))
			}
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	return 0
}

// runScenario runs one named scenario and returns its result lines.
func runScenario(name string, cfg config) ([]*result, error) {
	one := func(r *result, err error) ([]*result, error) {
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return []*result{r}, nil
	}
	switch name {
	case "fanin":
		return one(fanin(cfg))
	case "fanout":
		return one(fanout(cfg))
	case "qos1":
		return one(qosFlow(cfg, 1, false))
	case "qos2":
		return one(qosFlow(cfg, 2, false))
	case "durable1":
		return one(qosFlow(cfg, 1, true))
	case "durable2":
		return one(qosFlow(cfg, 2, true))
	case "conns":
		return one(conns(cfg))
	case "bridge", "bridge-fill", "bridge-drain":
		return one(bridgeScenario(name, cfg))
	case "device":
		return one(deviceWorkload(cfg))
	case "latency":
		levels := []byte{0, 1}
		if cfg.qos >= 0 {
			levels = []byte{byte(cfg.qos)}
		}
		var out []*result
		for _, q := range levels {
			r, err := latency(cfg, q)
			if err != nil {
				return out, fmt.Errorf("latency qos %d: %w", q, err)
			}
			out = append(out, r)
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown scenario %q (want fanin, fanout, qos1, qos2, durable1, durable2, latency, conns, device, bridge, bridge-fill or bridge-drain)", name)
}

func printTable(path, subject string, out io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return writeTable(f, out, subject)
}

// freePort is an unused loopback port (freeport.Pick). Another process
// could still take it before the caller binds it.
func freePort() (int, error) { return freeport.Pick() }
