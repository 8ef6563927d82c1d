package mqttd

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"mqttd/cluster"
	"mqttd/persistence"
)

// Replicated sessions (cluster.sessions: replicated; the store is
// cluster.SessionStore). A node starts on its own store (bbolt), as one
// without a cluster does; once it has the cluster's store
// (clusterRejoined), and before it accepts clients, it opens the
// replicated sessions over its own store (which keeps the retained
// messages), moves there the sessions its own store held, takes back
// those the stream says are its own, and commits there from then on. A
// client whose node died finds its session on any other node: the node
// it connects to reads it from the stream (adoptReplicated) when the
// previous owner does not answer the handover.

// switchStore is the broker's store when sessions are replicated: the
// node's own until replicateSessions swaps in the SessionStore, with
// every commit held.
type switchStore struct {
	cur atomic.Pointer[storeRef]
}

type storeRef struct{ persistence.Store }

func newSwitchStore(st persistence.Store) *switchStore {
	w := &switchStore{}
	w.cur.Store(&storeRef{st})
	return w
}

// Apply applies b to the current store.
func (w *switchStore) Apply(b *persistence.Batch) error { return w.cur.Load().Apply(b) }

// Load reads the current store.
func (w *switchStore) Load() (*persistence.Snapshot, error) { return w.cur.Load().Load() }

// Close closes the current store (the SessionStore closes the node's own).
func (w *switchStore) Close() error { return w.cur.Load().Close() }

// replicated is the replicated sessions' store, nil until the node has
// it (and without cluster.sessions: replicated).
func (s *Server) replicated() *cluster.SessionStore {
	if s.cluster == nil {
		return nil
	}
	return s.cluster.sessions.Load()
}

// replicateSessions makes the replicated sessions the broker's store, if
// they are configured and not yet; it reports false when the cluster's
// store did not answer, to be tried again.
func (s *Server) replicateSessions(node *cluster.Node) bool {
	l := s.cluster
	if l.swap == nil || l.sessions.Load() != nil {
		return true
	}
	local := l.swap.cur.Load().Store
	js, err := node.OpenSessions(local)
	if err != nil {
		if !s.clusterWarned.limited() {
			s.log.Warn().Err(err).Msg("cluster: replicated sessions not open yet; client connections are refused until they are")
		}
		return false
	}
	d := s.dur
	release := d.commit.Hold()
	err = js.Renumber(func() uint64 { return d.msgIDs.Add(1) })
	moved := 0
	if err == nil {
		moved, err = moveSessions(local, js)
	}
	var back *persistence.Snapshot
	if err == nil {
		back, err = js.Sessions(s.hasClient)
	}
	if err == nil {
		l.swap.cur.Store(&storeRef{js})
		l.sessions.Store(js)
	}
	release()
	if err != nil {
		s.log.Warn().Err(err).Msg("cluster: sessions not moved to the replicated store; trying again")
		return false
	}
	restored := s.restoreReplicated(node, js, back)
	s.log.Info().Int("moved", moved).Int("restored", restored).Msg("cluster: persistent sessions kept in the replicated store")
	return true
}

// hasClient reports whether the registry has client id's session.
func (s *Server) hasClient(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clients.Get(id) != nil
}

// moveSessions writes the sessions the node's own store holds to the
// replicated one, replacing what it held of them, and takes them out of
// the node's own, returning how many moved.
func moveSessions(local persistence.Store, js *cluster.SessionStore) (int, error) {
	snap, err := local.Load()
	if err != nil || len(snap.Sessions) == 0 {
		return 0, err
	}
	var b, gone persistence.Batch
	for i := range snap.Sessions {
		ss := &snap.Sessions[i]
		id := ss.Session.ID
		b.DeleteSession(id)
		b.PutSession(ss.Session)
		for _, sub := range ss.Subscriptions {
			b.PutSubscription(id, sub)
		}
		for _, o := range ss.Outbound {
			if m := snap.Messages[o.MessageID]; m != nil {
				b.PutMessage(m)
				b.PutOutbound(id, o)
			}
		}
		putRelState(&b, id, ss.AwaitingRel, ss.Forwards, ss.Stamps)
		if ss.Will != nil {
			b.PutWill(id, ss.Will)
		}
		gone.DeleteSession(id)
	}
	if err := js.Apply(&b); err != nil {
		return 0, err
	}
	return len(snap.Sessions), local.Apply(&gone)
}

// restoreReplicated gives the broker the sessions the replicated store
// holds as this node's (a previous run's), offline as at a start
// (restore), and returns how many. Each is claimed back first: while
// this node was down another may have found it dead and taken the
// session over, or its client reconnected elsewhere; the stream's
// record names this node until the new owner writes it.
func (s *Server) restoreReplicated(node *cluster.Node, js *cluster.SessionStore, snap *persistence.Snapshot) int {
	n := 0
	for i := range snap.Sessions {
		ss := &snap.Sessions[i]
		id := ss.Session.ID
		// A store error restores it unclaimed, as before claims: its
		// client's CONNECT claims it.
		if _, ok, err := node.ClaimFrom(id, ss.Session.Username, node.Name()); err == nil && !ok {
			js.Forget(id)
			continue
		}
		if s.restoreOne(ss, snap.Messages, nil) {
			n++
		}
	}
	return n
}

