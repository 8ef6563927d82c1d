package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The bridge scenarios measure a broker's bridge: publishers at QoS 1 on
// the gateway broker (-addr), whose bridge forwards bench/# to a remote
// broker (-remote) under -prefix, where a subscriber counts what arrives.
// The generator starts and stops no broker; hack/bench/compare runs the
// three in turn and takes the remote down and up between them:
//
//   - bridge (uplink up): the forwarded rate end to end, and the
//     publishers' own rate and acknowledgement latency. With -session it
//     then leaves a persistent session of that id on the remote,
//     subscribed to what bridge-fill publishes.
//   - bridge-fill (remote down): the publishers' rate and latency while the
//     gateway queues everything they publish.
//   - bridge-drain (remote back): resumes -session on the remote and times
//     the queue's arrival there.
//
// Publisher p's message i carries p*msgs+i, so that the subscriber counts
// each message once and sees duplicates and reordering.
const (
	bridgeLiveTopic  = "bench/bridge/live"
	bridgeFillTopic  = "bench/bridge/fill"
	bridgeProbeTopic = "bench/bridge/probe"
	// bridgeProbeWait bounds the wait for a first message through the
	// bridge: a bridge that forwards nothing fails its run this soon.
	bridgeProbeWait = 15 * time.Second
)

// bridgeScenario runs one of the bridge scenarios.
func bridgeScenario(name string, cfg config) (*result, error) {
	switch name {
	case "bridge":
		return bridgeLive(cfg)
	case "bridge-fill":
		return bridgeFill(cfg)
	default:
		return bridgeDrain(cfg)
	}
}

// arrivals checks the sequence stamps of what a bridge delivered. add
// runs on the subscriber's goroutine; unique may be read meanwhile, the
// rest once the subscriber has stopped.
type arrivals struct {
	msgs       int // per publisher
	seen       []bool
	next       []int // per publisher: one more than the highest index seen
	unique     atomic.Int64
	dups       int64 // arrived again
	reordered  int64 // arrived after a later message of its publisher
	unexpected int64 // carried no stamp of this run
	// first and last are the arrivals of the first and last new message,
	// since the subscriber's start.
	first, last time.Duration
}

func newArrivals(pubs, msgs int) *arrivals {
	return &arrivals{msgs: msgs, seen: make([]bool, pubs*msgs), next: make([]int, pubs)}
}

func (a *arrivals) add(at time.Duration, payload []byte) {
	if len(payload) < 8 || binary.BigEndian.Uint64(payload) >= uint64(len(a.seen)) {
		a.unexpected++
		return
	}
	seq := int(binary.BigEndian.Uint64(payload))
	if a.seen[seq] {
		a.dups++
		return
	}
	a.seen[seq] = true
	p, i := seq/a.msgs, seq%a.msgs
	if i < a.next[p] {
		a.reordered++
	} else {
		a.next[p] = i + 1
	}
	if a.unique.Load() == 0 {
		a.first = at
	}
	a.last = at
	a.unique.Add(1)
}

// report adds the delivery figures: the rate over secs.
func (a *arrivals) report(r *result, expected int64, secs float64) {
	n := a.unique.Load()
	rate := 0.0
	if secs > 0 {
		rate = float64(n) / secs
	}
	r.int("expected", expected).int("delivered", n).int("dups", a.dups).int("reordered", a.reordered).
		int("unexpected", a.unexpected).float("loss_pct", lossPct(expected, n)).float("secs", secs).int("rate", int64(rate))
}

// awaitArrivals is awaitCount of a's distinct arrivals.
func awaitArrivals(a *arrivals, want int64, done <-chan struct{}, idle, firstWait time.Duration, deadline time.Time) bool {
	return awaitCount(a.unique.Load, want, done, idle, firstWait, deadline)
}

// bridgePubs are the gateway's publishers of a bridge scenario.
type bridgePubs struct {
	pubs []*publisher
	msgs int // per publisher
	errs []error
	ends []time.Duration // since start: when each had every acknowledgement
	done chan struct{}
}

