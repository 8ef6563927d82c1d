package mqttd

import (
	"sync"
	"sync/atomic"
	"time"
)

// A node whose online subscribers fall behind pauses the other nodes too
// (cluster/pause.go): the node routes what comes from them at the
// cluster's rate, which their publishers' PUBACKs, given by their own
// node, do not bound, so without it a QoS 1/2 subscriber slower than a
// publisher on another node fills its session queue and loses the rest
// (queue_full). A delivery queued for an online client whose queue is
// past a quarter of limits.max_queued or max_queued_bytes lists the
// client (noteQueuedLocked); the node asks backlogged at each look at its
// own queue and pauses the others while a listed client stays above a
// sixteenth. A client whose queue does not shrink for backlogStuck is
// left out until its queue shrinks again, as deliverQoS0 leaves out a
// stuck outbox until its writer makes progress: one client that stops
// reading holds the cluster for that long at a time.
// Bridges' sessions, with their own bounds and policies, are not listed.

// backlogStuck is how long a listed client's queue may go without
// shrinking before the node stops pausing the others for it.
const backlogStuck = time.Second

// backlog is the clients whose queues hold the cluster back.
type backlog struct {
	// mu is a leaf, taken under client.mu (noteQueuedLocked) and with no
	// lock held (backlogged).
	mu      sync.Mutex
	clients map[*client]*lagging
	// listed is len(clients), read without mu by every check.
	listed atomic.Int32
}

// lagging is a listed client's queue as last seen.
type lagging struct {
	queued, bytes int
	progress      time.Time // when its queue last shrank
	stuck         bool
}

// noteQueuedLocked lists cl, whose queue a delivery just grew, when that
// queue is deep; cl.mu is held.
func (s *Server) noteQueuedLocked(cl *client) {
	lim := &s.opts.Limits
	q, b := cl.sess.Queued(), cl.sess.QueuedBytes()
	if q < lim.MaxQueued/4 && int64(b) < lim.MaxQueuedBytes/4 || cl.bridge.Load() != nil {
		return
	}
	bl := &s.cluster.backlog
	bl.mu.Lock()
	defer bl.mu.Unlock()
	if bl.clients[cl] != nil {
		return
	}
	if bl.clients == nil {
		bl.clients = map[*client]*lagging{}
	}
	bl.clients[cl] = &lagging{queued: q, bytes: b, progress: time.Now()}
	bl.listed.Store(int32(len(bl.clients)))
}

// backlogged reports whether a listed client's queue is still deep and
// shrinking, forgetting those drained, gone offline or stuck. It runs on
// the node's watcher goroutine, with no lock held.
func (s *Server) backlogged() bool {
	bl := &s.cluster.backlog
	if bl.listed.Load() == 0 {
		return false
	}
	bl.mu.Lock()
	listed := make([]*client, 0, len(bl.clients))
	for cl := range bl.clients {
		listed = append(listed, cl)
	}
	bl.mu.Unlock()
	lim := &s.opts.Limits
	now, behind := time.Now(), false
	for _, cl := range listed {
		cl.mu.Lock()
		q, b, online := cl.sess.Queued(), cl.sess.QueuedBytes(), cl.conn != nil && !cl.dropped
		cl.mu.Unlock()
		bl.mu.Lock()
		lg := bl.clients[cl]
		if lg == nil {
			bl.mu.Unlock()
			continue
		}
		switch {
		case !online || q <= lim.MaxQueued/16 && int64(b) <= lim.MaxQueuedBytes/16:
			delete(bl.clients, cl)
		case q < lg.queued || b < lg.bytes:
			lg.progress, lg.stuck = now, false
		case now.Sub(lg.progress) >= backlogStuck:
			lg.stuck = true
		}
		lg.queued, lg.bytes = q, b
		behind = behind || !lg.stuck && bl.clients[cl] != nil
		bl.listed.Store(int32(len(bl.clients)))
		bl.mu.Unlock()
	}
	return behind
}
