package cluster

import (
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// Stats are the node's counters, for the broker's metrics and $SYS.
type Stats struct {
	// Connected reports the NATS connection up.
	Connected bool
	// MessagesOut counts messages sent to the other nodes: each once,
	// however many nodes it goes to.
	MessagesOut uint64
	// BatchesOut and BatchesIn count the batches (NATS messages of
	// records) sent to other nodes and received from them.
	BatchesOut, BatchesIn uint64
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
	// fell InQueueBytes (batches) or InQueueMessages (the share groups'
	// messages) behind; a batch nats.go dropped counts one (its handler
	// never blocks, so it should not). Stats sums it over the shared
	// subscriptions: it costs a lock per one.
	DroppedIn uint64
	// Malformed counts messages from NATS dropped for a subject, header,
	// batch or route message no node sends (a batch counts once).
	Malformed uint64
	// Filters is the number of distinct filters this node wants and has
	// announced to the others.
	Filters int
	// Routes is the number of filters held for the other nodes (the
	// route table), Peers the nodes it holds them for; RouteResyncs
	// counts the snapshots asked of them (a gap in their announcements,
	// a node new or restarted), RouteOverflows the times a node's table
	// passed its bound and it was taken to want every topic.
	Routes, Peers                int
	RouteResyncs, RouteOverflows uint64
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
	// dead, WillsSwept the wills of dead nodes' clients it published,
	// LateBeats the times a node's beats were late in the store but it
	// answered that it was alive (so was not taken for dead).
	NodesAlive                       int
	DeadNodes, WillsSwept, LateBeats uint64
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
	// Confirmed counts the batches other nodes answered (PublishConfirmed),
	// ConfirmsFailed those that failed: unanswered in time, answered that
	// the node could not keep them, or their node gone.
	Confirmed, ConfirmsFailed uint64
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
	batchesOut, batchesIn                                          atomic.Uint64
	takeovers, handedOver                                          atomic.Uint64
	cutOffs, deadNodes, willsSwept, lateBeats, retainedKept        atomic.Uint64
	keptDropped, keptRetries                                       atomic.Uint64
	confirmed, confirmsFailed                                      atomic.Uint64
	releasesDropped                                                atomic.Uint64
}

// Stats returns the node's counters.
func (n *Node) Stats() Stats {
	rt := &n.routes
	rt.mu.RLock()
	filters, routes, peers := 0, rt.held, len(rt.peers)
	for k := range rt.local {
		if !k.shared {
			filters++
		}
	}
	rt.mu.RUnlock()
	droppedIn := n.droppedIn()
	st := Stats{
		Connected:       n.nc.IsConnected(),
		MessagesOut:     n.stats.out.Load(),
		MessagesIn:      n.stats.in.Load(),
		DroppedOut:      n.stats.droppedOut.Load(),
		TooLong:         n.stats.tooLong.Load(),
		DroppedIn:       droppedIn,
		BatchesOut:      n.stats.batchesOut.Load(),
		BatchesIn:       n.stats.batchesIn.Load(),
		Malformed:       n.stats.malformed.Load() + n.flow.malformed.Load() + rt.malformed.Load(),
		Filters:         filters,
		Routes:          routes,
		Peers:           peers,
		RouteResyncs:    rt.resyncs.Load(),
		RouteOverflows:  rt.overflows.Load(),
		Reconnects:      n.stats.reconnects.Load(),
		StoreReady:      n.StoreReady(),
		Takeovers:       n.stats.takeovers.Load(),
		HandedOver:      n.stats.handedOver.Load(),
		CutOff:          n.cut.Load(),
		CutOffs:         n.stats.cutOffs.Load(),
		NodesAlive:      int(n.nodesAlive.Load()),
		DeadNodes:       n.stats.deadNodes.Load(),
		LateBeats:       n.stats.lateBeats.Load(),
		WillsSwept:      n.stats.willsSwept.Load(),
		RetainedKept:    n.stats.retainedKept.Load(),
		ReleasesDropped: n.stats.releasesDropped.Load(),
		KeptDropped:     n.stats.keptDropped.Load(),
		KeptRetries:     n.stats.keptRetries.Load(),
		Confirmed:       n.stats.confirmed.Load(),
		ConfirmsFailed:  n.stats.confirmsFailed.Load(),
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

// deliverLoop calls deliver for what other nodes sent, one message at a
// time: each batch in its order, and the share groups' messages in the
// shared connection's order; at Close it delivers what was received.
func (n *Node) deliverLoop() {
	defer close(n.deliverDone)
	for {
		select {
		case b := <-n.batches:
			n.taking()
			n.deliverBatch(b)
			n.flow.delivering.Store(false)
			// A batch fills the subscribers' outboxes at once: their
			// writers run before the next, on a busy core too.
			runtime.Gosched()
		case msg := <-n.in:
			n.taking()
			n.receive(msg)
			n.flow.delivering.Store(false)
		case <-n.stopIn:
			for {
				select {
				case b := <-n.batches:
					n.deliverBatch(b)
				case msg := <-n.in:
					n.receive(msg)
				default:
					return
				}
			}
		}
	}
}

// queued is the number of messages received and not yet delivered.
func (n *Node) queued() int { return int(n.inMsgs.Load()) + len(n.in) }

// receive decodes msg, from the network: anything no node sends is
// counted and dropped.
//
// A share group's copy with a reply subject waits for confirmation
// (confirm.go): it is answered once what its delivery stored is
// committed, or at once, refused, when it could not be delivered.
func (n *Node) receive(msg *nats.Msg) {
	m, err := decodeMsg(n.cluster, msg.Subject, msg.Header, msg.Data)
	if err != nil {
		n.stats.malformed.Add(1)
		n.warnMalformed(err, msg.Subject)
		if msg.Reply != "" {
			n.answerShared(msg.Reply, false)
		}
		return
	}
	if !n.tag(msg, m) {
		if msg.Reply != "" {
			n.answerShared(msg.Reply, false)
		}
		return
	}
	n.stats.in.Add(1)
	if msg.Reply != "" && n.delivering != nil {
		n.delivering()
	}
	n.deliver(m)
	if msg.Reply != "" {
		n.answerShared(msg.Reply, true)
	}
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
		if d, err := n.batchSub.Dropped(); err == nil {
			n.stats.droppedIn.Add(uint64(d))
		}
		n.retired = true
		n.mu.Unlock()
		n.closeErr = errors.Join(drainConn(n.nc, n.ncClosed), n.closeShared())
		n.routes.syncing.Wait()
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
