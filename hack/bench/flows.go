package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sync"
	"time"
)

// config holds the command-line settings; zero counts mean the scenario's
// own default.
type config struct {
	addr        string
	pubAddrs    addrList // flows: publisher i dials pubAddrs[i%len] (none: addr)
	subAddrs    addrList // flows: subscriber i dials subAddrs[i%len] (none: addr)
	remote      string   // bridge scenarios: where the gateway at addr forwards to
	prefix      string   // bridge scenarios: the bridge's remote prefix
	session     string   // bridge, bridge-drain: the remote session bridge-drain resumes
	transport   transport
	timeout     time.Duration // whole-scenario bound
	idle        time.Duration // how long to wait for stragglers once publishers are done
	pubs        int
	subs        int
	msgs        int // per publisher
	size        int // payload bytes
	window      int // unacknowledged QoS 1/2 messages per publisher
	qos         int // latency: -1 runs QoS 0 then QoS 1
	rate        int // latency, device: messages per second
	duration    time.Duration
	devices     int
	conns       int
	concurrency int     // conns, device: dials in flight
	pid         int     // conns, device: broker process whose CPU time and RSS are measured
	pids        pidList // flows, bridge: processes whose CPU time is summed as the broker's
	settle      time.Duration
	hold        time.Duration // conns: how long the connections stay idle before the RSS is read
	log         io.Writer
}

// flow is a publish/subscribe throughput or latency run.
type flow struct {
	name     string
	pubs     int
	subs     int
	msgs     int // per publisher
	qos      byte
	filter   string
	topics   func(pub int) []string
	interval time.Duration
	// onMsg, when set, is given to every subscriber (so it must be safe for
	// concurrent use when there are several).
	onMsg func(arrival time.Duration, payload []byte)
	// persistent subscribers keep their sessions (clean session 0), so
	// that a broker with a store writes what they are sent; their sessions
	// are ended after the run.
	persistent bool
}

// bufSize is the read and write buffer of each throughput connection: big
// enough that one syscall moves hundreds of frames.
const bufSize = 64 << 10

// runID prefixes the client ids of one run so that concurrent or successive
// runs do not take over each other's sessions; with the "-c9999" suffixes
// it stays within the 23 bytes every 3.1.1 broker must accept.
func runID() string {
	return fmt.Sprintf("b%04x%08x", os.Getpid()&0xffff, time.Now().UnixNano()&0xffffffff)
}

// runFlow connects the subscribers, then the publishers, runs them and
// waits until everything arrived, the idle timeout or the deadline.
func runFlow(cfg config, fl flow) (*result, error) {
	deadline := time.Now().Add(cfg.timeout)
	subs, pubs, err := connectFlow(cfg, fl, deadline)
	defer func() {
		for _, s := range subs {
			s.c.disconnect()
			if fl.persistent {
				// Connecting again with a clean session ends the kept one.
				if c, err := dial(dialOptions{addr: s.addr, transport: cfg.transport, clientID: s.id, bufSize: 512, deadline: time.Now().Add(5 * time.Second)}); err == nil {
					c.disconnect()
				}
			}
		}
		for _, p := range pubs {
			p.c.disconnect()
		}
	}()
	if err != nil {
		return nil, err
	}
	if cfg.spansNodes() {
		if err := awaitInterest(cfg, fl, subs, deadline); err != nil {
			return nil, err
		}
	}

	cpu, err := readCPU(cfg.pids)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	var subsWG sync.WaitGroup
	for _, s := range subs {
		s.start = start
		subsWG.Go(s.run)
	}
	pubErrs := make([]error, len(pubs))
	pubsDone := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		for i, p := range pubs {
			p.start = start
			wg.Go(func() { pubErrs[i] = p.run() })
		}
		wg.Wait()
		close(pubsDone)
	}()

	expected := int64(fl.pubs * fl.msgs * fl.subs)
	timedOut := awaitDeliveries(subs, expected, pubsDone, cfg.idle, deadline)
	end, err := readCPU(cfg.pids)
	if err != nil {
		return nil, err
	}
	for _, s := range subs {
		s.stop()
	}
	subsWG.Wait()
	<-pubsDone // publishers' sockets share the deadline, so this is bounded
	errs := pubErrs
	for _, s := range subs {
		errs = append(errs, s.err)
	}
	r := flowResult(cfg, fl, subs, errs, timedOut)
	end.report(r, cpu, r.nums["delivered"])
	return r, nil
}

// cpuReading is the CPU time the generator, and the broker when its pids
// are given (all of a cluster's processes, summed, and each), had used at
// a moment.
type cpuReading struct {
	at          time.Time
	pids        []int
	broker, gen time.Duration
	each        []time.Duration
}

