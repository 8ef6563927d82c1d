package mqttd

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"mqttd/auth"
	"mqttd/cluster"
	"mqttd/packets"
	"mqttd/persistence"
	"mqttd/session"
)

// One owner per client id in a cluster (the store's side is in
// cluster/owner.go). Before a CONNECT is attached, its node claims the
// client id in the replicated store; if another node held it, that node
// gives it up: it closes its client's connection with Session taken
// over and drops the session, sending it here unless the new connection
// starts clean, where it is stored and resumed as if it had always been
// here. A node that cannot reach the store refuses the CONNECT with
// Server unavailable: the client tries another node, one that can.

// movedSession is a session on its way from one node to another,
// encoded as JSON: it travels once per takeover, not per message.
type movedSession struct {
	Session       persistence.Session
	Subscriptions []persistence.Subscription `json:",omitempty"`
	Outbound      []movedEntry               `json:",omitempty"`
	AwaitingRel   []uint16                   `json:",omitempty"`
	// Forwards and Stamps are its state of exactly once between nodes
	// (cluster_qos2.go).
	Forwards []persistence.Forward   `json:",omitempty"`
	Stamps   []persistence.SeenStamp `json:",omitempty"`
}

// movedEntry is one of a moved session's entries, with its message (none
// for a QoS 2 message past PUBREC).
type movedEntry struct {
	Seq      uint64
	QoS      byte
	Retain   bool                 `json:",omitempty"`
	SubIDs   []uint32             `json:",omitempty"`
	Dup      bool                 `json:",omitempty"`
	Released bool                 `json:",omitempty"`
	Message  *persistence.Message `json:",omitempty"`
}

// claimInCluster makes this node the owner of c's client id, moving its
// session here from the node that held it. It returns
// cluster.ErrOtherUser for an id another user's session holds (under
// auth.other_user_session: refuse), and another error when the
// replicated store does not answer: the client is then refused.
func (c *conn) claimInCluster(cp *packets.Connect) error {
	s := c.srv
	node := s.clusterNode()
	if node == nil || !s.cluster.accepting.Load() {
		return cluster.ErrNoStore
	}
	id := c.info.ClientID
	refuse := s.opts.Auth.OtherUserSession != OtherUserReplace
	var claim cluster.Claim
	var state []byte
	var err, moveErr error
	c.mayBlock(func() {
		if claim, err = node.Claim(id, c.info.Username, refuse); err == nil {
			if claim.Prev == node.Name() {
				// This node may be taking the session over from a
				// dead node: its client is back first.
				s.cluster.awaitTakeover(id)
			}
			state, moveErr = node.Handover(claim, id, cp.CleanStart)
		}
	})
	if err != nil {
		return err
	}
	c.claimRev = claim.Rev
	switch {
	case moveErr == nil && state != nil:
		var ms movedSession
		if moveErr = json.Unmarshal(state, &ms); moveErr == nil {
			moveErr = s.adoptMoved(c, &ms)
		}
	case !cp.CleanStart && (errors.Is(moveErr, cluster.ErrNoAnswer) || moveErr == nil && claim.Prev == ""):
		// The previous owner is gone, or nobody held the id: its session
		// may be in the replicated store.
		moveErr = s.adoptReplicated(c)
	}
	if errors.Is(moveErr, errSessionUnread) {
		// Refused with the claim given up, so that the client's next
		// CONNECT, here or on another node, asks the store again: kept,
		// the claim would have it find no previous owner to ask and start
		// afresh over the session.
		s.unclaim(c)
		return moveErr
	}
	if moveErr != nil {
		c.fields(s.log.Warn()).Err(moveErr).Str("previous_node", claim.Prev).Msg("cluster: session not moved from the node that held it; the client starts afresh")
	}
	return nil
}

