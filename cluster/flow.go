package cluster

import (
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// Stats are the node's counters, for the broker's metrics and $SYS.
type Stats struct {
	// Connected reports the NATS connection up.
	Connected bool
	// MessagesOut counts messages handed to NATS for the other nodes.
	MessagesOut uint64
	// MessagesIn counts messages from other nodes passed to deliver, and
	// those of the shared subscriptions (SharedIn), which may be this
	// node's own.
	MessagesIn uint64
	// DroppedOut counts messages Publish could not send: the outgoing
	// queue at a bound, or NATS refusing them (payload over the server's
	// max_payload, nats.go's reconnect buffer full while disconnected).
	DroppedOut uint64
	// TooLong counts topics not sent because their subject exceeds
	// MaxSubjectLen (not in DroppedOut).
	TooLong uint64
	// DroppedIn counts messages from other nodes dropped because deliver
	// fell InQueueMessages behind (Stats sums it over the subscriptions:
	// it costs a lock per NATS subscription).
	DroppedIn uint64
	// Malformed counts messages from NATS dropped for a subject or header
	// no node sends.
	Malformed uint64
	// Subscriptions is the number of NATS subscriptions held: one per
	// subject of each wanted filter, and one to the retained messages.
	Subscriptions int
	// Filters is the number of distinct filters wanted.
	Filters int
	// Reconnects counts the NATS connection's reconnections.
	Reconnects uint64
	// StoreReady reports the replicated store bound: the node may claim
	// client ids.
	StoreReady bool
	// Takeovers counts client ids this node took over from another node;
	// HandedOver those it gave up to another node.
	Takeovers, HandedOver uint64
	// CutOff reports this node cut off from the store (liveness.go);
	// CutOffs counts the times it was.
	CutOff  bool
	CutOffs uint64
	// NodesAlive is the nodes whose beats this node sees, itself
	// included (0 before Watch); DeadNodes counts the nodes it found
	// dead, WillsSwept the wills of dead nodes' clients it published.
	NodesAlive            int
	DeadNodes, WillsSwept uint64
	// RetainedKept counts the retained messages read from the replicated
	// stream and handed to the keeper.
	RetainedKept uint64
	// ReleasesDropped counts records (owners, wills) this node meant to
	// take out and could not: its queue full, or the store not answering
	// for 30 s.
	ReleasesDropped uint64
	// KeptDropped counts retained messages not written to the replicated
	// stream (its queue full), KeptRetries the writes repeated while the
	// stream did not acknowledge them.
	KeptDropped, KeptRetries uint64
	// SharedSubscriptions is the number of NATS subscriptions of the
	// shared (group, filter) pairs wanted (WantShared), SharedFilters the
	// number of those pairs.
	SharedSubscriptions, SharedFilters int
	// SharedIn counts the messages of the shared subscriptions passed to
	// deliver; SharedUnwanted those dropped because their pair was
	// unwanted since NATS chose this node for them.
	SharedIn, SharedUnwanted uint64
	// PausesSent and ResumesSent count the pauses (renewals included)
	// and resumes this node asked of the others, its delivery behind
	// (pause.go); PausesIn the pauses it received from them.
	PausesSent, ResumesSent, PausesIn uint64
	// Pausing is the number of nodes whose pause holds this node's
	// sending now; Held is the time its sending was held in all.
	Pausing int
	Held    time.Duration
	// PublishWaits counts the PublishWaiting calls that waited for room
	// in the outgoing queue (from the start of their wait), PublishWaited
	// the time of those done.
	PublishWaits  uint64
	PublishWaited time.Duration
}

type counters struct {
	out, in, droppedOut, tooLong, droppedIn, malformed, reconnects atomic.Uint64
	takeovers, handedOver                                          atomic.Uint64
	cutOffs, deadNodes, willsSwept, retainedKept                   atomic.Uint64
	keptDropped, keptRetries                                       atomic.Uint64
	releasesDropped                                                atomic.Uint64
}

// Stats returns the node's counters.
func (n *Node) Stats() Stats {
	n.mu.Lock()
	filters := len(n.wants)
	n.mu.Unlock()
	droppedIn := n.droppedIn()
	st := Stats{
		Connected:       n.nc.IsConnected(),
		MessagesOut:     n.stats.out.Load(),
		MessagesIn:      n.stats.in.Load(),
		DroppedOut:      n.stats.droppedOut.Load(),
		TooLong:         n.stats.tooLong.Load(),
		DroppedIn:       droppedIn,
		Malformed:       n.stats.malformed.Load() + n.flow.malformed.Load(),
		Subscriptions:   int(n.nsubs.Load()),
		Filters:         filters,
		Reconnects:      n.stats.reconnects.Load(),
		StoreReady:      n.StoreReady(),
		Takeovers:       n.stats.takeovers.Load(),
		HandedOver:      n.stats.handedOver.Load(),
		CutOff:          n.cut.Load(),
		CutOffs:         n.stats.cutOffs.Load(),
		NodesAlive:      int(n.nodesAlive.Load()),
		DeadNodes:       n.stats.deadNodes.Load(),
		WillsSwept:      n.stats.willsSwept.Load(),
		RetainedKept:    n.stats.retainedKept.Load(),
		ReleasesDropped: n.stats.releasesDropped.Load(),
		KeptDropped:     n.stats.keptDropped.Load(),
		KeptRetries:     n.stats.keptRetries.Load(),
		PausesSent:      n.flow.pausesSent.Load(),
		ResumesSent:     n.flow.resumesSent.Load(),
		PausesIn:        n.flow.pausesIn.Load(),
		Pausing:         n.flow.pausing(),
		Held:            n.flow.held(),
		PublishWaits:    n.flow.waits.Load(),
		PublishWaited:   time.Duration(n.flow.waitNanos.Load()),
	}
	n.sharedStats(&st)
	return st
}

// Publish sends m to the nodes that want its topic, once per node, or to
// every node when it is retained (each keeps the retained messages). It
// never blocks: it encodes m and queues it for the node's sending
// goroutine, which hands it to nats.go (whose own buffer holds it while
// the connection is down); past OutQueueMessages or OutQueueBytes it
// drops m and returns ErrQueueFull, counted in Stats.DroppedOut. m's
// Payload is sent without a copy: it must not change after Publish.
// Topics beginning with '$' are not sent (each node has its own $SYS);
// Publish returns nil for them.
func (n *Node) Publish(m *Message) error {
	msg, size, err := n.encode(m)
	if msg == nil {
		return err
	}
	if !n.enqueue(msg, size) {
		return n.queueFull(m.Topic)
	}
	return nil
}

// PublishWaiting is Publish for a caller that may wait: when the
// outgoing queue is full (another node's pause holds it, or NATS is
// slow) it waits for room, up to wait, then drops m as Publish does. It
// waits inside block (block(f) runs f: the broker lets another reader
// run meanwhile), which it calls only when it must wait; block nil runs
// f itself. The caller must hold no lock another goroutine may need.
// Waits are counted in Stats.PublishWaits.
func (n *Node) PublishWaiting(m *Message, wait time.Duration, block func(func())) error {
	msg, size, err := n.encode(m)
	if msg == nil {
		return err
	}
	if n.enqueue(msg, size) {
		return nil
	}
	n.flow.waits.Add(1)
	start := time.Now()
	waited := func() { err = n.waitRoom(msg, size, start.Add(wait)) }
	if block == nil {
		waited()
	} else {
		block(waited)
	}
	n.flow.waitNanos.Add(uint64(time.Since(start)))
	if errors.Is(err, ErrQueueFull) {
		return n.queueFull(m.Topic)
	}
	return err
}

// encode makes m's NATS message and its size in the outgoing queue, nil
// (and the error to return) for a message not to send.
func (n *Node) encode(m *Message) (*nats.Msg, int64, error) {
	if strings.HasPrefix(m.Topic, "$") {
		return nil, 0, nil
	}
	if n.closed.Load() {
		return nil, 0, ErrClosed
	}
	subj := Subject(n.cluster, m.Topic)
	if m.Retain {
		subj = subjectUnder(retainedPrefix(n.cluster), m.Topic)
	}
	if len(subj) > MaxSubjectLen {
		n.stats.tooLong.Add(1)
		n.warnf("cluster: topic too long for a NATS subject, not sent to other nodes", m.Topic)
		return nil, 0, ErrTooLong
	}
	meta, err := encodeMeta(m)
	if err != nil {
		n.stats.droppedOut.Add(1)
		n.warnf("cluster: message not encodable, not sent to other nodes", m.Topic)
		return nil, 0, err
	}
	msg := &nats.Msg{Subject: subj, Data: m.Payload, Header: nats.Header{metaHeader: {meta}}}
	return msg, int64(len(subj) + len(meta) + len(m.Payload)), nil
}

// enqueue queues msg for the sending goroutine, and reports false when
// the queue is at a bound.
func (n *Node) enqueue(msg *nats.Msg, size int64) bool {
	if n.outBytes.Add(size) > OutQueueBytes {
		n.outBytes.Add(-size)
		return false
	}
	select {
	case n.out <- msg:
		return true
	default:
		n.outBytes.Add(-size)
		return false
	}
}

// waitRoom queues msg once there is room, or returns ErrQueueFull at
// deadline and ErrClosed at Close.
func (n *Node) waitRoom(msg *nats.Msg, size int64, deadline time.Time) error {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	r := &n.flow.room
	for {
		// Registered before the bytes are counted: a message sent after
		// the count signals this wait.
		r.waiters.Add(1)
		room := r.wait()
		if n.outBytes.Add(size) > OutQueueBytes {
			n.outBytes.Add(-size)
			select {
			case <-room:
				r.waiters.Add(-1)
				continue
			case <-t.C:
				r.waiters.Add(-1)
				return ErrQueueFull
			case <-n.stopOut:
				r.waiters.Add(-1)
				return ErrClosed
			}
		}
		r.waiters.Add(-1)
		select {
		case n.out <- msg:
			return nil
		case <-t.C:
			n.outBytes.Add(-size)
			return ErrQueueFull
		case <-n.stopOut:
			n.outBytes.Add(-size)
			return ErrClosed
		}
	}
}

func (n *Node) queueFull(topic string) error {
	n.stats.droppedOut.Add(1)
	n.warnf("cluster: outgoing queue full, message not sent to other nodes", topic)
	return ErrQueueFull
}

// warnf logs msg at most once per throttle period, with the drop counts.
func (n *Node) warnf(msg, topic string) {
	if n.warn.allow() {
		n.log.Warn().Str("topic", truncate(topic, 200)).Uint64("dropped_out", n.stats.droppedOut.Load()).
			Uint64("too_long", n.stats.tooLong.Load()).Uint64("malformed", n.stats.malformed.Load()).Msg(msg)
	}
}

// sendLoop hands queued messages to nats.go, the only goroutine that may
// block on the connection's buffer, holding them while another node's
// pause is in force (pause.go); at Close it sends what is queued, paused
// or not.
func (n *Node) sendLoop() {
	defer close(n.sendDone)
	for {
		select {
		case msg := <-n.out:
			n.hold()
			n.send(msg)
		case <-n.stopOut:
			for {
				select {
				case msg := <-n.out:
					n.send(msg)
				default:
					return
				}
			}
		}
	}
}

func (n *Node) send(msg *nats.Msg) {
	n.outBytes.Add(-int64(len(msg.Subject) + len(msg.Header[metaHeader][0]) + len(msg.Data)))
	n.flow.room.signal()
	if err := n.nc.PublishMsg(msg); err != nil {
		n.stats.droppedOut.Add(1)
		if n.warn.allow() {
			n.log.Warn().Err(err).Uint64("dropped_out", n.stats.droppedOut.Load()).
				Msg("cluster: NATS refused a message, not sent to other nodes")
		}
		return
	}
	n.stats.out.Add(1)
	if strings.HasPrefix(msg.Subject, retainedPrefix(n.cluster)) {
		n.keepRetainedMsg(msg)
	}
}

// deliverLoop decodes what other nodes sent and calls deliver, one
// message at a time in the connection's order; at Close it delivers what
// the connection had received.
func (n *Node) deliverLoop() {
	defer close(n.deliverDone)
	for {
		select {
		case msg := <-n.in:
			n.taking()
			n.receive(msg)
			n.flow.delivering.Store(false)
		case <-n.stopIn:
			for {
				select {
				case msg := <-n.in:
					n.receive(msg)
				default:
					return
				}
			}
		}
	}
}

// receive decodes msg, from the network: anything no node sends is
// counted and dropped.
func (n *Node) receive(msg *nats.Msg) {
	m, err := decodeMsg(n.cluster, msg.Subject, msg.Header, msg.Data)
	if err != nil {
		n.stats.malformed.Add(1)
		if n.warn.allow() {
			n.log.Warn().Err(err).Str("subject", truncate(msg.Subject, 200)).
				Uint64("malformed", n.stats.malformed.Load()).Msg("cluster: malformed message from NATS dropped")
		}
		return
	}
	if !n.tag(msg, m) {
		return
	}
	n.stats.in.Add(1)
	n.deliver(m)
}

// errSubject is a subject TopicOf refuses.
var errSubject = errors.New("cluster: subject is no topic of this cluster")

// decodeMsg rebuilds the Message of a NATS message. The payload is the
// message's own (nats.go allocates each).
func decodeMsg(cluster, subject string, h nats.Header, data []byte) (*Message, error) {
	retained := strings.HasPrefix(subject, retainedPrefix(cluster))
	p := prefix(cluster)
	if retained {
		p = retainedPrefix(cluster)
	}
	topic, ok := topicUnder(p, subject)
	if !ok {
		return nil, errSubject
	}
	v := h[metaHeader]
	if len(v) != 1 {
		return nil, errMeta
	}
	m := &Message{Topic: topic, Payload: data}
	if err := decodeMeta(v[0], m); err != nil {
		return nil, err
	}
	if m.Retain != retained {
		return nil, errRetainSubject
	}
	return m, nil
}

// errRetainSubject is a message whose retain flag is not its subject's.
var errRetainSubject = errors.New("cluster: retain flag and subject disagree")

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// throttlePeriod is the least time between two warnings of a node.
const throttlePeriod = 10 * time.Second

// throttle lets one warning through per throttlePeriod, so that a flood
// of bad messages costs a log line every few seconds, not one each.
type throttle struct{ next atomic.Int64 }

func (t *throttle) allow() bool {
	now := time.Now().UnixNano()
	next := t.next.Load()
	return now >= next && t.next.CompareAndSwap(next, now+int64(throttlePeriod))
}

// Close sends what Publish queued, drains the connection (unsubscribes,
// delivers what was received) and closes it, then stops the embedded
// server. Publish after Close returns ErrClosed; deliver is not called
// once Close returns. Close is safe to call more than once.
func (n *Node) Close() error {
	n.once.Do(func() {
		n.closed.Store(true)
		close(n.stopLive)
		n.live.Wait()
		n.mu.Lock()
		if n.retainedRead != nil {
			n.retainedRead.Stop()
		}
		n.mu.Unlock()
		n.purgeOwnWills()
		close(n.stopOut)
		<-n.sendDone
		// What the keeper has not written to the stream yet is only
		// delivered live.
		close(n.stopKeep)
		<-n.keeperDone
		n.mu.Lock()
		for _, w := range n.allWants() {
			n.retireDrops(w)
		}
		n.retired = true
		n.mu.Unlock()
		n.closeErr = errors.Join(drainConn(n.nc, n.ncClosed), n.closeShared())
		close(n.stopIn)
		<-n.deliverDone
		<-n.flow.done
		<-n.storeDone
		<-n.releaserDone
		if n.emb != nil {
			n.emb.shutdown()
		}
		n.log.Info().Msg("cluster node closed")
	})
	return n.closeErr
}