func readCPU(pids []int) (cpuReading, error) {
	c := cpuReading{at: time.Now(), pids: pids}
	var err error
	if c.gen, err = processCPU(os.Getpid()); err != nil {
		return c, err
	}
	for _, pid := range pids {
		used, err := processCPU(pid)
		if err != nil {
			return c, fmt.Errorf("broker pid %d: %w", pid, err)
		}
		c.broker += used
		c.each = append(c.each, used)
	}
	return c, nil
}

// report adds what was used since start: the generator's share of the
// wall time (100: generator-bound) and, with the broker's pid, the
// broker's share and its CPU per delivered message, which unlike the
// rate does not depend on the generator keeping up. With several pids it
// adds the busiest process's CPU per message: with a core per process,
// as a cluster's nodes on machines of their own, the rate could reach
// its inverse; and that process's pid.
func (c cpuReading) report(r *result, start cpuReading, delivered float64) {
	wall := c.at.Sub(start.at).Seconds()
	if wall <= 0 {
		return
	}
	r.float("gen_cpu_pct", 100*(c.gen-start.gen).Seconds()/wall)
	if len(c.pids) > 0 {
		used := c.broker - start.broker
		r.float("broker_cpu_pct", 100*used.Seconds()/wall).
			float("cpu_us_per_msg", float64(used.Nanoseconds())/1e3/max(delivered, 1))
	}
	if len(c.each) > 1 && len(start.each) == len(c.each) {
		var busiest time.Duration
		which := 0
		for i, used := range c.each {
			if d := used - start.each[i]; d > busiest {
				busiest, which = d, i
			}
		}
		r.float("busiest_cpu_us_per_msg", float64(busiest.Nanoseconds())/1e3/max(delivered, 1)).
			int("busiest_pid", int64(c.pids[which]))
	}
}

// connectFlow dials and subscribes every subscriber, then dials every
// publisher. It returns what it connected even on error, for closing.
func connectFlow(cfg config, fl flow, deadline time.Time) ([]*subscriber, []*publisher, error) {
	id := runID()
	var subs []*subscriber
	var pubs []*publisher
	for i := range fl.subs {
		sid := fmt.Sprintf("%s-s%d", id, i)
		addr := cfg.subAddr(i)
		c, err := dial(dialOptions{addr: addr, transport: cfg.transport, clientID: sid, bufSize: bufSize, deadline: deadline,
			persistent: fl.persistent})
		if err != nil {
			return subs, pubs, err
		}
		subs = append(subs, &subscriber{c: c, id: sid, addr: addr, onMsg: fl.onMsg})
		if err := c.subscribe(fl.filter, fl.qos); err != nil {
			return subs, pubs, err
		}
	}
	for i := range fl.pubs {
		c, err := dial(dialOptions{addr: cfg.pubAddr(i), transport: cfg.transport, clientID: fmt.Sprintf("%s-p%d", id, i), bufSize: bufSize, deadline: deadline})
		if err != nil {
			return subs, pubs, err
		}
		var frames []publishTemplate
		for _, t := range fl.topics(i) {
			frames = append(frames, newPublishTemplate(t, fl.qos, cfg.size))
		}
		pubs = append(pubs, &publisher{c: c, qos: fl.qos, n: fl.msgs, window: cfg.window, frames: frames, interval: fl.interval})
	}
	return subs, pubs, nil
}

// flowResult sums the subscribers' counts into the result line and logs
// every error (nil entries are skipped) and a timeout.
func flowResult(cfg config, fl flow, subs []*subscriber, errs []error, timedOut bool) *result {
	expected := int64(fl.pubs * fl.msgs * fl.subs)
	var delivered int64
	var last time.Duration
	for _, s := range subs {
		delivered += s.count.Load()
		last = max(last, s.last)
	}
	if timedOut {
		errs = append(errs, fmt.Errorf("deadline of %v reached with %d of %d delivered", cfg.timeout, delivered, expected))
	}
	n := 0
	for _, err := range errs {
		if err != nil {
			n++
			fmt.Fprintf(cfg.log, "%s: %v\n", fl.name, err)
		}
	}
	secs := last.Seconds()
	rate := 0.0
	if secs > 0 {
		rate = float64(delivered) / secs
	}
	return newResult(fl.name).int("qos", int64(fl.qos)).int("pubs", int64(fl.pubs)).int("subs", int64(fl.subs)).
		int("msgs", int64(fl.pubs*fl.msgs)).int("expected", expected).int("delivered", delivered).
		float("loss_pct", lossPct(expected, delivered)).float("secs", secs).int("rate", int64(rate)).int("errors", int64(n))
}