// stillClaimed reports, once c is attached, whether no other node's
// claim of its client id came after this node's: then the later claim
// wins, and c is closed.
func (c *conn) stillClaimed() bool {
	node := c.srv.clusterNode()
	return c.claimRev == 0 || node == nil || node.Holds(c.info.ClientID, c.claimRev)
}

// unclaim gives up the claim and the will record of a CONNECT refused
// after its claim.
func (s *Server) unclaim(c *conn) {
	s.dropWillRecord(c.willRef)
	if node := s.clusterNode(); node != nil && c.claimRev != 0 {
		node.Release(c.info.ClientID, c.claimRev)
	}
}

// refuseUnclaimed refuses a client whose id this node could not claim.
func (c *conn) refuseUnclaimed(err error) error {
	s := c.srv
	s.stats.clusterRefused.Add(1)
	code := packets.ConnRefusedServerUnavailable
	if c.version == packets.V5 {
		code = packets.ServerUnavailable
	}
	c.refuse(code)
	if !s.clusterWarned.limited() {
		c.fields(s.log.Warn()).Err(err).Msg("client refused: the cluster's store did not answer for its client id (logged at most every 10 s; mqttd_cluster_refused_total counts them all)")
	}
	return closing(CloseConnectRefused, fmt.Errorf("cluster: %w", err))
}

// handOver gives up client id to the node that claimed it: its
// connection is closed (Session taken over) and its session leaves this
// node; unless clean, the session is returned, encoded, for the new
// owner. It runs on the cluster connection's goroutine.
func (s *Server) handOver(id string, clean, sameUser bool) []byte {
	s.cluster.awaitTakeover(id)
	state, _ := s.relinquish(id, !clean, clean, sameUser)
	if s.replicated() != nil {
		// What this node wrote of the session is in the replicated store
		// before the new owner writes it there.
		s.dur.commit.Sync()
	}
	return state
}

// relinquish takes client id's session out of this node, closing its
// connection with Session taken over. export returns it encoded; will
// publishes the wills it leaves (its connection's, and one waiting for
// its delay): the session ended rather than moved; but sameUser (its
// user is back) drops a will that waits for a delay [MQTT-3.1.2-8]. It
// reports whether there was a session.
func (s *Server) relinquish(id string, export, will, sameUser bool) ([]byte, bool) {
	s.mu.Lock()
	cl := s.clients.Get(id)
	if cl == nil || cl.bridge.Load() != nil || cl.handler != nil {
		s.mu.Unlock()
		return nil, false
	}
	s.clients.Remove(id)
	cl.mu.Lock()
	oldConn := cl.conn
	cl.conn = nil
	if oldConn != nil {
		s.stats.sessionsOnline.Add(-1)
		oldConn.succeeded = sameUser
	}
	cl.moved = !will
	var ms movedSession
	if export {
		ms = exportLocked(cl)
	}
	cl.mu.Unlock()
	ended := s.takeWillLocked(cl)
	if !will || sameUser {
		defer s.dropWillRecord(ended.ref)
		ended = leftWill{}
	}
	dropped := s.dropSessionLocked(cl)
	s.mu.Unlock()
	s.unsubscribeAll(cl, dropped)
	s.publishWill(ended)
	var state []byte
	if export {
		// Encoded once the locks are released: every CONNECT waits for
		// the registry lock.
		var err error
		if state, err = json.Marshal(&ms); err != nil {
			s.log.Error().Err(err).Str("client_id", id).Msg("cluster: session not encoded for the node taking it over")
			state = nil
		}
	}
	if oldConn != nil {
		s.log.Info().Str("client_id", id).Str("remote", oldConn.info.Remote.String()).Bool("session_moved", export).
			Msg("session taken over on another node of the cluster")
		s.writers.Add(1)
		go func() {
			defer s.writers.Done()
			oldConn.sendDisconnectAsync(packets.SessionTakenOver)
			oldConn.closeWith(errTakenOver)
		}()
	}
	return state, true
}