// restoreOne puts a stored session in the registry, offline; with b, it
// is stored again with b's operations first (a session taken from
// another node). A session whose expiry passed ends instead (its delayed
// will published). It reports whether the session is in the registry.
func (s *Server) restoreOne(ss *persistence.SessionState, msgs map[uint64]*persistence.Message, b *persistence.Batch) bool {
	now := time.Now()
	id := ss.Session.ID
	at := ss.Session.ExpireAt
	if at == 0 {
		at = now.Add(time.Duration(ss.Session.Expiry) * time.Second).UnixNano()
	}
	if at <= now.UnixNano() {
		ops := [1]persistence.Op{persistence.DeleteSession(id)}
		s.dur.add(&persistence.Batch{Ops: ops[:]}, nil, false)
		if ss.Will != nil {
			s.publishWill(s.restoredWill(ss))
		}
		return false
	}
	cl, expired := s.clientFrom(ss, restoredMessages(msgs), now)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.clients.Get(id) != nil {
		filters := s.dropMovedLocked(cl)
		s.mu.Unlock()
		s.unsubscribeAll(cl, filters)
		s.mu.Lock()
		return false
	}
	s.clients.Put(cl)
	s.stats.sessions.Add(1)
	cl.mu.Lock()
	s.accountQueueLocked(cl)
	cl.stored = true
	cl.sess.SetExpireAt(at)
	if b != nil {
		b.PutSession(ss.Session)
		for _, sub := range ss.Subscriptions {
			b.PutSubscription(id, sub)
		}
		for _, o := range ss.Outbound {
			if pm := msgs[o.MessageID]; pm != nil && !slices.Contains(expired, o.Seq) {
				b.PutMessage(pm)
				b.PutOutbound(id, o)
			}
		}
		putRelState(b, id, ss.AwaitingRel, ss.Forwards, ss.Stamps)
		if ss.Will != nil {
			b.PutWill(id, ss.Will)
		}
		s.dur.add(b, nil, true)
	} else {
		for _, seq := range expired {
			s.dur.removedLocked(cl, seq, nil)
		}
	}
	cl.mu.Unlock()
	s.expiry.schedule(cl, at)
	if ss.Will != nil {
		s.delayWillLocked(cl, s.restoredWill(ss), time.Duration(max(ss.Will.At-now.UnixNano(), 0)), at)
	}
	return true
}

// takeDeadSessions takes over, when node dead is found dead, the
// persistent sessions the replicated store holds as its, as many as this
// node claims first (each id once in the cluster): they are offline
// here, queueing what their subscriptions match, until their clients
// come back to any node.
func (s *Server) takeDeadSessions(node *cluster.Node, dead string) {
	js := s.replicated()
	if js == nil {
		return
	}
	var orphans []cluster.Orphan
	if !node.Retry(func() bool {
		var err error
		orphans, err = js.Orphans(dead)
		return err == nil || node.CutOff()
	}) {
		return
	}
	// A few at a time: each is a claim and a read of the stream, and the
	// dead node's routes are held (deadRouteGrace) until all are done.
	work := make(chan cluster.Orphan)
	var taken, unread atomic.Int64
	var wg sync.WaitGroup
	for range min(takeoverWorkers, len(orphans)) {
		wg.Go(func() {
			for o := range work {
				select {
				case <-node.Closing():
					continue // the store goes with the node: left to the others
				default:
				}
				switch ok, err := s.takeDeadSession(node, js, o, dead); {
				case ok:
					taken.Add(1)
				case err != nil:
					unread.Add(1)
				}
			}
		})
	}
	for _, o := range orphans {
		work <- o
	}
	close(work)
	wg.Wait()
	if n := taken.Load(); n > 0 {
		s.stats.clusterAdopted.Add(uint64(n))
		s.log.Info().Str("dead_node", dead).Int64("sessions", n).Msg("cluster: persistent sessions of a dead node taken over")
	}
	if n := unread.Load(); n > 0 {
		s.log.Warn().Str("dead_node", dead).Int64("sessions", n).
			Msg("cluster: persistent sessions of a dead node not taken over: the replicated store did not give them; their clients' next connection reads them")
	}
}

// takeoverWorkers is how many of a dead node's sessions a survivor takes
// over at once.
const takeoverWorkers = 4

