package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// sourceAddrs is how many loopback source addresses (127.0.0.1 up to
// 127.0.0.250) the conns scenario spreads over, so that no single source
// address runs out of ephemeral ports.
const sourceAddrs = 250

// conns opens many idle subscribed clients, reports connects per second
// and, given the broker's pid, its resident memory per connection.
func conns(cfg config) (*result, error) {
	n := orDefault(cfg.conns, 10000)
	deadline := time.Now().Add(cfg.timeout)
	spread, err := loopbackTarget(cfg.addr)
	if err != nil {
		return nil, err
	}
	var before int64
	var cpuBefore time.Duration
	if cfg.pid > 0 {
		if before, err = settledRSS(cfg.pid, cfg.settle, deadline); err != nil {
			return nil, err
		}
		if cpuBefore, err = processCPU(cfg.pid); err != nil {
			return nil, err
		}
	}

	clients := make([]*client, n)
	defer func() {
		for _, c := range clients {
			if c != nil {
				c.disconnect()
			}
		}
	}()
	genBefore, err := processCPU(os.Getpid())
	if err != nil {
		return nil, err
	}
	start := time.Now()
	connected, firstErr := dialAll(cfg, clients, spread, deadline, dialPlan{
		name: "c",
		setup: func(i int, c *client) error {
			return c.subscribe(fmt.Sprintf("bench/conns/%d", i), 0)
		},
	})
	secs := time.Since(start).Seconds()
	genAfter, err := processCPU(os.Getpid())
	if err != nil {
		return nil, err
	}
	var cpuAfter time.Duration
	if cfg.pid > 0 {
		if cpuAfter, err = processCPU(cfg.pid); err != nil {
			return nil, err
		}
	}
	if firstErr != nil {
		fmt.Fprintf(cfg.log, "conns: %d of %d failed, first: %v\n", int64(n)-connected, n, firstErr)
	}

	r := newResult("conns").int("conns", int64(n)).int("connected", connected).
		float("secs", secs).int("rate", int64(float64(connected)/secs))
	// The generator's CPU per connection beside the broker's shows which of
	// the two bounds connects/s: the one near 100% of its core.
	r.float("gen_cpu_us_per_conn", float64((genAfter-genBefore).Microseconds())/float64(max(connected, 1))).
		float("gen_cpu_pct", 100*(genAfter-genBefore).Seconds()/secs)
	if cfg.pid > 0 {
		burst, err := readRSS(cfg.pid)
		if err != nil {
			return nil, err
		}
		// The idle connection's cost is what is held once they have been
		// idle a while: mqttd gives the spare heap of a burst of connects
		// back after ten quiet seconds, where Mosquitto's and FlashMQ's
		// RSS is still at once.
		hold := time.NewTimer(min(cfg.hold, time.Until(deadline)))
		<-hold.C
		after, err := settledRSS(cfg.pid, cfg.settle, deadline)
		if err != nil {
			return nil, err
		}
		perConn, burstPerConn, cpuPerConn := int64(0), int64(0), 0.0
		if connected > 0 {
			perConn = (after - before) / connected
			burstPerConn = (burst - before) / connected
			cpuPerConn = float64((cpuAfter - cpuBefore).Microseconds()) / float64(connected)
		}
		// The generator's one CPU can be the bottleneck of connects/s; the
		// broker's CPU time per connection compares brokers regardless.
		r.int("rss_before_kb", before>>10).int("rss_burst_kb", burst>>10).int("rss_after_kb", after>>10).
			int("bytes_per_conn", perConn).int("burst_bytes_per_conn", burstPerConn).
			float("broker_cpu_us_per_conn", cpuPerConn).
			float("broker_cpu_pct", 100*(cpuAfter-cpuBefore).Seconds()/secs)
	}
	return r.int("errors", int64(n)-connected), nil
}

// dialPlan says how dialAll opens client i.
type dialPlan struct {
	name      string // client i's id is the run id, "-", name and i
	keepalive uint16
	// setup, when set, runs on each connected client; an error closes it.
	setup func(i int, c *client) error
}