// exportLocked is cl's session as it moves to another node. The caller
// holds cl.mu.
func exportLocked(cl *client) movedSession {
	ms := movedSession{Session: persistence.Session{ID: cl.id, Username: cl.owner()}}
	if who := cl.who.Load(); who != nil {
		ms.Session.Version, ms.Session.Listener = who.ProtocolVersion, who.Listener
	}
	cl.sess.Subscriptions(func(sub session.Subscription) {
		ms.Subscriptions = append(ms.Subscriptions, persistence.Subscription{Filter: sub.Filter, Options: sub.Options, ID: sub.ID})
	})
	for _, o := range cl.sess.Entries() {
		e := movedEntry{Seq: o.Seq, QoS: o.QoS, Retain: o.Retain, SubIDs: o.SubIDs, Dup: o.Dup, Released: o.Released}
		if o.Msg != nil {
			m := o.Msg
			e.Message = &persistence.Message{Topic: m.Topic, Payload: m.Payload, QoS: m.QoS, Retain: m.Retain,
				Expiry: m.Expiry, Origin: m.Origin}
			if m.Properties != nil {
				e.Message.Properties = *m.Properties
			}
		}
		ms.Outbound = append(ms.Outbound, e)
	}
	ms.AwaitingRel, ms.Forwards, ms.Stamps = relStateLocked(cl)
	return ms
}

// adoptMoved makes the session another node sent for c's client id this
// node's: in the registry, offline until attach gives it c, and, for a
// persistent session of a broker with a store, stored before the
// CONNACK as a restored one would be.
func (s *Server) adoptMoved(c *conn, ms *movedSession) error {
	id := c.info.ClientID
	if ms.Session.ID != id {
		return fmt.Errorf("moved session is %q's", ms.Session.ID)
	}
	// A session this node still had for the id is an older copy.
	s.relinquish(id, false, false, true)
	cl := &client{id: id, sess: session.New(s.sessionLimits(id))}
	cl.who.Store(&auth.ClientInfo{ClientID: id, Username: ms.Session.Username, ProtocolVersion: ms.Session.Version,
		Listener: ms.Session.Listener})
	stored := s.dur != nil && c.expiry > 0
	var b persistence.Batch
	if stored && s.replicated() != nil {
		// Whatever the replicated store held of the id goes: what the
		// session holds now is written again below.
		b.DeleteSession(id)
	}
	if stored {
		b.PutSession(persistence.Session{ID: id, Username: ms.Session.Username, Version: byte(c.version),
			Expiry: c.expiry, Listener: c.info.Listener})
	}
	for _, sub := range ms.Subscriptions {
		if _, err := s.addSubscription(sub.Filter, cl, subOptsOf(sub)); err != nil {
			continue
		}
		if !cl.sess.Subscribe(session.Subscription{Filter: sub.Filter, Options: sub.Options, ID: sub.ID}) {
			s.stats.subscriptions.Add(1)
		}
		if stored {
			b.PutSubscription(id, sub)
		}
	}
	for _, e := range ms.Outbound {
		o := session.Outbound{Seq: e.Seq, QoS: e.QoS, Retain: e.Retain, SubIDs: e.SubIDs, Dup: e.Dup, Released: e.Released}
		if e.Message != nil {
			pm := e.Message
			o.Msg = newMessage(pm.Topic, pm.Payload, pm.QoS, pm.Retain, &pm.Properties, pm.Origin)
			o.Msg.Expiry = pm.Expiry
		} else if !e.Released {
			continue
		}
		cl.sess.Restore(o, &s.queueBudget)
		if stored {
			// A QoS 2 entry past PUBREC came without its message (only its
			// packet id is left to send), but the store keeps a message
			// for every entry: an empty one.
			var spm *persistence.Message
			if o.Msg != nil {
				spm = s.dur.stored(o.Msg)
			} else {
				spm = &persistence.Message{ID: s.dur.msgIDs.Add(1), QoS: 2}
			}
			b.PutMessage(spm)
			b.PutOutbound(id, outboundOf(o, spm.ID))
		}
	}
	took := restoreRelLocked(cl, ms.AwaitingRel, ms.Forwards, ms.Stamps)
	if stored {
		putRelState(&b, id, took, ms.Forwards, ms.Stamps)
	}
	s.mu.Lock()
	if old := s.clients.Get(id); old != nil {
		filters := s.dropMovedLocked(cl)
		s.mu.Unlock()
		s.unsubscribeAll(cl, filters)
		return errors.New("a session for the id came here meanwhile")
	}
	s.clients.Put(cl)
	s.stats.sessions.Add(1)
	cl.mu.Lock()
	s.accountQueueLocked(cl)
	cl.stored = stored
	// Offline until attach gives it c, which may still be refused: it
	// expires as any offline session does.
	at := time.Now().Add(time.Duration(c.expiry) * time.Second).UnixNano()
	cl.sess.SetExpireAt(at)
	s.expiry.schedule(cl, at)
	var ticket uint64
	if stored {
		ticket = s.dur.commit.Add(&b, nil)
	}
	cl.mu.Unlock()
	s.mu.Unlock()
	if stored {
		done := make(chan struct{})
		s.dur.commit.Wait(ticket, func() { close(done) })
		<-done
	}
	return nil
}

