package main

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// The garbage collector's policy. Go's default (GOGC=100) lets the heap
// grow by as much as is live before it collects, so a broker holding
// 10,000 idle connections in 11 MB of live heap runs with up to 22 MB, a
// kilobyte of RSS per connection that holds nothing. mqttd bounds the
// growth instead to a share of the live heap, with a floor in bytes below
// which Go's own policy applies: small heaps (a broker with few clients,
// or one moving messages through outboxes that are emptied at once) keep
// collecting as rarely as with GOGC=100, and large ones pay for a smaller
// heap with more frequent collections, each marking the live heap, as
// long as the collector takes at most gcBudget of the CPU. It is
// process-wide, so it is the command's and not the embeddable package's:
// a program embedding the broker keeps its own settings.

// gcConfig is the gc block of the YAML file.
type gcConfig struct {
	// HeadroomPercent is how much the heap may grow over the live heap
	// between collections, in percent of the live heap (GOGC's unit).
	// 0 means defaultHeadroomPercent; 100 is Go's own policy.
	HeadroomPercent int `yaml:"headroom_percent"`
	// MinHeadroom is the least growth allowed, in bytes, whatever the
	// live heap; it is never more than the live heap itself (GOGC=100).
	// 0 means defaultMinHeadroom.
	MinHeadroom int64 `yaml:"min_headroom"`
	// BurstHeadroom is the most growth the rate of garbage may ask for
	// (burstPercent). 0 means defaultBurstHeadroom; at or below
	// MinHeadroom it never applies.
	BurstHeadroom int64 `yaml:"burst_headroom"`
}

const (
	defaultHeadroomPercent = 25
	defaultMinHeadroom     = 1 << 20
	defaultBurstHeadroom   = 16 << 20
)

func (g gcConfig) withDefaults() gcConfig {
	if g.HeadroomPercent == 0 {
		g.HeadroomPercent = defaultHeadroomPercent
	}
	if g.MinHeadroom == 0 {
		g.MinHeadroom = defaultMinHeadroom
	}
	if g.BurstHeadroom == 0 {
		g.BurstHeadroom = defaultBurstHeadroom
	}
	return g
}

func (g gcConfig) validate() error {
	var errs []error
	if g.HeadroomPercent < 0 || g.HeadroomPercent > 100 {
		errs = append(errs, fmt.Errorf("gc.headroom_percent: %d: want 1 to 100 (0: %d)", g.HeadroomPercent, defaultHeadroomPercent))
	}
	if g.MinHeadroom < 0 {
		errs = append(errs, fmt.Errorf("gc.min_headroom: %d: want a number of bytes (0: %d)", g.MinHeadroom, defaultMinHeadroom))
	}
	if g.BurstHeadroom < 0 {
		errs = append(errs, fmt.Errorf("gc.burst_headroom: %d: want a number of bytes (0: %d)", g.BurstHeadroom, defaultBurstHeadroom))
	}
	return errors.Join(errs...)
}

// gcPercent is the GOGC that gives a heap of live bytes, whose
// collection also scans scan bytes of stacks and globals, the headroom
// g allows. Go's heap goal is live + (live+scan)*GOGC/100.
func (g gcConfig) gcPercent(live, scan uint64) int {
	headroom := max(uint64(g.MinHeadroom), live*uint64(g.HeadroomPercent)/100)
	base := live + scan
	if base == 0 || headroom >= base {
		return 100
	}
	return percentFor(headroom, base)
}

// percentFor is the GOGC that lets a heap whose collection scans base
// bytes grow by headroom: rounded up, and at least 1 (GOGC=0 collects
// continuously).
func percentFor(headroom, base uint64) int {
	return max(int((headroom*100+base-1)/base), 1)
}