// dialAll fills clients with connected clients using a bounded number of
// concurrent dials; it stops starting new dials at the deadline.
func dialAll(cfg config, clients []*client, spread bool, deadline time.Time, plan dialPlan) (int64, error) {
	id := runID()
	jobs := make(chan int)
	var connected atomic.Int64
	var errOnce sync.Once
	var firstErr error
	var wg sync.WaitGroup
	for range orDefault(cfg.concurrency, 64) {
		wg.Go(func() {
			for i := range jobs {
				o := dialOptions{addr: cfg.addr, transport: cfg.transport, clientID: fmt.Sprintf("%s-%s%d", id, plan.name, i),
					keepalive: plan.keepalive, bufSize: 64, deadline: deadline}
				if spread {
					o.local = net.IPv4(127, 0, 0, byte(1+i%sourceAddrs))
				}
				c, err := dial(o)
				if err == nil && plan.setup != nil {
					if err = plan.setup(i, c); err != nil {
						c.conn.Close()
					}
				}
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					continue
				}
				clients[i] = c
				connected.Add(1)
			}
		})
	}
	for i := range clients {
		if time.Now().After(deadline) {
			break
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if firstErr == nil && int(connected.Load()) < len(clients) {
		firstErr = errors.New("deadline reached before every client was dialled")
	}
	return connected.Load(), firstErr
}

// loopbackTarget reports whether addr is an IPv4 loopback address, the only
// case where spreading over 127.0.0.x source addresses works.
func loopbackTarget(addr string) (bool, error) {
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return false, err
	}
	return ta.IP.To4() != nil && ta.IP.IsLoopback(), nil
}

// settledRSS polls the process's resident set every 100 ms until five
// readings in a row agree within 1% (the broker's allocator or GC has
// settled) or settle has passed, and returns the last reading in bytes.
func settledRSS(pid int, settle time.Duration, deadline time.Time) (int64, error) {
	const stableReadings = 5
	until := time.Now().Add(settle)
	if deadline.Before(until) {
		until = deadline
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var window []int64
	for {
		rss, err := readRSS(pid)
		if err != nil {
			return 0, err
		}
		window = append(window, rss)
		if len(window) > stableReadings {
			window = window[1:]
		}
		if len(window) == stableReadings && spreadWithin(window, 0.01) || time.Now().After(until) {
			return rss, nil
		}
		<-tick.C
	}
}

func spreadWithin(vs []int64, frac float64) bool {
	lo, hi := vs[0], vs[0]
	for _, v := range vs {
		lo, hi = min(lo, v), max(hi, v)
	}
	return float64(hi-lo) <= frac*float64(hi)
}

// readRSS returns VmRSS from /proc/PID/status in bytes.
func readRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("VmRSS:"))
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(string(bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(rest), []byte("kB")))), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("pid %d VmRSS: %w", pid, err)
		}
		return kb << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("pid %d: no VmRSS in /proc status", pid)
}

// processCPU returns the CPU time a process has used: the sum of its
// threads' run times in nanoseconds (/proc/PID/task/*/schedstat), or
// where the kernel keeps none, user plus system time in clock ticks of
// 10 ms (/proc/PID/stat). A throughput run lasts a fraction of a second:
// ticks would count it to a few percent at best. Threads that exited
// between two readings drop out of the sum; the brokers measured keep
// theirs.
func processCPU(pid int) (time.Duration, error) {
	if d, err := threadsCPU(pid); err == nil {
		return d, nil
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; count fields after it.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("pid %d: unreadable /proc stat", pid)
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("pid %d: short /proc stat", pid)
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("pid %d stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// threadsCPU sums the first field of each thread's schedstat: the time
// it ran, in nanoseconds.
func threadsCPU(pid int) (time.Duration, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	var sum int64
	counted := 0
	for _, t := range tasks {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // the thread exited since the listing
			}
			return 0, err
		}
		f := strings.Fields(string(data))
		if len(f) < 1 {
			return 0, fmt.Errorf("pid %d task %s: empty schedstat", pid, t.Name())
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("pid %d task %s schedstat: %w", pid, t.Name(), err)
		}
		sum += ns
		counted++
	}
	if counted == 0 {
		return 0, fmt.Errorf("pid %d: no thread's schedstat", pid)
	}
	return time.Duration(sum), nil
}
