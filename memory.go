package mqttd

import (
	"runtime/metrics"
	"sync/atomic"
	"time"

	"mqttd/internal/sysmem"
)

// The memory budget: the operator gives the broker limits.max_memory, the
// byte limits default to shares of it, and a watcher compares the live
// heap with it to tell when the broker must stop taking on new work.

const (
	minDefaultMemory = 64 << 20
	// maxDefaultMemory caps the default: the budget bounds what clients
	// can make the broker hold, not what it needs to run, and at its
	// shares 512 MiB lets 256 MiB of messages queue for offline clients.
	// An operator with more to give says so.
	maxDefaultMemory = 512 << 20
)

// DefaultMaxMemory is the default of limits.max_memory: a quarter of the
// memory this process may use (the machine's, or its cgroup's limit when
// lower), at least 64 MiB and at most 512 MiB. Where the memory cannot be
// read it is 512 MiB.
func DefaultMaxMemory() int64 {
	mem := sysmem.Available()
	if mem <= 0 {
		return maxDefaultMemory
	}
	return min(max(mem/4, minDefaultMemory), maxDefaultMemory)
}

// retainedShare is the share of the memory budget the retained store
// takes by default, 1/64. While retained messages arrive through the
// store, a retained byte costs about three of RSS (the reader's garbage,
// the collector's headroom, the pages bbolt rewrites): 200 retained
// messages of 1 MiB grew the mqttd command by 69-87 MB on a 512 MiB budget
// at 1/16, by 47-65 MB at 1/32 and by 28-37 MB at 1/64
// (TestBinaryRetainedRSS).
const retainedShare = 64

// DeriveFromMemory returns the limits whose defaults are shares of a
// memory budget of m bytes: an eighth for messages queued for sessions,
// a sixty-fourth for the retained store, a sixteenth each for bytes
// waiting to be written to connections, for packets arriving and for
// subscriptions, and connections and sessions at about 8 KiB and 4 KiB
// each (at most 50,000 and 100,000). At the 512 MiB default each share
// holds at most 64 MB of heap filled, which the attack tests check: the
// queues had half, 256 MiB, before each entry's cost was counted.
func DeriveFromMemory(m int64) Limits {
	return Limits{
		MaxMemory:                 m,
		MaxQueuedBytesTotal:       m / 8,
		MaxRetainedBytes:          m / retainedShare,
		MaxOutboxBytesTotal:       m / 16,
		MaxIncomingBytesTotal:     m / 16,
		MaxSubscriptionBytesTotal: m / 16,
		MaxConnections:            int(min(max(m>>13, 16), DefaultMaxConnections)),
		MaxSessions:               int(min(max(m>>12, 16), DefaultMaxSessions)),
	}
}

// memoryWatchInterval is how often the live heap is compared with the
// budget: the heap is measured at every collection, which under load
// runs far more often.
const memoryWatchInterval = time.Second

// liveHeapMetric is the heap that survived the last collection; until
// the first collection it reads 0, and heapObjectsMetric, every object
// allocated and not yet freed, stands in for it.
const (
	liveHeapMetric    = "/gc/heap/live:bytes"
	heapObjectsMetric = "/memory/classes/heap/objects:bytes"
)

// memoryWatch sets the server's pressure flag from the live heap: on past
// 7/8 of limits.max_memory, off again below 3/4, so that the broker does
// not flap at the line.
type memoryWatch struct {
	// rates are the message counters at its last few looks (Overview).
	rates   rateSamples
	sample  [2]metrics.Sample
	started atomic.Bool
	stop    chan struct{}
	done    chan struct{}
}

func newMemoryWatch() *memoryWatch {
	w := &memoryWatch{stop: make(chan struct{}), done: make(chan struct{})}
	w.sample[0].Name, w.sample[1].Name = liveHeapMetric, heapObjectsMetric
	return w
}

// start runs the watch until close. Serve calls it once, under the
// registry lock, and only before Shutdown.
func (w *memoryWatch) start(s *Server) {
	w.started.Store(true)
	go func() {
		defer close(w.done)
		t := time.NewTicker(memoryWatchInterval)
		defer t.Stop()
		for {
			w.check(s)
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
		}
	}()
}

// check reads the live heap and updates the pressure flag, saying so in
// the log when it changes.
func (w *memoryWatch) check(s *Server) {
	w.rates.sample(&s.stats)
	metrics.Read(w.sample[:])
	var v [2]uint64
	for i, s := range w.sample {
		if s.Value.Kind() == metrics.KindUint64 {
			v[i] = s.Value.Uint64()
		}
	}
	live := liveHeap(v[0], v[1])
	if live == 0 {
		return
	}
	st := &s.stats
	st.heapLive.Store(live)
	budget := s.opts.Limits.MaxMemory
	switch {
	case !st.memoryPressure.Load() && live > budget/8*7:
		st.memoryPressure.Store(true)
		st.memoryPressureEvents.Add(1)
		s.log.Warn().Int64("live_heap", live).Int64("max_memory", budget).
			Msg("memory pressure: refusing new connections and new retained messages, dropping QoS 0 for slow clients " +
				"until the live heap is below 3/4 of limits.max_memory (mqttd_memory_pressure)")
	case st.memoryPressure.Load() && live < budget/4*3:
		st.memoryPressure.Store(false)
		s.log.Info().Int64("live_heap", live).Int64("max_memory", budget).Msg("memory pressure over")
	}
}

// liveHeap is the live heap from liveHeapMetric's and heapObjectsMetric's
// values: the first, or, before the first collection has measured it, the
// heap's objects ($SYS and the metrics read 0 for the first seconds after
// a start otherwise). 0 when neither is known.
func liveHeap(live, objects uint64) int64 {
	if live > 0 {
		return int64(live)
	}
	return int64(objects)
}

// close stops the watch, if it was started, and waits for it.
func (w *memoryWatch) close() {
	close(w.stop)
	if w.started.Load() {
		<-w.done
	}
}
