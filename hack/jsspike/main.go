// Command jsspike is the measured spike of issue 39: how persistent
// sessions' state is to be kept in replicated JetStream storage. It
// starts three nats-servers with JetStream embedded in this one process
// (internal/natstest.Launch: 127.0.0.1, ports chosen by the system, files
// under a temporary directory removed at the end), makes every stream
// replicas 3, and measures with nats.go clients on the first node:
//
//  1. what a write confirmed by a quorum costs: one at a time, with a
//     window of 100 and 1,000 acknowledgements outstanding, and in
//     atomic batches (one acknowledgement per batch);
//  2. layout A, one stream holding every session's state, subjects keyed
//     by client id: filling it with -sessions × -queued entries, loading
//     one session's whole state three ways, acknowledging entries four
//     ways, and whether storage stays bounded over -cycles put+ack
//     cycles, with and without subject delete markers;
//  3. layout B, a durable consumer per session as NATS's MQTT layer
//     keeps one per QoS 1 subscription: making -consumers of them, R3
//     and R1, the process's memory before and after, its CPU while they
//     idle, and acknowledging through them;
//  4. what the servers answer to batches a committer could send.
//
// Every phase is bounded in count and in time (-phase-time, -cycle-time,
// -consumer-time). The servers and clients share the process's cores.
//
//	go run ./hack/jsspike
//	go run ./hack/jsspike -sessions 1000 -cycles 100000 -consumers 1000 -idle 5s
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"mqttd/internal/natstest"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

type config struct {
	sessions, queued, size int
	writes                 int
	batches                []int
	fillBatch              int
	loads, acks            int
	cycles                 int
	consumers              int
	consumerReplicas       []int
	idle, timeout          time.Duration
	phaseTime, cycleTime   time.Duration
	consumerTime           time.Duration
	phases                 map[int]bool
}

type results struct {
	Quorum    []row
	Fill      row
	Loads     []row
	Acks      []row
	Cycles    []row
	Baseline  consumerResult // no consumers: RSS and idle CPU
	Consumers []consumerResult
	Checks    []string
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "jsspike:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("jsspike", flag.ContinueOnError)
	var cfg config
	fs.IntVar(&cfg.sessions, "sessions", 10000, "persistent sessions in layout A")
	fs.IntVar(&cfg.queued, "queued", 10, "queued entries per session in layout A")
	fs.IntVar(&cfg.size, "size", 150, "bytes of a queued entry (a QoS 1 message record)")
	fs.IntVar(&cfg.writes, "writes", 20000, "messages per write mode of phase 1")
	batches := fs.String("batches", "10,100,1000", "atomic batch sizes of phase 1 (at most 1000, the server's default bound)")
	fs.IntVar(&cfg.fillBatch, "fill-batch", 1000, "atomic batch size of layout A's writes and tombstones")
	fs.IntVar(&cfg.loads, "loads", 100, "random sessions loaded each way")
	fs.IntVar(&cfg.acks, "acks", 5000, "entries acknowledged each way (layout A) and through consumers (layout B)")
	fs.IntVar(&cfg.cycles, "cycles", 1000000, "put+ack cycles of the storage bound (each variant)")
	fs.IntVar(&cfg.consumers, "consumers", 10000, "durable consumers of layout B")
	replicas := fs.String("consumer-replicas", "3,1", "replica counts of layout B's consumers")
	phases := fs.String("phases", "1,2,3,4", "the phases to run")
	fs.DurationVar(&cfg.idle, "idle", 20*time.Second, "how long idle CPU is read")
	fs.DurationVar(&cfg.timeout, "timeout", 30*time.Second, "bound on each request's wait")
	fs.DurationVar(&cfg.phaseTime, "phase-time", 60*time.Second, "bound on each write mode of phase 1")
	fs.DurationVar(&cfg.cycleTime, "cycle-time", 3*time.Minute, "bound on each variant of the put+ack cycles")
	fs.DurationVar(&cfg.consumerTime, "consumer-time", 3*time.Minute, "bound on making layout B's consumers")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if cfg.batches, err = ints(*batches); err != nil {
		return fmt.Errorf("-batches: %w", err)
	}
	if cfg.consumerReplicas, err = ints(*replicas); err != nil {
		return fmt.Errorf("-consumer-replicas: %w", err)
	}
	p, err := ints(*phases)
	if err != nil {
		return fmt.Errorf("-phases: %w", err)
	}
	cfg.phases = map[int]bool{}
	for _, n := range p {
		cfg.phases[n] = true
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	return measure(cfg, os.Stderr, func(res *results, _ error) { report(stdout, cfg, res) })
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

func (c config) validate() error {
	for _, b := range c.batches {
		if b < 1 || b > 1000 {
			return errors.New("-batches: each between 1 and 1000")
		}
	}
	for _, r := range c.consumerReplicas {
		if r != 1 && r != 3 {
			return errors.New("-consumer-replicas: 1 or 3")
		}
	}
	for p := range c.phases {
		if p < 1 || p > 4 {
			return errors.New("-phases: of 1, 2, 3 and 4")
		}
	}
	switch {
	case c.sessions < 1, c.queued < 1, c.writes < 1, c.loads < 1, c.acks < 1, c.cycles < 1, c.consumers < 1:
		return errors.New("-sessions, -queued, -writes, -loads, -acks, -cycles and -consumers must be positive")
	case c.queued > 1000:
		return errors.New("-queued: at most 1000 (a direct get answers at most 1024 messages)")
	case c.size < 1, c.fillBatch < 2 || c.fillBatch > 1000:
		return errors.New("-size must be positive, -fill-batch between 2 and 1000")
	case c.idle <= 0, c.timeout <= 0, c.phaseTime <= 0, c.cycleTime <= 0, c.consumerTime <= 0:
		return errors.New("-idle, -timeout, -phase-time, -cycle-time and -consumer-time must be positive")
	}
	return nil
}

// measure starts the servers, runs every phase (saying which on
// progress), gives done what it measured (up to an error, if any), and
// stops and removes the servers, waiting for them at most -timeout
// (servers holding thousands of replicated consumers take minutes).
func measure(cfg config, progress io.Writer, done func(*results, error)) error {
	say := func(phase string) { fmt.Fprintf(progress, "%s %s\n", time.Now().UTC().Format(time.TimeOnly), phase) }
	dir, err := os.MkdirTemp("", "jsspike-")
	if err != nil {
		return err
	}
	servers, err := natstest.Launch(dir, 3)
	if err != nil {
		os.RemoveAll(dir)
		return err
	}
	res, err := measureOn(cfg, servers[0].ClientURL(), dir, say)
	done(res, err)
	say("stopping the servers")
	stopped := make(chan struct{})
	go func() {
		natstest.Stop(servers)
		close(stopped)
	}()
	select {
	case <-stopped:
		os.RemoveAll(dir)
	case <-time.After(cfg.timeout):
		return errors.Join(err, fmt.Errorf("servers not stopped within %v: %s left behind", cfg.timeout, dir))
	}
	return err
}

// measureOn runs the phases with a client of url.
func measureOn(cfg config, url, dir string, say func(string)) (*results, error) {
	nc, err := nats.Connect(url, nats.Name("jsspike"))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1000))
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	res := &results{}
	if cfg.phases[1] {
		say("1: quorum writes")
		if res.Quorum, err = measureQuorum(ctx, cfg, nc, js); err != nil {
			return res, fmt.Errorf("quorum writes: %w", err)
		}
	}
	if cfg.phases[2] {
		say("2: layout A")
		if err := measureLayoutA(ctx, cfg, nc, js, dir, res); err != nil {
			return res, fmt.Errorf("layout A: %w", err)
		}
	}
	if cfg.phases[3] {
		if err := measureLayoutB(ctx, cfg, js, res, say); err != nil {
			return res, err
		}
	}
	if cfg.phases[4] {
		say("4: batch checks")
		if res.Checks, err = checkBatchLimits(ctx, cfg, nc, js); err != nil {
			return res, fmt.Errorf("batch checks: %w", err)
		}
	}
	return res, nil
}