// awaitDeliveries polls the subscribers' counts until all expected messages
// arrived, nothing arrived for idle after the publishers finished, or the
// deadline passed (reported as true).
func awaitDeliveries(subs []*subscriber, expected int64, pubsDone <-chan struct{}, idle time.Duration, deadline time.Time) bool {
	return awaitCount(func() (n int64) {
		for _, s := range subs {
			n += s.count.Load()
		}
		return n
	}, expected, pubsDone, idle, 0, deadline)
}

// awaitCount polls count until it reaches want; or, once done is closed,
// nothing new came for idle (and, when nothing came at all, for
// firstWait); or the deadline passed (reported as true).
func awaitCount(count func() int64, want int64, done <-chan struct{}, idle, firstWait time.Duration, deadline time.Time) bool {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	seen, changed := int64(-1), time.Now()
	var doneAt time.Time
	for {
		n := count()
		if n >= want {
			return false
		}
		now := time.Now()
		if n != seen {
			seen, changed = n, now
		}
		if doneAt.IsZero() {
			select {
			case <-done:
				doneAt = now
			default:
			}
		}
		quiet := max(idle, firstWait)
		if n > 0 {
			quiet = idle
		}
		if !doneAt.IsZero() && now.Sub(changed) >= quiet && now.Sub(doneAt) >= quiet {
			return false
		}
		if now.After(deadline) {
			return true
		}
		<-tick.C
	}
}

func fanin(cfg config) (*result, error) {
	return runFlow(cfg, flow{
		name: "fanin", pubs: orDefault(cfg.pubs, 8), subs: 1, msgs: orDefault(cfg.msgs, 50000),
		filter: "bench/#",
		topics: func(pub int) []string {
			ts := make([]string, 100)
			for i := range ts {
				ts[i] = fmt.Sprintf("bench/%d/%d", pub, i)
			}
			return ts
		},
	})
}

func fanout(cfg config) (*result, error) {
	return runFlow(cfg, flow{
		name: "fanout", pubs: 1, subs: orDefault(cfg.subs, 100), msgs: orDefault(cfg.msgs, 5000),
		filter: "bench/fanout",
		topics: func(int) []string { return []string{"bench/fanout"} },
	})
}

// qosFlow is one publisher and one subscriber at qos on both legs; a
// persistent subscriber makes it the durable flow. The in-memory flows
// send 200,000 messages: 50,000 went through a broker in 60 ms, of which
// the one-off costs of a burst after a quiet spell (mqttd faulting back
// in the heap it gave back, 10-15 ms) were a fifth; over TLS, where a
// run's new connections warm up too, mqttd measured 0.85x FlashMQ's rate
// at 50,000 and 1.13x at 500,000.
func qosFlow(cfg config, qos byte, persistent bool) (*result, error) {
	name, msgs := fmt.Sprintf("qos%d", qos), 200000
	if persistent {
		name = fmt.Sprintf("durable%d", qos)
	}
	if persistent {
		msgs = 50000
	}
	topic := "bench/" + name
	return runFlow(cfg, flow{
		name: name, pubs: 1, subs: 1, msgs: orDefault(cfg.msgs, msgs), qos: qos,
		filter: topic, persistent: persistent,
		topics: func(int) []string { return []string{topic} },
	})
}

// latency publishes at a fixed rate with the send time in each payload and
// reports arrival minus send time percentiles.
func latency(cfg config, qos byte) (*result, error) {
	rate := orDefault(cfg.rate, 1000)
	dur := cfg.duration
	if dur <= 0 {
		dur = 5 * time.Second
	}
	n := max(1, int(dur.Seconds()*float64(rate)))
	lat := make([]time.Duration, 0, n)
	r, err := runFlow(cfg, flow{
		name: "latency", pubs: 1, subs: 1, msgs: n, qos: qos,
		filter: "bench/latency", topics: func(int) []string { return []string{"bench/latency"} },
		interval: time.Second / time.Duration(rate),
		onMsg: func(arrival time.Duration, payload []byte) {
			if len(payload) >= 8 {
				lat = append(lat, arrival-time.Duration(binary.BigEndian.Uint64(payload)))
			}
		},
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(lat)
	r.int("target_rate", int64(rate))
	for _, p := range []struct {
		key string
		q   float64
	}{{"p50_us", 0.50}, {"p99_us", 0.99}, {"p999_us", 0.999}, {"max_us", 1}} {
		r.float(p.key, float64(percentile(lat, p.q).Nanoseconds())/1e3)
	}
	return r, nil
}

// percentile returns the q-quantile of sorted samples (nearest rank).
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func orDefault(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}