// dialBridgePubs connects pubs publishers to the gateway, publisher p on
// topic/p.
func dialBridgePubs(cfg config, id, topic string, deadline time.Time) (*bridgePubs, error) {
	n, msgs := orDefault(cfg.pubs, 1), orDefault(cfg.msgs, 50000)
	bp := &bridgePubs{msgs: msgs, errs: make([]error, n), ends: make([]time.Duration, n), done: make(chan struct{})}
	for i := range n {
		c, err := dial(dialOptions{addr: cfg.addr, transport: cfg.transport, clientID: fmt.Sprintf("%s-p%d", id, i), bufSize: bufSize, deadline: deadline})
		if err != nil {
			bp.close()
			return nil, err
		}
		bp.pubs = append(bp.pubs, &publisher{c: c, qos: 1, n: msgs, window: cfg.window, seq: true, first: i * msgs,
			frames: []publishTemplate{newPublishTemplate(fmt.Sprintf("%s/%d", topic, i), 1, cfg.size)}})
	}
	return bp, nil
}

func (bp *bridgePubs) close() {
	for _, p := range bp.pubs {
		p.c.disconnect()
	}
}

// run starts the publishers; done is closed when all have returned.
func (bp *bridgePubs) run(start time.Time) {
	var wg sync.WaitGroup
	for i, p := range bp.pubs {
		p.start = start
		p.acks = newAckTimer(start, p.window, p.n)
		wg.Go(func() {
			bp.errs[i] = p.run()
			bp.ends[i] = time.Since(start)
		})
	}
	go func() {
		wg.Wait()
		close(bp.done)
	}()
}

// report adds, once done is closed, the publishers' messages, their rate
// from the start to the last acknowledgement, and the latency of each
// acknowledgement; it returns their errors.
func (bp *bridgePubs) report(r *result) []error {
	var lat []time.Duration
	for _, p := range bp.pubs {
		lat = append(lat, p.acks.lat...)
	}
	slices.Sort(lat)
	secs := slices.Max(bp.ends).Seconds()
	total := len(bp.pubs) * bp.msgs
	r.int("pubs", int64(len(bp.pubs))).int("msgs", int64(total)).int("acked", int64(len(lat))).float("pub_secs", secs)
	if secs > 0 {
		r.int("pub_rate", int64(float64(len(lat))/secs))
	}
	r.float("ack_p50_us", float64(percentile(lat, 0.50).Nanoseconds())/1e3).
		float("ack_p99_us", float64(percentile(lat, 0.99).Nanoseconds())/1e3)
	return bp.errs
}

// countErrors logs each error of a scenario and adds their count.
func countErrors(cfg config, r *result, name string, errs ...error) {
	n := 0
	for _, err := range errs {
		if err != nil {
			n++
			fmt.Fprintf(cfg.log, "%s: %v\n", name, err)
		}
	}
	r.int("errors", int64(n))
}