// measureLayoutB reads the process without consumers, then measures
// them at each replica count.
func measureLayoutB(ctx context.Context, cfg config, js jetstream.JetStream, res *results, say func(string)) error {
	var err error
	say("3: idle, no consumers")
	if res.Baseline.RSSAfter, _, err = procStat(); err != nil {
		return err
	}
	if res.Baseline.IdleCPU, err = idleCPU(cfg.idle); err != nil {
		return err
	}
	for _, r := range cfg.consumerReplicas {
		say(fmt.Sprintf("3: layout B, R%d consumers", r))
		c, err := measureConsumers(ctx, cfg, js, r, say)
		res.Consumers = append(res.Consumers, c)
		if err != nil {
			return fmt.Errorf("layout B R%d: %w", r, err)
		}
	}
	return nil
}

func measureLayoutA(ctx context.Context, cfg config, nc *nats.Conn, js jetstream.JetStream, dir string, res *results) error {
	stream, err := js.CreateStream(ctx, sessionStream("S", 0))
	if err != nil {
		return err
	}
	defer js.DeleteStream(ctx, "S")
	s, fillRow, err := fill(cfg, nc, "S")
	res.Fill = fillRow
	if err != nil {
		return fmt.Errorf("fill: %w", err)
	}
	if res.Loads, err = measureLoads(ctx, cfg, nc, js, "S", s); err != nil {
		return fmt.Errorf("loads: %w", err)
	}
	var left uint64
	var lastAck time.Time
	if res.Acks, left, lastAck, err = measureAcks(ctx, cfg, nc, stream, "S", s); err != nil {
		return fmt.Errorf("acks: %w", err)
	}
	// The tombstones expire after a second: the cycles run meanwhile.
	for i, marker := range []time.Duration{0, time.Second} {
		r, err := measureCycles(ctx, cfg, nc, js, dir, "L"+strconv.Itoa(i), marker)
		res.Cycles = append(res.Cycles, r)
		if err != nil {
			return fmt.Errorf("cycles: %w", err)
		}
	}
	if err := waitMsgs(ctx, stream, left, cfg.timeout); err != nil {
		return fmt.Errorf("acks: %w", err)
	}
	res.Acks = append(res.Acks, row{Phase: "2A ack: tombstones expired",
		Note: fmt.Sprintf("checked after the cycles, %v after the last: the stream holds %d messages, as expected", time.Since(lastAck).Round(time.Millisecond), left)})
	return nil
}