// takeDeadSession takes over one session of node dead, if this node
// claims it first, and reports whether it did, or the error that kept
// it from reading the session it claimed.
func (s *Server) takeDeadSession(node *cluster.Node, js *cluster.SessionStore, o cluster.Orphan, dead string) (bool, error) {
	if s.hasClient(o.ID) {
		return false, nil
	}
	defer s.cluster.takingOver(o.ID)()
	claim, ok, err := node.ClaimFrom(o.ID, o.Username, dead)
	if err != nil || !ok {
		return false, nil
	}
	// A node taken for dead that is alive after all (it answered no
	// question in time) gives the session up, its writes to it synced
	// first, rather than keep it beside this node; a dead one does not
	// answer.
	_, _ = node.Handover(claim, o.ID, false)
	// A read that fails (the stream's leader being elected) is tried
	// again, the claim kept: released, the session would queue nothing
	// until its client came back. Not past this node's Close or
	// cut-off.
	var st *persistence.SessionState
	var msgs map[uint64]*persistence.Message
	node.Retry(func() bool {
		st, msgs, err = js.Adopt(o.ID)
		return err == nil || node.CutOff()
	})
	if err != nil || st == nil {
		node.Release(o.ID, claim.Rev)
		return false, err
	}
	// Another node's message ids are not this node's.
	fresh := make(map[uint64]*persistence.Message, len(msgs))
	renamed := make(map[uint64]uint64, len(msgs))
	for i := range st.Outbound {
		e := &st.Outbound[i]
		m := msgs[e.MessageID]
		if m == nil {
			continue
		}
		if renamed[e.MessageID] == 0 {
			c := *m
			c.ID = s.dur.msgIDs.Add(1)
			fresh[c.ID] = &c
			renamed[e.MessageID] = c.ID
		}
		e.MessageID = renamed[e.MessageID]
	}
	var b persistence.Batch
	b.DeleteSession(o.ID)
	return s.restoreOne(st, fresh, &b), nil
}

// takingOver notes that id's session is being taken over here until the
// function it returns is called: a handover asked meanwhile, its client
// back on another node, waits for it (awaitTakeover) rather than find
// no session and have the client start afresh.
func (l *clusterLink) takingOver(id string) (done func()) {
	ch := make(chan struct{})
	l.takingMu.Lock()
	if l.taking == nil {
		l.taking = make(map[string]chan struct{})
	}
	l.taking[id] = ch
	l.takingMu.Unlock()
	return func() {
		l.takingMu.Lock()
		delete(l.taking, id)
		l.takingMu.Unlock()
		close(ch)
	}
}

// awaitTakeover waits, up to takeoverWait, for a takeover of id's
// session under way here to end.
func (l *clusterLink) awaitTakeover(id string) {
	l.takingMu.Lock()
	ch := l.taking[id]
	l.takingMu.Unlock()
	if ch == nil {
		return
	}
	t := time.NewTimer(takeoverWait)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	}
}

// takeoverWait bounds a handover's wait for a takeover of the same
// session: a claim and a read of the stream, each bounded by the
// store's timeout.
const takeoverWait = 10 * time.Second

// adoptReplicated takes c's session from the replicated store, where a
// node that died (or nobody) left it: a client reconnecting with clean
// start 0 finds its subscriptions and its queued and unacknowledged
// messages (sent again with DUP). Nothing is done without replicated
// sessions, or when the store holds none for the id.
// errSessionUnread is a session the replicated store holds, or may hold,
// and did not give when asked (a read timed out, a leader being
// elected): the client is refused, to come back for it, rather than
// started afresh over it.
var errSessionUnread = errors.New("the replicated store did not give the session")

func (s *Server) adoptReplicated(c *conn) error {
	js := s.replicated()
	if js == nil || s.hasClient(c.info.ClientID) {
		return nil
	}
	var st *persistence.SessionState
	var msgs map[uint64]*persistence.Message
	var err error
	c.mayBlock(func() { st, msgs, err = js.Adopt(c.info.ClientID) })
	if err != nil {
		return fmt.Errorf("%w: %w", errSessionUnread, err)
	}
	if st == nil {
		return nil
	}
	ms := movedSession{Session: st.Session, Subscriptions: st.Subscriptions, AwaitingRel: st.AwaitingRel,
		Forwards: st.Forwards, Stamps: st.Stamps}
	dup := s.opts.Limits.MaxInflight
	for _, o := range st.Outbound {
		e := movedEntry{Seq: o.Seq, QoS: o.QoS, Retain: o.Retain, SubIDs: o.SubIDs, Released: o.Released}
		if !o.Released {
			if e.Message = msgs[o.MessageID]; e.Message == nil {
				continue
			}
			if o.QoS > 0 && dup > 0 {
				e.Dup = true
				dup--
			}
		}
		ms.Outbound = append(ms.Outbound, e)
	}
	s.stats.clusterAdopted.Add(1)
	return s.adoptMoved(c, &ms)
}

// deadRouteGrace is how long a dead node's routes outlive this node's
// takeover of its sessions (cluster.Node.HoldDeadRoutes): the other
// survivors' takeovers, and their new routes, reach this node in well
// under it.
const deadRouteGrace = 2 * time.Second