// bridgeLive forwards the publishers' messages through a connected
// bridge; the rate runs from the first publish to the last arrival at the
// remote.
func bridgeLive(cfg config) (*result, error) {
	deadline := time.Now().Add(cfg.timeout)
	id := runID()
	if err := awaitBridge(cfg, id, deadline); err != nil {
		return nil, err
	}
	// The subscriber keeps its session, as bridge-drain's does, so that
	// the remote does the same work for both.
	sub, err := dial(dialOptions{addr: cfg.remote, transport: cfg.transport, clientID: id + "-s", persistent: true, bufSize: bufSize, deadline: deadline})
	if err != nil {
		return nil, fmt.Errorf("remote: %w", err)
	}
	defer endSession(cfg, id+"-s")
	defer sub.disconnect()
	if err := sub.subscribe(cfg.prefix+bridgeLiveTopic+"/#", 1); err != nil {
		return nil, fmt.Errorf("remote: %w", err)
	}
	bp, err := dialBridgePubs(cfg, id, bridgeLiveTopic, deadline)
	if err != nil {
		return nil, err
	}
	defer bp.close()
	a := newArrivals(len(bp.pubs), bp.msgs)
	expected := int64(len(bp.pubs) * bp.msgs)

	cpu, err := readCPU(cfg.pids)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	s := &subscriber{c: sub, start: start, onMsg: a.add}
	var subDone sync.WaitGroup
	subDone.Go(s.run)
	bp.run(start)
	timedOut := awaitArrivals(a, expected, bp.done, cfg.idle, 0, deadline)
	end, err := readCPU(cfg.pids)
	if err != nil {
		return nil, err
	}
	s.stop()
	subDone.Wait()
	<-bp.done // the publishers' sockets share the deadline

	r := newResult("bridge")
	errs := append(bp.report(r), s.err, timeoutErr(timedOut, cfg.timeout, a, expected))
	a.report(r, expected, a.last.Seconds())
	end.report(r, cpu, float64(a.unique.Load()))
	if cfg.session != "" {
		errs = append(errs, makeDrainSession(cfg, deadline))
	}
	countErrors(cfg, r, "bridge", errs...)
	return r, nil
}

func timeoutErr(timedOut bool, timeout time.Duration, a *arrivals, expected int64) error {
	if !timedOut {
		return nil
	}
	return fmt.Errorf("deadline of %v reached with %d of %d delivered", timeout, a.unique.Load(), expected)
}

// awaitBridge publishes a QoS 1 probe on the gateway every 100 ms until
// one arrives at the remote, so that nothing is measured before the
// bridge is connected and forwards.
func awaitBridge(cfg config, id string, deadline time.Time) error {
	if d := time.Now().Add(bridgeProbeWait); d.Before(deadline) {
		deadline = d
	}
	sub, err := dial(dialOptions{addr: cfg.remote, transport: cfg.transport, clientID: id + "-probe", bufSize: 4096, deadline: deadline})
	if err != nil {
		return fmt.Errorf("remote: %w", err)
	}
	defer sub.disconnect()
	if err := sub.subscribe(cfg.prefix+bridgeProbeTopic, 0); err != nil {
		return fmt.Errorf("remote: %w", err)
	}
	pub, err := dial(dialOptions{addr: cfg.addr, transport: cfg.transport, clientID: id + "-q", bufSize: 4096, deadline: deadline})
	if err != nil {
		return err
	}
	defer pub.disconnect()
	arrived := make(chan error, 1)
	go func() {
		fr, err := sub.fr.next()
		if err == nil && fr.typ != typePublish {
			err = fmt.Errorf("expected PUBLISH, got packet type %d", fr.typ)
		}
		arrived <- err
	}()
	probe := newPublishTemplate(bridgeProbeTopic, 1, cfg.size)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for i := uint16(1); time.Now().Before(deadline); i++ {
		// Their PUBACKs are left unread: a hundred and fifty at most.
		if _, err := pub.w.Write(probe.appendFrame(pub.w.AvailableBuffer(), i, 0)); err != nil {
			return err
		}
		if err := pub.w.Flush(); err != nil {
			return err
		}
		select {
		case err := <-arrived:
			if !isStop(err) {
				return err
			}
		case <-tick.C:
			continue
		}
		break
	}
	return fmt.Errorf("no message published on %s at the gateway reached %s%s at the remote within %v: the bridge does not forward",
		bridgeProbeTopic, cfg.prefix, bridgeProbeTopic, bridgeProbeWait)
}

// makeDrainSession leaves a persistent session of id -session on the
// remote, subscribed to what bridge-fill publishes.
func makeDrainSession(cfg config, deadline time.Time) error {
	c, err := dial(dialOptions{addr: cfg.remote, transport: cfg.transport, clientID: cfg.session, persistent: true, bufSize: 4096, deadline: deadline})
	if err != nil {
		return fmt.Errorf("remote: session %s: %w", cfg.session, err)
	}
	defer c.disconnect()
	return c.subscribe(cfg.prefix+bridgeFillTopic+"/#", 1)
}

