package bolt

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"time"
)

// How the checkpoint shares the core with the broker while it applies the
// log (walapply.go): it yields between records, polling the broker's
// sockets first when the broker asked (SetYield).

// walYieldEvery is how long the checkpoint runs before it lets the other
// goroutines run, between two records. On one P a publisher's turn is
// several hand-offs (its commit's fdatasync returning, the PUBACKs
// written, its next PUBLISH read), each waiting for the checkpoint's next
// yield, and the checkpoint's writes make that fdatasync a few ms: with
// a yield every millisecond a turn took ~8 ms (docs/perf-log.md,
// "twenty-fifth session"). The yield lets only goroutines already
// runnable go first: with one P the scheduler takes the checkpoint back
// without polling the network, hence SetYield; and bbolt's commit of a
// chunk yields nowhere (walApplyChunk).
const walYieldEvery = 200 * time.Microsecond

// yielder is the checkpoint's clock for walYieldEvery, and what it calls
// before it yields (SetYield).
type yielder struct {
	on    bool
	since time.Time
	poll  atomic.Pointer[func()]
}

func (y *yielder) start(on bool) { y.on, y.since = on, time.Now() }

// callPoll calls poll, which runs inside a bbolt transaction: a panic
// there would be taken for the file's damage (updateTx's guard), and the
// store would refuse every write until restarted. It is the caller's
// bug, not the store's: the poll is dropped and the panic raised again
// outside the guard, with where it came from.
func (y *yielder) callPoll(poll func()) {
	defer func() {
		if r := recover(); r != nil {
			y.poll.Store(nil)
			msg := fmt.Sprintf("bolt: the checkpoint's poll panicked: %v\n%s", r, debug.Stack())
			go panic(msg)
		}
	}()
	poll()
}

// SetYield has the checkpoint call poll each time it lets the other
// goroutines run, or no longer when poll is nil. A program that polls its
// sockets itself sets it: with one P the runtime polls the network only
// when no goroutine is runnable, or every 10 ms (sysmon), and a
// checkpoint is runnable from its start to its end.
func (s *Store) SetYield(poll func()) {
	if poll == nil {
		s.yield.poll.Store(nil)
		return
	}
	s.yield.poll.Store(&poll)
}

// maybe yields when on and walYieldEvery has passed since the last time.
func (y *yielder) maybe() {
	if y.on && time.Since(y.since) >= walYieldEvery {
		if poll := y.poll.Load(); poll != nil {
			y.callPoll(*poll)
		}
		runtime.Gosched()
		y.since = time.Now()
	}
}