// burstPercent is the GOGC a busy heap gets, whatever the policy's: one
// that lets it grow by the garbage made in rateWindow at rate bytes a
// second, up to BurstHeadroom, and by at most maxBurstPercent of what
// its collection scans; 0 when that is no more than MinHeadroom, which
// the policy gives anyway.
//
// A broker moving messages keeps little live (qos1: under 1 MiB) and
// makes garbage fast (170 MB/s at 900,000 messages a second), so that
// with 1 MiB of headroom it collected every few milliseconds, and the
// spans each collection freed went back to the system (the background
// scavenger) and were faulted in again: GOGC=400, whose smallest heap
// goal is 16 MiB, took qos1 from 0.99 to 0.91 us/msg. The bound in
// percent keeps a heap whose live part grows before the next setting
// from growing by the same factor: a GOGC worked out for 100 KiB live
// lets a heap with 10 MiB live grow by 100 times 10 MiB.
func (g gcConfig) burstPercent(rate float64, live, scan uint64) int {
	headroom := min(uint64(rate*rateWindow.Seconds()), uint64(g.BurstHeadroom))
	if headroom <= uint64(g.MinHeadroom) || live+scan == 0 {
		return 0
	}
	return min(percentFor(headroom, live+scan), maxBurstPercent)
}

// gcTuner sets GOGC after every collection, from the live heap it left,
// while the collector takes little CPU: at most gcBudget of what Go may
// use, averaged over about gcSpan (a burst of connections, which keeps
// the CPU and the collector busy for a moment, is what the policy is for:
// judged interval by interval, the burst passed the budget and kept
// GOGC=100). Past that it sets Go's own GOGC=100, so that the policy
// trades CPU for memory only up to the budget: a fan-in, which collects every few milliseconds at GOGC=100
// already and whose live heap swings between 1 and 9 MB,
// keeps Go's headroom, where following each cycle's live heap left a small
// headroom over a heap that had shrunk meanwhile and doubled the
// collector's CPU. A flow that would pass the budget only with the
// policy's headroom alternates between the two. The settings are made on
// the cleanup of an object dropped at once, which the next cycle finds
// unreachable; a ticker makes them too, in case a cleanup runs late.
type gcTuner struct {
	cfg gcConfig

	mu      sync.Mutex // the cleanup's goroutine and the ticker's
	samples [5]metrics.Sample
	gcCPU   float64   // the collector's CPU time at the last setting
	at      time.Time // when it was read
	share   float64   // the collector's share of the CPU, averaged
	// allocated and live are the bytes allocated and live at the last
	// setting, and rate the rate of garbage in bytes a second: what was
	// allocated and did not stay live (a burst of connects, whose
	// allocations the heap keeps, is not a busy heap), averaged over
	// about gcSpan as it rises and rateSpan as it falls.
	allocated, live uint64
	rate            float64
	percent         int // the GOGC last set
	stopped         bool
	before          int // the GOGC to restore

	// The idle release's state (releaseIdle), the ticker's alone.
	allocs uint64 // bytes allocated by the last tick
	cycles uint64 // collections completed by the last release
	base   uint64 // the live heap at the last release, or since lower
	quiet  int    // ticks in a row the heap has been idle
	idle   [5]metrics.Sample

	stop chan struct{}
	done chan struct{}
}

const (
	// gcBudget is the collector's share of the CPU up to which the
	// policy holds the heap near the live heap.
	gcBudget = 0.05
	// gcSpan is the time constant of the share's moving average.
	gcSpan = time.Second
	// rateWindow is how many seconds of its garbage a busy heap may hold
	// (burstPercent): it then collects about twenty times a second.
	rateWindow = 50 * time.Millisecond
	// rateSpan is the time constant of the garbage rate's fall: as long
	// as the quiet the idle release waits for after a flow, so that the
	// heap goal, and with it the pages the runtime's scavenger leaves,
	// hold through the pauses of a bursty flow.
	rateSpan = releaseAfterFlow * time.Second
	// maxBurstPercent bounds burstPercent: Go's smallest heap goal is 4
	// MiB times GOGC/100, so it allows the 16 MiB of BurstHeadroom to a
	// heap with almost nothing live.
	maxBurstPercent = 400
	// releaseMin is the least memory an idle release gives back;
	// releaseQuiet how long, in seconds, what is spare must last at the
	// rate of the last second's allocations for the heap to count as
	// idle; releaseAfter how many ticks in a row it must be idle when
	// the live heap grew since the last release (connections came), and
	// releaseAfterFlow when it did not (messages moved).
	releaseMin       = 512 << 10
	releaseQuiet     = 30
	releaseAfter     = 10
	releaseAfterFlow = 120
)

