package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// deviceKeepalive is the devices' keepalive in seconds: like real devices
// they make the broker keep a keepalive deadline each, and it is long
// enough that a device publishing every few seconds never needs a PINGREQ.
const deviceKeepalive = 60

// device is one connected client of the device workload.
type device struct {
	c    *client
	tmpl publishTemplate
	id   uint16 // last packet id sent
	sent int
}

// deviceShard sends the messages of a contiguous range of devices. Device i
// publishes at k*period + i*period/n after the start, so walking the range
// in order walks its messages in time order, and one ticker paces them all.
type deviceShard struct {
	devs     []*device
	first    int // index of devs[0] among all devices
	buf      []byte
	measured int           // messages due at or after the warm-up
	maxLag   time.Duration // how late the latest message left
	failed   int
	err      error
}

// run sends every message due before stop, each as its own write, stamped
// with the time it leaves.
func (sh *deviceShard) run(start time.Time, n int, period, warm, stop time.Duration) {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	i, round := 0, 0
	for {
		now := time.Since(start)
		for {
			due := time.Duration(round)*period + time.Duration(sh.first+i)*period/time.Duration(n)
			if due >= stop {
				return
			}
			if due > now {
				break
			}
			if due >= warm {
				sh.measured++
			}
			sh.send(sh.devs[i], start)
			sh.maxLag = max(sh.maxLag, time.Since(start)-due)
			if i++; i == len(sh.devs) {
				i, round = 0, round+1
			}
		}
		<-tick.C
	}
}

func (sh *deviceShard) send(d *device, start time.Time) {
	if d.id++; d.id == 0 {
		d.id = 1
	}
	sh.buf = d.tmpl.appendFrame(sh.buf[:0], d.id, int64(time.Since(start)))
	if _, err := d.c.conn.Write(sh.buf); err != nil {
		sh.failed++
		if sh.err == nil {
			sh.err = err
		}
		return
	}
	d.sent++
}