// dropMovedLocked lets go of a moved session that could not be adopted,
// returning its filters for unsubscribeAll. The caller holds s.mu.
func (s *Server) dropMovedLocked(cl *client) []string {
	s.stats.sessions.Add(1) // dropSessionLocked counts it out
	return s.dropSessionLocked(cl)
}

// releaseClientID tells the cluster that client id's session ended on
// this node, under connection c's claim (nil: the node's latest claim,
// for a session that ends offline). With replicated sessions it does so
// once the store has applied what was added before, the session's
// deletion among it: released sooner, the id let another node find the
// ended session in the stream and take it up again.
func (s *Server) releaseClientID(id string, c *conn) {
	node := s.clusterNode()
	if node == nil {
		return
	}
	var rev uint64
	if c != nil {
		if rev = c.claimRev; rev == 0 {
			return
		}
	}
	release := func() {
		if rev == 0 {
			node.ReleaseOwned(id)
		} else {
			node.Release(id, rev)
		}
	}
	if s.replicated() == nil || s.dur == nil {
		release()
		return
	}
	s.dur.commit.AddThen(&persistence.Batch{}, nil, release)
	s.dur.commit.Flush()
}

// adoptKept claims, once the replicated store is reachable, the ids of
// the sessions this node kept (restored from its store, or kept through
// a loss of the cluster), and lets go of those another node took
// meanwhile: their clients are there now. It reports whether the store
// answered for every one.
func (s *Server) adoptKept(node *cluster.Node) bool {
	s.mu.Lock()
	ids := make([]string, 0, s.clients.Len())
	users := make([]string, 0, s.clients.Len())
	for cl := range s.clients.All {
		id := cl.id
		if cl.bridge.Load() == nil && cl.handler == nil {
			ids = append(ids, id)
			users = append(users, cl.owner())
		}
	}
	s.mu.Unlock()
	gone, failed := 0, 0
	for i, id := range ids {
		owner, err := node.Adopt(id, users[i])
		if err != nil {
			failed++
			continue
		}
		if owner != node.Name() {
			if _, ok := s.relinquish(id, false, false, true); ok {
				gone++
			}
		}
	}
	if gone > 0 {
		s.log.Info().Int("sessions", gone).Msg("cluster: kept sessions dropped: their clients are on other nodes now")
	}
	if failed > 0 {
		s.log.Warn().Int("sessions", failed).Msg("cluster: kept sessions not claimed yet: the store did not answer; trying again")
	}
	return failed == 0
}