// gcCycle is the object whose collection marks a cycle. It holds a
// pointer so that it is not put in a tiny block, where its cleanup would
// wait for its neighbours.
type gcCycle struct{ _ *gcCycle }

// startGC applies the policy unless the environment sets GOGC or
// GOMEMLIMIT, the operator's word on the collector, or the policy is Go's
// own; it returns what stops it and restores the GOGC there was.
func startGC(cfg gcConfig, getenv func(string) string) (stop func(), on bool) {
	cfg = cfg.withDefaults()
	if getenv("GOGC") != "" || getenv("GOMEMLIMIT") != "" || cfg.HeadroomPercent == 100 {
		return func() {}, false
	}
	t := &gcTuner{cfg: cfg, percent: 100, stop: make(chan struct{}), done: make(chan struct{})}
	t.initSamples()
	t.initIdle()
	t.before = debug.SetGCPercent(100)
	t.arm()
	go t.run()
	return func() {
		close(t.stop)
		<-t.done
		t.mu.Lock()
		t.stopped = true
		debug.SetGCPercent(t.before)
		t.mu.Unlock()
	}, true
}

func (t *gcTuner) initSamples() {
	for i, name := range []string{"/gc/heap/live:bytes", "/gc/scan/stack:bytes", "/gc/scan/globals:bytes",
		"/cpu/classes/gc/total:cpu-seconds", "/gc/heap/allocs:bytes"} {
		t.samples[i].Name = name
	}
}

func (t *gcTuner) arm() { runtime.AddCleanup(&gcCycle{}, (*gcTuner).cycle, t) }

// cycle runs after each collection, when its object is found unreachable.
func (t *gcTuner) cycle() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	t.tuneLocked()
	t.arm()
}

func (t *gcTuner) run() {
	defer close(t.done)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		t.mu.Lock()
		t.tuneLocked()
		t.mu.Unlock()
		t.releaseIdle()
		select {
		case <-t.stop:
			return
		case <-tick.C:
		}
	}
}

// tuneLocked sets GOGC from the live heap, or to 100 while the collector
// is over its budget; either way to at least what the rate of garbage
// asks for (burstPercent).
func (t *gcTuner) tuneLocked() {
	metrics.Read(t.samples[:])
	var v [3]uint64
	for i, s := range t.samples[:3] {
		if s.Value.Kind() != metrics.KindUint64 {
			return
		}
		v[i] = s.Value.Uint64()
	}
	// The runtime adds a cycle's CPU time when the cycle ends, so an
	// interval without one counts as none; the CPU Go could use is
	// GOMAXPROCS over the interval (the runtime's own count of it also
	// moves only at collections).
	if t.samples[3].Value.Kind() != metrics.KindFloat64 || t.samples[4].Value.Kind() != metrics.KindUint64 {
		return
	}
	gcCPU, allocated, now := t.samples[3].Value.Float64(), t.samples[4].Value.Uint64(), time.Now()
	if dt := now.Sub(t.at); dt > 0 && !t.at.IsZero() {
		// Each interval weighs by its length: an average over time.
		w := 1 - math.Exp(-float64(dt)/float64(gcSpan))
		t.share += w * ((gcCPU-t.gcCPU)/(dt.Seconds()*float64(runtime.GOMAXPROCS(0))) - t.share)
		garbage := allocated - t.allocated
		if v[0] > t.live {
			garbage -= min(garbage, v[0]-t.live)
		}
		// Up as slowly as the share, so that a short interval (a tick
		// right after a collection) cannot raise it alone; down slower
		// still.
		rate, span := float64(garbage)/dt.Seconds(), rateSpan
		if rate > t.rate {
			span = gcSpan
		}
		t.rate += (1 - math.Exp(-float64(dt)/float64(span))) * (rate - t.rate)
	}
	t.gcCPU, t.at, t.allocated, t.live = gcCPU, now, allocated, v[0]
	p := 100
	if t.share <= gcBudget {
		p = t.cfg.gcPercent(v[0], v[1]+v[2])
	}
	p = max(p, t.cfg.burstPercent(t.rate, v[0], v[1]+v[2]))
	if p != t.percent {
		debug.SetGCPercent(p)
		t.percent = p
	}
}