// deviceWorkload connects the devices, then runs them for one period of
// warm-up (every device publishes once) and the measured duration, with a
// QoS 1 subscriber on iot/# (whose deliveries give the latencies) and a
// QoS 0 one on iot/+/telemetry. Given the broker's pid it reports the
// broker's CPU time per message over the measured interval and its RSS
// growth per connected device.
func deviceWorkload(cfg config) (*result, error) {
	n := orDefault(cfg.devices, 10000)
	rate := orDefault(cfg.rate, 1000)
	dur := cfg.duration
	if dur <= 0 {
		dur = 10 * time.Second
	}
	period := time.Second * time.Duration(n) / time.Duration(rate)
	deadline := time.Now().Add(cfg.timeout)
	spread, err := loopbackTarget(cfg.addr)
	if err != nil {
		return nil, err
	}

	id := runID()
	var subs []*subscriber
	devs := make([]*client, n)
	defer func() {
		for _, s := range subs {
			s.c.disconnect()
		}
		for _, c := range devs {
			if c != nil {
				c.disconnect()
			}
		}
	}()
	for i, f := range []struct {
		filter string
		qos    byte
	}{{"iot/#", 1}, {"iot/+/telemetry", 0}} {
		sid := fmt.Sprintf("%s-s%d", id, i)
		c, err := dial(dialOptions{addr: cfg.addr, transport: cfg.transport, clientID: sid, bufSize: bufSize, deadline: deadline})
		if err != nil {
			return nil, err
		}
		subs = append(subs, &subscriber{c: c, id: sid})
		if err := c.subscribe(f.filter, f.qos); err != nil {
			return nil, err
		}
	}
	warm := period
	lat := make([]time.Duration, 0, int(dur.Seconds()*float64(rate))+1)
	subs[0].onMsg = func(arrival time.Duration, payload []byte) {
		if len(payload) < 8 {
			return
		}
		if sent := time.Duration(binary.BigEndian.Uint64(payload)); sent >= warm {
			lat = append(lat, arrival-sent)
		}
	}

	var rssBefore, rssBurst, rssAfter int64
	if cfg.pid > 0 {
		if rssBefore, err = settledRSS(cfg.pid, cfg.settle, deadline); err != nil {
			return nil, err
		}
	}
	connStart := time.Now()
	connected, err := dialAll(cfg, devs, spread, deadline, dialPlan{name: "d", keepalive: deviceKeepalive})
	if err != nil {
		return nil, fmt.Errorf("%d of %d devices connected: %w", connected, n, err)
	}
	connSecs := time.Since(connStart).Seconds()
	if cfg.pid > 0 {
		if rssBurst, err = readRSS(cfg.pid); err != nil {
			return nil, err
		}
		if rssAfter, err = settledRSS(cfg.pid, cfg.settle, deadline); err != nil {
			return nil, err
		}
	}

	shards := make([]*deviceShard, min(runtime.GOMAXPROCS(0), n))
	for s := range shards {
		lo, hi := s*n/len(shards), (s+1)*n/len(shards)
		sh := &deviceShard{first: lo}
		for i := lo; i < hi; i++ {
			sh.devs = append(sh.devs, &device{c: devs[i], tmpl: newPublishTemplate(fmt.Sprintf("iot/d%d/telemetry", i), 1, cfg.size)})
		}
		shards[s] = sh
	}

	start := time.Now()
	var subsWG sync.WaitGroup
	for _, s := range subs {
		s.start = start
		subsWG.Go(s.run)
	}
	// The measured interval starts after the warm-up; its CPU readings are
	// taken by a goroutine of its own so that no shard waits for them.
	var cpu struct {
		broker, gen time.Duration
		err         error
	}
	atWarm := make(chan struct{})
	go func() {
		defer close(atWarm)
		time.Sleep(time.Until(start.Add(warm)))
		cpu.gen, cpu.err = processCPU(os.Getpid())
		if cfg.pid > 0 && cpu.err == nil {
			cpu.broker, cpu.err = processCPU(cfg.pid)
		}
	}()
	var wg sync.WaitGroup
	for _, sh := range shards {
		wg.Go(func() { sh.run(start, n, period, warm, warm+dur) })
	}
	wg.Wait()
	pubsDone := make(chan struct{})
	close(pubsDone)
	var sent, measured, failed int64
	var maxLag time.Duration
	var sendErr error
	for _, sh := range shards {
		for _, d := range sh.devs {
			sent += int64(d.sent)
		}
		measured += int64(sh.measured)
		failed += int64(sh.failed)
		maxLag = max(maxLag, sh.maxLag)
		if sendErr == nil {
			sendErr = sh.err
		}
	}
	timedOut := awaitDeliveries(subs, 2*sent, pubsDone, cfg.idle, deadline)
	<-atWarm
	if cpu.err != nil {
		return nil, cpu.err
	}
	measuredWall := time.Since(start.Add(warm))
	genCPU, err := processCPU(os.Getpid())
	if err != nil {
		return nil, err
	}
	var brokerCPU time.Duration
	if cfg.pid > 0 {
		if brokerCPU, err = processCPU(cfg.pid); err != nil {
			return nil, err
		}
	}
	for _, s := range subs {
		s.stop()
	}
	subsWG.Wait()
	acked, ackErr := drainAcks(cfg, shards, deadline)

	// Failed writes count one error each; sendErr is the first of them.
	nerr := failed
	if sendErr != nil {
		fmt.Fprintf(cfg.log, "device: %d writes failed, first: %v\n", failed, sendErr)
	}
	errs := []error{ackErr, subs[0].err, subs[1].err}
	if timedOut {
		errs = append(errs, fmt.Errorf("deadline of %v reached before every message was delivered", cfg.timeout))
	}
	for _, e := range errs {
		if e != nil {
			nerr++
			fmt.Fprintf(cfg.log, "device: %v\n", e)
		}
	}
	slices.Sort(lat)
	q1, q0 := subs[0].count.Load(), subs[1].count.Load()
	r := newResult("device").int("devices", int64(n)).int("rate", int64(rate)).int("period_ms", period.Milliseconds()).
		float("connect_secs", connSecs).float("secs", dur.Seconds()).int("msgs", measured).int("sent", sent).
		int("delivered_qos1", q1).int("delivered_qos0", q0).int("acked", acked).
		float("loss_pct", lossPct(2*sent, q1+q0)).float("max_lag_ms", float64(maxLag.Microseconds())/1e3)
	for _, p := range []struct {
		key string
		q   float64
	}{{"p50_us", 0.50}, {"p99_us", 0.99}, {"p999_us", 0.999}, {"max_us", 1}} {
		r.float(p.key, float64(percentile(lat, p.q).Nanoseconds())/1e3)
	}
	if cfg.pid > 0 {
		used := brokerCPU - cpu.broker
		r.float("cpu_us_per_msg", float64(used.Microseconds())/float64(max(measured, 1))).
			float("broker_cpu_pct", 100*used.Seconds()/measuredWall.Seconds()).
			int("rss_before_kb", rssBefore>>10).int("rss_after_kb", rssAfter>>10).
			int("rss_per_conn", (rssAfter-rssBefore)/max(connected, 1)).
			int("rss_burst_per_conn", (rssBurst-rssBefore)/max(connected, 1))
		if end, err := readRSS(cfg.pid); err == nil {
			r.int("rss_end_kb", end>>10)
		}
	}
	return r.float("gen_cpu_pct", 100*(genCPU-cpu.gen).Seconds()/measuredWall.Seconds()).int("errors", nerr), nil
}

// drainAcks reads the PUBACKs the broker sent each device, which wait in
// the sockets' buffers: nothing reads them while messages are sent, so the
// run needs no reader per device. It waits at most -idle for missing ones.
func drainAcks(cfg config, shards []*deviceShard, deadline time.Time) (int64, error) {
	until := time.Now().Add(cfg.idle)
	if deadline.Before(until) {
		until = deadline
	}
	jobs := make(chan *device)
	var acked atomic.Int64
	var errOnce sync.Once
	var firstErr error
	var wg sync.WaitGroup
	for range orDefault(cfg.concurrency, 64) {
		wg.Go(func() {
			for d := range jobs {
				if err := d.c.conn.SetReadDeadline(until); err != nil {
					errOnce.Do(func() { firstErr = err })
					continue
				}
				for got := 0; got < d.sent; got++ {
					fr, err := d.c.fr.next()
					if err == nil && fr.typ != typePuback {
						err = fmt.Errorf("device got packet type %d, want PUBACK", fr.typ)
					}
					if err != nil {
						if !isStop(err) {
							errOnce.Do(func() { firstErr = err })
						}
						break
					}
					acked.Add(1)
				}
			}
		})
	}
	for _, sh := range shards {
		for _, d := range sh.devs {
			jobs <- d
		}
	}
	close(jobs)
	wg.Wait()
	return acked.Load(), firstErr
}
