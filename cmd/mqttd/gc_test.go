package main

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"testing"
	"time"
)

func TestGCPercent(t *testing.T) {
	cfg := gcConfig{}.withDefaults() // 25%, at least 1 MiB
	for _, tc := range []struct {
		name       string
		live, scan uint64
		want       int
	}{
		{"empty heap: Go's policy", 0, 0, 100},
		{"small heap: the floor is more than GOGC=100 gives", 512 << 10, 0, 100},
		{"the floor decides", 2 << 20, 0, 50},
		{"the floor, stacks and globals scanned too", 3 << 19, 1 << 19, 50},
		{"the share decides", 64 << 20, 0, 25},
		{"the share, rounded up", 100<<20 + 1, 0, 25},
		{"never 0, which collects without pause", 1 << 40, 1 << 50, 1},
	} {
		if got := cfg.gcPercent(tc.live, tc.scan); got != tc.want {
			t.Errorf("%s: gcPercent(%d, %d) = %d, want %d", tc.name, tc.live, tc.scan, got, tc.want)
		}
	}
	if got := (gcConfig{HeadroomPercent: 100, MinHeadroom: 1}).gcPercent(64<<20, 0); got != 100 {
		t.Errorf("headroom_percent 100: gcPercent = %d, want 100 (Go's own)", got)
	}
}

func TestGCConfigValidate(t *testing.T) {
	if err := (gcConfig{}).validate(); err != nil {
		t.Errorf("zero gc config: %v", err)
	}
	err := gcConfig{HeadroomPercent: 101, MinHeadroom: -1, BurstHeadroom: -1}.validate()
	for _, name := range []string{"gc.headroom_percent", "gc.min_headroom", "gc.burst_headroom"} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("bad gc config: error %v, want %s named", err, name)
		}
	}
}

// gogc reads the GOGC the runtime runs with.
func gogc() uint64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// liveHeap sets GOGC to 100 for the test, restoring it after, and returns
// 64 MiB for the test to keep live, collected once.
func liveHeap(t *testing.T) [][]byte {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })
	live := make([][]byte, 64)
	for i := range live {
		live[i] = make([]byte, 1<<20)
	}
	runtime.GC()
	return live
}

// TestGCTunerFollowsLiveHeap keeps a heap large enough for the share to
// decide and checks that GOGC comes down to it once the window has seen
// only that heap, and that stopping restores what was set before.
func TestGCTunerFollowsLiveHeap(t *testing.T) {
	live := liveHeap(t)
	stop, on := startGC(gcConfig{HeadroomPercent: 10, MinHeadroom: 1 << 20}, func(string) string { return "" })
	if !on {
		t.Fatal("startGC with no GOGC or GOMEMLIMIT in the environment did not start")
	}
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond) // the tuner's own ticks
	defer tick.Stop()
	for gogc() > 10 {
		select {
		case <-deadline:
			stop()
			t.Fatalf("GOGC = %d with 64 MiB live and headroom_percent 10, want at most 10", gogc())
		case <-tick.C:
		}
	}
	runtime.KeepAlive(live)
	stop()
	if got := gogc(); got != 100 {
		t.Errorf("GOGC after stop = %d, want 100 back", got)
	}
}

// TestGCTunerBudget: while the collector is busy GOGC is Go's own, so
// that the policy costs at most its budget of CPU; while it is not, the
// headroom follows the live heap.
func TestGCTunerBudget(t *testing.T) {
	live := liveHeap(t)
	for _, tc := range []struct {
		name        string
		busy        bool
		wantPercent func(int) bool
	}{
		{"busy: Go's headroom", true, func(p int) bool { return p == 100 }},
		{"idle: the policy's", false, func(p int) bool { return p <= 10 }},
	} {
		tu := &gcTuner{cfg: gcConfig{HeadroomPercent: 10, MinHeadroom: 1 << 20}, percent: 50}
		tu.initSamples()
		metrics.Read(tu.samples[:])
		tu.gcCPU, tu.at = tu.samples[3].Value.Float64(), time.Now().Add(-time.Second)
		tu.allocated, tu.live = tu.samples[4].Value.Uint64(), tu.samples[0].Value.Uint64()
		if tc.busy { // as if the collector took all the CPU of the last second
			tu.gcCPU -= float64(runtime.GOMAXPROCS(0))
		}
		tu.tuneLocked()
		if !tc.wantPercent(tu.percent) {
			t.Errorf("%s: GOGC %d with 64 MiB live", tc.name, tu.percent)
		}
	}
	runtime.KeepAlive(live)
}