func (t *gcTuner) initIdle() {
	for i, name := range []string{"/gc/heap/allocs:bytes", "/gc/heap/live:bytes",
		"/memory/classes/heap/objects:bytes", "/memory/classes/heap/free:bytes", "/gc/cycles/total:gc-cycles"} {
		t.idle[i].Name = name
	}
}

// releaseIdle gives the heap's spare memory back to the system once the
// heap is idle, and reports whether it did. Between collections the heap
// holds, besides what is live, the garbage of its last busy moment (up to
// the headroom) and the free pages the runtime keeps for reuse; on a
// broker that then goes quiet, holding its connections, nothing collects
// them (Go's periodic collection, every two minutes, frees the garbage
// but keeps the pages), and after a burst of 10,000 connects that was
// 230 bytes of RSS per connection. A full collection returns them, once
// each second's allocations would have taken releaseQuiet seconds to use
// up what is spare, releaseAfter ticks in a row, and only if a collection
// has run since the last release: a release costs at most as much as the
// collections of the busy moment before it. A heap that is busy again
// gets its pages back from the system, a fault per page, and regrows from
// a small goal: released after one idle second, flows a few seconds apart
// lost a sixth of their rate, and after ten, qos1 runs 15 s apart still
// lost some (a page fault costs 12 us on the test machine; the figures are
// in docs/perf-log.md). So the spare of a
// flow, which did not grow the live heap, waits releaseAfterFlow ticks:
// what the next burst would fault in again, held meanwhile by the heap
// goal its garbage rate holds up, if it is at most a quarter more than
// gc.burst_headroom. What a burst of connects leaves, whose connections
// stay live, or a larger spare, goes after releaseAfter.
func (t *gcTuner) releaseIdle() bool {
	metrics.Read(t.idle[:])
	for _, s := range t.idle {
		if s.Value.Kind() != metrics.KindUint64 {
			return false
		}
	}
	allocs := t.idle[0].Value.Uint64()
	live, objects, free := t.idle[1].Value.Uint64(), t.idle[2].Value.Uint64(), t.idle[3].Value.Uint64()
	cycles := t.idle[4].Value.Uint64()
	recent := allocs - t.allocs
	first := t.allocs == 0
	t.allocs = allocs
	spare := free
	if objects > live {
		spare += objects - live
	}
	if first || live < t.base {
		t.base = live
	}
	if first || spare < releaseMin || recent*releaseQuiet > spare {
		t.quiet = 0
		return false
	}
	after := releaseAfterFlow
	if live-t.base > spare/4 || spare > uint64(t.cfg.BurstHeadroom)/4*5 {
		after = releaseAfter
	}
	if t.quiet++; t.quiet < after || cycles == t.cycles {
		return false
	}
	debug.FreeOSMemory()
	metrics.Read(t.idle[:])
	t.allocs, t.cycles, t.quiet = t.idle[0].Value.Uint64(), t.idle[4].Value.Uint64(), 0
	t.base = t.idle[1].Value.Uint64()
	return true
}