// bridgeFill publishes with the remote down: the gateway acknowledges
// and queues. Its CPU is per message published.
func bridgeFill(cfg config) (*result, error) {
	deadline := time.Now().Add(cfg.timeout)
	bp, err := dialBridgePubs(cfg, runID(), bridgeFillTopic, deadline)
	if err != nil {
		return nil, err
	}
	defer bp.close()
	cpu, err := readCPU(cfg.pids)
	if err != nil {
		return nil, err
	}
	bp.run(time.Now())
	<-bp.done
	end, err := readCPU(cfg.pids)
	if err != nil {
		return nil, err
	}
	r := newResult("bridge-fill")
	errs := bp.report(r)
	end.report(r, cpu, float64(len(bp.pubs)*bp.msgs))
	countErrors(cfg, r, "bridge-fill", errs...)
	return r, nil
}

// bridgeDrain resumes the session bridge made on the remote, which the
// remote kept while down, and counts bridge-fill's messages as the
// gateway's queue drains into it. wait_secs is the time to the first
// arrival (the bridge reconnecting); the rate runs from the first
// arrival to the last.
func bridgeDrain(cfg config) (*result, error) {
	deadline := time.Now().Add(cfg.timeout)
	a := newArrivals(orDefault(cfg.pubs, 1), orDefault(cfg.msgs, 50000))
	expected := int64(len(a.seen))
	cpu, err := readCPU(cfg.pids)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	c, err := dialStarting(dialOptions{addr: cfg.remote, transport: cfg.transport, clientID: cfg.session, persistent: true, bufSize: bufSize, deadline: deadline})
	if err != nil {
		return nil, fmt.Errorf("remote: %w", err)
	}
	defer endSession(cfg, cfg.session)
	defer c.disconnect()
	if !c.sessionPresent {
		return nil, fmt.Errorf("the remote has no session %s: make it with -scenario bridge -session %[1]s before the outage, on a remote that keeps sessions across a restart", cfg.session)
	}
	// The session's subscription is in place: its messages may already
	// be in the CONNACK's read.
	s := &subscriber{c: c, start: start, onMsg: a.add}
	var subDone sync.WaitGroup
	subDone.Go(s.run)
	closed := make(chan struct{})
	close(closed)
	// Nothing at all within bridgeProbeWait (the bridge reconnects within
	// seconds) is reported as loss: the queue did not survive the outage.
	timedOut := awaitArrivals(a, expected, closed, cfg.idle, bridgeProbeWait, deadline)
	end, err := readCPU(cfg.pids)
	if err != nil {
		return nil, err
	}
	s.stop()
	subDone.Wait()

	r := newResult("bridge-drain").int("msgs", expected).float("wait_secs", a.first.Seconds())
	a.report(r, expected, (a.last - a.first).Seconds())
	end.report(r, cpu, float64(a.unique.Load()))
	countErrors(cfg, r, "bridge-drain", s.err, timeoutErr(timedOut, cfg.timeout, a, expected))
	return r, nil
}

// dialStarting dials a broker that may be starting: a refused connection
// is tried again every 2 ms until the deadline. Started with the remote,
// bridge-drain is then subscribed within milliseconds of the remote
// taking connections, before the bridge's next attempt to reconnect.
func dialStarting(o dialOptions) (*client, error) {
	for {
		c, err := dial(o)
		if !errors.Is(err, syscall.ECONNREFUSED) || time.Now().After(o.deadline) {
			return c, err
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// endSession ends a persistent session on the remote by connecting with
// a clean session.
func endSession(cfg config, id string) {
	if c, err := dial(dialOptions{addr: cfg.remote, transport: cfg.transport, clientID: id, bufSize: 512, deadline: time.Now().Add(5 * time.Second)}); err == nil {
		c.disconnect()
	}
}
