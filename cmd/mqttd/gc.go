package main

import (
	"errors"
	"fmt"
	"runtime/debug"
	"runtime/metrics"
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
// heap with more frequent collections, each marking the live heap. It is
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
}

const (
	defaultHeadroomPercent = 25
	defaultMinHeadroom     = 4 << 20
)

func (g gcConfig) withDefaults() gcConfig {
	if g.HeadroomPercent == 0 {
		g.HeadroomPercent = defaultHeadroomPercent
	}
	if g.MinHeadroom == 0 {
		g.MinHeadroom = defaultMinHeadroom
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
	// Rounded up, and at least 1: GOGC=0 collects continuously.
	return max(int((headroom*100+base-1)/base), 1)
}

// gcTuner sets GOGC once a second from the least live heap of the last
// gcWindow seconds: a heap that stays large (connections, sessions,
// queues) gets the policy's headroom within that time, while a burst of
// buffers (an outbox filling under a fan-in) leaves GOGC as it was, so
// that it never holds a small headroom over a heap that has shrunk
// meanwhile. Set after every collection instead (a cleanup re-armed at
// each cycle), GOGC lagged behind a fan-in whose live heap swung between
// 2 and 8 MB every few milliseconds and collections tripled.
type gcTuner struct {
	cfg     gcConfig
	samples [3]metrics.Sample
	live    [gcWindow]uint64 // a ring of the last live heaps
	n       int              // samples taken
	percent int              // the GOGC last set
	before  int              // the GOGC to restore
	stop    chan struct{}
	done    chan struct{}
}

// gcWindow is how many seconds the live heap must stay large before the
// headroom follows it down.
const gcWindow = 5

// startGC applies the policy unless the environment sets GOGC or
// GOMEMLIMIT, the operator's word on the collector, or the policy is Go's
// own; it returns what stops it and restores the GOGC there was.
func startGC(cfg gcConfig, getenv func(string) string) (stop func(), on bool) {
	cfg = cfg.withDefaults()
	if getenv("GOGC") != "" || getenv("GOMEMLIMIT") != "" || cfg.HeadroomPercent == 100 {
		return func() {}, false
	}
	t := &gcTuner{cfg: cfg, percent: 100, stop: make(chan struct{}), done: make(chan struct{})}
	t.samples[0].Name = "/gc/heap/live:bytes"
	t.samples[1].Name = "/gc/scan/stack:bytes"
	t.samples[2].Name = "/gc/scan/globals:bytes"
	t.before = debug.SetGCPercent(100)
	go t.run()
	return func() {
		close(t.stop)
		<-t.done
		debug.SetGCPercent(t.before)
	}, true
}

func (t *gcTuner) run() {
	defer close(t.done)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		t.tune()
		select {
		case <-t.stop:
			return
		case <-tick.C:
		}
	}
}

// tune takes a sample and sets GOGC for the least live heap of the
// window, with the stacks and globals scanned now.
func (t *gcTuner) tune() {
	metrics.Read(t.samples[:])
	var v [3]uint64
	for i, s := range t.samples {
		if s.Value.Kind() != metrics.KindUint64 {
			return
		}
		v[i] = s.Value.Uint64()
	}
	t.live[t.n%gcWindow] = v[0]
	t.n++
	least := v[0]
	for _, l := range t.live[:min(t.n, gcWindow)] {
		least = min(least, l)
	}
	if p := t.cfg.gcPercent(least, v[1]+v[2]); p != t.percent {
		debug.SetGCPercent(p)
		t.percent = p
	}
}
