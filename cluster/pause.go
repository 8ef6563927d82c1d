package cluster

import (
	"mqttd/internal/broadcast"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// Flow control between nodes. Core NATS has none: a node whose delivery
// falls behind would drop what passes InQueueBytes of batches (or
// InQueueMessages of the share groups'). So a receiving node whose queue
// passes a high mark (marks) publishes a pause, carrying its name, on
// the cluster's flow subject, renewed every pauseRenew until the queue
// is below the low marks, and a resume then; every
// other node's sending goroutine holds its messages while any node's
// pause is in force (global: a node cannot know which nodes NATS takes a
// subject to), so its bounded outgoing queue fills and its publishers
// wait (PublishWaiting). A pause not renewed ends by itself after
// PauseExpiry, so a receiver that dies holds nobody for longer.
//
// What was already on its way when the pause went out (in nats.go's and
// the servers' buffers) still arrives: the marks leave room for it, but
// a sender faster than a pause's round trip by more than that room still
// loses messages, counted in Stats.DroppedIn. Between nodes delivery
// stays at most once: a node that dies loses what it had queued.
const (
	// PauseHigh is the queue of the share groups' messages (of
	// InQueueMessages) past which a node asks the others to pause: the
	// rest is room for what is already on its way.
	PauseHigh = InQueueMessages / 16
	// PauseLow is the queue below which it lets them resume.
	PauseLow = PauseHigh / 4
	// BatchPauseHigh and BatchPauseBytes are the marks of the queue of
	// batches from other nodes, in messages and in bytes, past either of
	// which a node pauses the others; it lets them resume below a quarter
	// of both. A batch brings hundreds of messages at once: the low marks
	// keep the delivery goroutine busy for a resume's round trip.
	BatchPauseHigh  = 4 * PauseHigh
	BatchPauseBytes = InQueueBytes / 4
	// PauseExpiry is how long a pause holds a sender without renewal.
	PauseExpiry = 500 * time.Millisecond
	// pauseRenew is how often a node still above PauseLow renews its
	// pause.
	pauseRenew = 50 * time.Millisecond
	// watchTick is how often a node with messages to deliver looks at its
	// queue: the room past PauseHigh is for what arrives in a tick and a
	// pause's round trip.
	watchTick = 2 * time.Millisecond
	// maxPausers bounds the pauses a node keeps track of: a node name
	// each, from the cluster's NATS.
	maxPausers = 1024
)

// Flow messages: a kind byte and the node's name.
const (
	flowPause  = 'p'
	flowResume = 'r'
)

// flowSubject is the subject of cluster's pauses and resumes.
func flowSubject(cluster string) string { return "mqttd." + cluster + ".flow" }

// flow is a node's flow control, both as a receiver and as a sender.
type flow struct {
	// The receiving side: the watcher goroutine (watch) runs while
	// messages wait or deliver runs (delivering), and sleeps otherwise
	// (watching false) until deliverLoop wakes it.
	wake       chan struct{}
	watching   atomic.Bool
	delivering atomic.Bool
	done       chan struct{}
	// behind is the broker's word on its own backlog (SetBehind).
	behind atomic.Pointer[func() bool]

	// The sending side: pauses in force, by node (mu), and until when
	// the latest holds (Unix nanoseconds, 0: none), read by the sending
	// goroutine for each message; resumed is closed when a resume comes.
	mu      sync.Mutex
	pausers map[string]int64
	until   atomic.Int64
	resumed chan struct{}

	// room wakes publishers waiting for the outgoing queue's bytes: the
	// sending goroutine signals it after each message it takes out.
	room broadcast.Next

	// holding is when the current hold began (Unix nanoseconds, 0:
	// none), heldNanos the time of those ended.
	holding atomic.Int64
	// warn throttles the log line of a hold.
	warn throttle

	pausesSent, resumesSent, pausesIn, malformed atomic.Uint64
	heldNanos, waits, waitNanos                  atomic.Uint64
}

// startFlow subscribes to the other nodes' pauses and starts the
// watcher of the node's own queue.
func (n *Node) startFlow() error {
	n.flow.wake = make(chan struct{}, 1)
	n.flow.done = make(chan struct{})
	n.flow.resumed = make(chan struct{})
	n.flow.pausers = map[string]int64{}
	if _, err := n.nc.Subscribe(flowSubject(n.cluster), n.onFlow); err != nil {
		return err
	}
	go n.watch()
	return nil
}

// taking is deliverLoop's note that it is about to deliver: it wakes the
// watcher when asleep. delivering is stored before watching is read, and
// the watcher stores watching before it reads delivering, so one of the
// two sees the other.
func (n *Node) taking() {
	n.flow.delivering.Store(true)
	if !n.flow.watching.Load() {
		select {
		case n.flow.wake <- struct{}{}:
		default:
		}
	}
}

// SetBehind gives the node a function it calls, on its own goroutine and
// with no lock held, each time it looks at its queue while messages come:
// true pauses the other nodes as a queue past PauseHigh does, so that the
// broker's own backlog (its clients' queues) holds them too. nil: none.
func (n *Node) SetBehind(f func() bool) {
	if f == nil {
		n.flow.behind.Store(nil)
		return
	}
	n.flow.behind.Store(&f)
}

// behind reports what the broker's function says, false without one.
func (n *Node) behind() bool {
	f := n.flow.behind.Load()
	return f != nil && (*f)()
}

// watch is the receiving side: while messages wait for deliver it looks
// at their number every watchTick and pauses or resumes the other nodes.
func (n *Node) watch() {
	defer close(n.flow.done)
	for {
		select {
		case <-n.flow.wake:
		case <-n.stopIn:
			return
		}
		n.flow.watching.Store(true)
		if !n.watchQueue() {
			return
		}
	}
}

// watchQueue watches until the queue is empty, deliver idle and no pause
// in force, and reports false at Close.
func (n *Node) watchQueue() bool {
	tick := time.NewTicker(watchTick)
	defer tick.Stop()
	var paused time.Time // when the last pause went, zero once resumed
	for {
		q := n.queued()
		high, low := n.marks()
		behind := n.behind()
		switch {
		case paused.IsZero() && (high || behind),
			!paused.IsZero() && (!low || behind) && time.Since(paused) >= pauseRenew:
			if n.sendFlow(flowPause) {
				if paused.IsZero() && n.warn.allow() {
					n.log.Warn().Int("queued", q).Uint64("pauses_sent", n.flow.pausesSent.Load()).
						Msg("cluster: delivery behind, pausing the other nodes")
				}
				paused = time.Now()
			}
		case !paused.IsZero() && low && !behind:
			n.sendFlow(flowResume)
			paused = time.Time{}
		}
		if paused.IsZero() && q == 0 {
			n.flow.watching.Store(false)
			if n.queued() == 0 && !n.flow.delivering.Load() {
				return true
			}
			n.flow.watching.Store(true)
		}
		select {
		case <-tick.C:
		case <-n.stopIn:
			return false
		}
	}
}

// marks reports whether the queues of received messages are past a high
// mark (pause), and whether they are all below their low marks (resume).
func (n *Node) marks() (high, low bool) {
	msgs, bytes, shared := n.inMsgs.Load(), n.inBytes.Load(), len(n.in)
	high = msgs >= BatchPauseHigh || bytes >= BatchPauseBytes || shared >= PauseHigh
	low = msgs <= BatchPauseHigh/4 && bytes <= BatchPauseBytes/4 && shared <= PauseLow
	return high, low
}

// sendFlow publishes a pause or a resume, and reports whether NATS took
// it. It goes past the outgoing queue, which may be what is held.
func (n *Node) sendFlow(kind byte) bool {
	if err := n.nc.Publish(flowSubject(n.cluster), append([]byte{kind}, n.name...)); err != nil {
		return false
	}
	if kind == flowPause {
		n.flow.pausesSent.Add(1)
	} else {
		n.flow.resumesSent.Add(1)
	}
	return true
}

// onFlow takes another node's pause or resume, on nats.go's goroutine
// for the flow subscription.
func (n *Node) onFlow(msg *nats.Msg) {
	if len(msg.Data) < 2 || (msg.Data[0] != flowPause && msg.Data[0] != flowResume) {
		n.flow.malformed.Add(1)
		return
	}
	from := string(msg.Data[1:])
	f := &n.flow
	now := time.Now().UnixNano()
	f.mu.Lock()
	defer f.mu.Unlock()
	if msg.Data[0] == flowResume {
		delete(f.pausers, from)
		close(f.resumed)
		f.resumed = make(chan struct{})
	} else {
		f.pausesIn.Add(1)
		if _, ok := f.pausers[from]; !ok && len(f.pausers) >= maxPausers {
			f.expireLocked(now)
			if len(f.pausers) >= maxPausers {
				return
			}
		}
		f.pausers[from] = now + int64(PauseExpiry)
	}
	f.expireLocked(now)
	var until int64
	for _, t := range f.pausers {
		until = max(until, t)
	}
	f.until.Store(until)
}

// expireLocked forgets the pauses ended by now; f.mu is held.
func (f *flow) expireLocked(now int64) {
	for node, t := range f.pausers {
		if t <= now {
			delete(f.pausers, node)
		}
	}
}

// hold waits, on the sending goroutine, while another node's pause is
// in force, or until Close.
func (n *Node) hold() {
	f := &n.flow
	if f.until.Load() == 0 {
		return
	}
	defer func() {
		if since := f.holding.Swap(0); since != 0 {
			f.heldNanos.Add(uint64(time.Now().UnixNano() - since))
		}
	}()
	for {
		f.mu.Lock()
		until, resumed := f.until.Load(), f.resumed
		f.mu.Unlock()
		left := time.Until(time.Unix(0, until))
		if until == 0 || left <= 0 {
			f.until.CompareAndSwap(until, 0)
			return
		}
		if f.holding.CompareAndSwap(0, time.Now().UnixNano()) && f.warn.allow() {
			n.log.Warn().Int("pausing", f.pausing()).Dur("held_total", f.held()).
				Msg("cluster: another node's delivery is behind, holding what goes to the cluster")
		}
		t := time.NewTimer(left)
		select {
		case <-resumed:
		case <-t.C:
		case <-n.stopOut:
			t.Stop()
			return
		}
		t.Stop()
	}
}

// held is the time the sending goroutine was held, the current hold
// included.
func (f *flow) held() time.Duration {
	d := f.heldNanos.Load()
	if since := f.holding.Load(); since != 0 {
		d += uint64(max(time.Now().UnixNano()-since, 0))
	}
	return time.Duration(d)
}

// pausing counts the pauses in force on this node's sending.
func (f *flow) pausing() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expireLocked(time.Now().UnixNano())
	return len(f.pausers)
}