func TestBurstPercent(t *testing.T) {
	cfg := gcConfig{}.withDefaults() // at least 1 MiB, at most 16 MiB of burst
	const mib = 1 << 20
	for _, tc := range []struct {
		name       string
		rate       float64
		live, scan uint64
		want       int
	}{
		{"no garbage", 0, 512 << 10, 0, 0},
		{"no more than the least headroom", 20 * mib, 512 << 10, 0, 0},
		{"little live: the bound in percent", 170 * mib, 512 << 10, 256 << 10, maxBurstPercent},
		{"the rate's headroom", 160 * mib, 32 * mib, 0, 25},
		{"at most burst_headroom", 1 << 40, 64 * mib, 0, 25},
	} {
		if got := cfg.burstPercent(tc.rate, tc.live, tc.scan); got != tc.want {
			t.Errorf("%s: burstPercent(%v, %d, %d) = %d, want %d", tc.name, tc.rate, tc.live, tc.scan, got, tc.want)
		}
	}
	off := gcConfig{MinHeadroom: 1 << 20, BurstHeadroom: 1 << 20}
	if got := off.burstPercent(1<<40, 512<<10, 0); got != 0 {
		t.Errorf("burst_headroom = min_headroom: burstPercent = %d, want 0 (off)", got)
	}
}

// TestGCTunerGarbageRate: what a second allocated and did not keep live
// raises the headroom past the policy's; what it kept live (connects)
// does not.
func TestGCTunerGarbageRate(t *testing.T) {
	live := liveHeap(t)
	const gib = 1 << 30
	for _, tc := range []struct {
		name    string
		kept    bool
		percent func(tu *gcTuner) int
	}{
		{"garbage: burst_headroom's", false, func(tu *gcTuner) int {
			return percentFor(defaultBurstHeadroom, tu.samples[0].Value.Uint64()+tu.samples[1].Value.Uint64()+tu.samples[2].Value.Uint64())
		}},
		{"kept live: the policy's", true, func(tu *gcTuner) int {
			return tu.cfg.gcPercent(tu.samples[0].Value.Uint64(), tu.samples[1].Value.Uint64()+tu.samples[2].Value.Uint64())
		}},
	} {
		// A small policy, which 64 MiB a second of garbage would pass.
		tu := &gcTuner{cfg: gcConfig{HeadroomPercent: 1, MinHeadroom: 64 << 10}.withDefaults(), percent: 50}
		tu.initSamples()
		metrics.Read(tu.samples[:])
		tu.gcCPU, tu.at = tu.samples[3].Value.Float64(), time.Now().Add(-time.Second)
		tu.allocated, tu.live = tu.samples[4].Value.Uint64()-gib, tu.samples[0].Value.Uint64()
		if tc.kept { // as if the whole live heap was allocated in the last second
			tu.allocated = tu.samples[4].Value.Uint64() - tu.live
			tu.live = 0
		}
		tu.tuneLocked()
		if want := tc.percent(tu); tu.percent != want {
			t.Errorf("%s: GOGC %d with 64 MiB live, want %d (garbage rate %.0f B/s)", tc.name, tu.percent, want, tu.rate)
		}
	}
	runtime.KeepAlive(live)
}

func TestGCTunerRespectsEnvironment(t *testing.T) {
	for _, env := range []string{"GOGC", "GOMEMLIMIT"} {
		stop, on := startGC(gcConfig{}, func(k string) string {
			if k == env {
				return "200"
			}
			return ""
		})
		stop()
		if on {
			t.Errorf("%s set in the environment: the policy was applied", env)
		}
	}
	stop, on := startGC(gcConfig{HeadroomPercent: 100}, func(string) string { return "" })
	stop()
	if on {
		t.Error("headroom_percent 100 (Go's own policy): the policy was applied")
	}
}

// garbage, kept and more are where TestGCTunerReleasesIdleHeap's
// allocations escape to: those dropped at once, and those it keeps live.
var garbage, kept, more []byte

// TestGCTunerReleasesIdleHeap: memory the heap holds beyond what is live
// goes back to the system once the allocations have stopped: after
// releaseAfterFlow ticks when the live heap did not grow (a flow of
// messages, which would fault its pages in again at its next burst) and
// the spare is at most a quarter more than gc.burst_headroom, after
// releaseAfter otherwise (connections came, or a larger spare); not while
// they go on, and not again before a collection has run since.
func TestGCTunerReleasesIdleHeap(t *testing.T) {
	// No collection while garbage is made: what it leaves is what the
	// release must find, not what the scavenger returned meanwhile.
	before := debug.SetGCPercent(-1)
	t.Cleanup(func() { debug.SetGCPercent(before); kept, more = nil, nil })
	makeGarbage := func(mib int) {
		for range mib * 16 {
			garbage = make([]byte, 64<<10)
		}
		garbage = nil
	}
	free := func() uint64 {
		s := []metrics.Sample{{Name: "/memory/classes/heap/free:bytes"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	// quietTicks runs n-1 ticks of an idle heap, up to the one that may
	// release after n, and reports whether any of them did.
	quietTicks := func(tu *gcTuner, n int) bool {
		for range n - 1 {
			if tu.releaseIdle() {
				return true
			}
		}
		return false
	}
	// releasedAfter has the tuner see the allocations just made, which
	// must not be released while they go on, then checks that the heap
	// is released at the nth idle tick, not before.
	releasedAfter := func(tu *gcTuner, n int, what string) {
		t.Helper()
		if tu.releaseIdle() {
			t.Fatalf("%s: released in the interval it was allocated in", what)
		}
		if quietTicks(tu, n) {
			t.Fatalf("%s: released before %d idle ticks in a row", what, n)
		}
		if !tu.releaseIdle() {
			t.Fatalf("%s: not released after %d idle ticks", what, n)
		}
	}

	// What is live from the start is no growth. Free pages earlier tests
	// left go back first, and a collection is the one every heap that
	// has grown has had.
	kept = make([]byte, 16<<20)
	debug.FreeOSMemory()
	tu := &gcTuner{cfg: gcConfig{}.withDefaults()}
	tu.initIdle()
	if tu.releaseIdle() {
		t.Fatal("the first reading released: it has no allocations to compare with")
	}
	makeGarbage(8)
	releasedAfter(tu, releaseAfterFlow, "a flow's 8 MiB of garbage")
	// A collection alone frees the garbage but keeps its pages.
	if got := free(); got > 4<<20 {
		t.Errorf("%d bytes of free pages kept after the release of 8 MiB of garbage, want them given back", got)
	}

	makeGarbage(8)
	tu.releaseIdle()
	if quietTicks(tu, releaseAfterFlow) || tu.releaseIdle() {
		t.Error("released again with no collection since the last release")
	}

	makeGarbage(32)
	runtime.GC() // as a heap busy again collects
	releasedAfter(tu, releaseAfter, "32 MiB spare, more than burst_headroom allows for")

	// Connections: the live heap grows by 16 MiB, with 8 MiB of garbage.
	more = make([]byte, 16<<20)
	makeGarbage(8)
	runtime.GC()
	releasedAfter(tu, releaseAfter, "the live heap grown by 16 MiB")

	// They leave, and as many come: growth from the lower live heap.
	more = nil
	runtime.GC()
	tu.releaseIdle()
	more = make([]byte, 16<<20)
	makeGarbage(8)
	runtime.GC()
	releasedAfter(tu, releaseAfter, "the live heap shrunk by 16 MiB, then grown again")

	// A flow again, the connections' heap still live: its growth was
	// counted at the release.
	makeGarbage(8)
	runtime.GC()
	releasedAfter(tu, releaseAfterFlow, "a flow after connections")
}
