package mqttd

import (
	"sync"
	"sync/atomic"
	"time"

	"mqttd/auth"
	"mqttd/cluster"
	"mqttd/packets"
	"mqttd/persistence"
	"mqttd/session"
)

// The client registry: one client per client id, holding its session
// across connections; attaching a connection to it (and taking it over
// from an older connection), detaching it, and claiming a
// persistent session in the store.

// client is the broker's record of one client id: its session, which
// outlives connections when it is persistent, and its current connection.
type client struct {
	id string

	// mu is the session lock: sess, conn, clean and dropped.
	mu   sync.Mutex
	sess *session.Session
	conn *conn // nil while offline
	// bridge is the bridge whose session this is (bridge.go); nil for a
	// client's.
	bridge atomic.Pointer[bridgeRun]
	clean  bool // the session ends with the connection
	// dropped is set when the session ended (clean close, or replaced by a
	// clean start): a reader still handling a SUBSCRIBE for it must not
	// put it back into the trie.
	dropped bool
	// moved is set with dropped when the session went to another node of
	// a cluster (cluster_owner.go): its client is back there, and its
	// last connection here leaves no will.
	moved bool
	// stored is set while the session is kept in the store: every change
	// of it is written (durable.go).
	stored bool
	// queued is what the server's queue gauge counts of this session
	// (accountQueueLocked); an int32 beside the bools, so that a client
	// stays in an 80-byte allocation.
	queued int32
	// expiryPos is the client's place in its expiry slot while offline
	// (expiryWheel), guarded by the wheel's lock: a client coming back is
	// taken out without scanning the slot.
	expiryPos int32
	// passwdStamp is the stamp of the password-file entry the latest
	// connection logged in with (passwd.Authenticator.Entry), 0 when it
	// did not use the password file: a reload that deletes or changes the
	// entry ends the connection (revokeDeleted) and refuses its will. In
	// the padding after expiryPos.
	passwdStamp uint32
	// handler is set for an inline subscriber (Server.Subscribe), which
	// has no session or connection.
	handler Handler
	// who is the client as the Authorizer knows it: the info of its
	// latest connection (or, restored, its client id and username),
	// asked about each message delivered to it, online or not. The
	// username is the session's owner's: it never changes.
	who atomic.Pointer[auth.ClientInfo]
}

// SetName is the client's id, its name in Server.clients.
func (cl *client) SetName() string { return cl.id }

// owner is the username the session belongs to.
func (cl *client) owner() string {
	if who := cl.who.Load(); who != nil {
		return who.Username
	}
	return ""
}

// attach binds the connection to its session in one step under the
// registry lock: an older connection with the same client id is marked
// taken over and closed [MQTT-3.1.4-2], and its later cleanup sees it no
// longer owns the session. The CONNACK is queued before the connection
// becomes visible to publishers, so it is the first packet on the wire.
// clean is the CONNECT's Clean Start, or true when it must not resume
// another user's session. It changes nothing and reports attachNoRoom
// when a new session is needed and the broker already holds
// limits.max_sessions, or attachOtherUser when the session is another
// user's and other_user_session is refuse.
func (s *Server) attach(c *conn, cp *packets.Connect, clean bool, stamp uint32) attachResult {
	id := c.info.ClientID
	persistent := c.expiry > 0
	s.mu.Lock()
	old := s.clients.Get(id)
	otherUser := old != nil && old.owner() != c.info.Username
	if otherUser {
		if s.opts.Auth.OtherUserSession != OtherUserReplace {
			s.mu.Unlock()
			return attachOtherUser
		}
		clean = true
	}
	if old == nil && s.clients.Len() >= s.limits().MaxSessions {
		s.mu.Unlock()
		return attachNoRoom
	}
	var oldConn *conn
	if old != nil {
		old.mu.Lock()
		oldConn = old.conn
		old.conn = nil
		old.mu.Unlock()
		if oldConn != nil {
			s.stats.sessionsOnline.Add(-1)
			oldConn.succeeded = !otherUser
		}
	}
	cl, present := old, old != nil
	var dropped []string
	// A will waiting for its delay is dropped: the client is back in time
	// [MQTT-3.1.2-8], whatever its Clean Start (will.go). Only another
	// user replacing the session ends it with its will published.
	var endedWill leftWill
	var dropRef *cluster.WillRef // a will's record dropped with it
	resumedWill := false
	if clean || old == nil || old.clean {
		if old != nil {
			w := s.takeWillLocked(old)
			if otherUser {
				endedWill = w
			} else {
				dropRef = w.ref
			}
			dropped = s.dropSessionLocked(old)
		}
		cl = &client{id: id, sess: session.New(s.sessionLimits(id))}
		s.clients.Put(cl)
		s.stats.sessions.Add(1)
		present = false
	} else {
		back := s.takeWillLocked(old)
		resumedWill = back.msg != nil
		dropRef = back.ref
	}
	s.stats.sessionsOnline.Add(1)
	if c.info.Listener != bridgeListener {
		cl.who.Store(c.info) // not changed after CONNECT; a bridge's is the broker's own: nil, trusted
	}
	cl.mu.Lock()
	if at := cl.sess.ExpireAt(); at != 0 {
		s.expiry.cancel(cl, at) // back in time
		cl.sess.SetExpireAt(0)
	}
	s.storeSessionLocked(c, cl, persistent, resumedWill)
	c.cl = cl
	if c.info.Listener != bridgeListener {
		// The bit is reserved in 3.1, which has no session present.
		c.sendConnack(present && c.version != packets.V31, cp)
	}
	cl.conn, cl.clean, cl.passwdStamp = c, !persistent, stamp
	cl.sess.SetReceiveMaximum(int(cp.Properties.ReceiveMaximum))
	// pump sends the window again, as the outbox has room
	for _, o := range cl.sess.Resume(s.maxSends(c)) {
		s.giveUpLocked(cl, o, c)
	}
	cl.mu.Unlock()
	s.mu.Unlock()
	s.unsubscribeAll(old, dropped)
	s.publishWill(endedWill)
	s.dropWillRecord(dropRef)
	if oldConn != nil {
		s.log.Info().Str("client_id", id).Str("remote", c.info.Remote.String()).Str("old_remote", oldConn.info.Remote.String()).
			Bool("session_kept", present).Msg("session taken over by a new connection")
		// On its own goroutine: telling a 5.0 client may wait for its
		// outbox to drain, and the new client's CONNACK must not wait.
		s.writers.Add(1)
		go func() {
			defer s.writers.Done()
			oldConn.sendDisconnectAsync(packets.SessionTakenOver)
			oldConn.closeWith(errTakenOver)
		}()
	}
	c.pump()
	return attachOK
}

// attachResult is what attach did.
type attachResult uint8

const (
	attachOK        attachResult = iota
	attachNoRoom                 // a new session was needed: limits.max_sessions
	attachOtherUser              // the session is another user's
)

// detach releases the session when its connection ends, unless another
// connection took it over; a clean session ends here.
func (s *Server) detach(c *conn) {
	cl := c.cl
	s.mu.Lock()
	cl.mu.Lock()
	owner := cl.conn == c
	var handed []handoff
	if owner {
		cl.conn = nil
		s.stats.sessionsOnline.Add(-1)
		handed = s.takeSharedLocked(cl)
	}
	clean := cl.clean
	if owner && !clean && s.clients.Get(cl.id) == cl && cl.bridge.Load() == nil {
		at := time.Now().Add(time.Duration(c.expiry) * time.Second).UnixNano()
		cl.sess.SetExpireAt(at)
		cl.sess.SetLeftAt(time.Now().UnixNano())
		s.expiry.schedule(cl, at)
		if cl.stored {
			s.dur.sessionLocked(cl, c, c.expiry, nil)
		}
	}
	cl.mu.Unlock()
	var dropped []string
	ended := owner && clean && s.clients.Get(cl.id) == cl
	if ended {
		s.clients.Remove(cl.id)
		dropped = s.dropSessionLocked(cl)
	}
	s.mu.Unlock()
	s.unsubscribeAll(cl, dropped)
	s.handOffShared(cl, handed)
	if ended {
		s.releaseClientID(cl.id, c)
	}
}

// dropSessionLocked ends a session that left the registry: it is marked
// dropped, so nothing is delivered to it or subscribed for it any more,
// and its queue leaves the gauges. It returns the filters the caller
// removes from the trie with unsubscribeAll once it has released the
// registry lock: a client with 40,000 subscriptions must not hold up
// every CONNECT meanwhile. The caller holds the registry lock.
func (s *Server) dropSessionLocked(cl *client) []string {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.dropped = true
	if at := cl.sess.ExpireAt(); at != 0 {
		s.expiry.cancel(cl, at) // nothing may keep the dropped session
		cl.sess.SetExpireAt(0)
	}
	if cl.stored {
		cl.stored = false
		if js := s.replicated(); js != nil && cl.moved {
			// Another node holds it now and writes it in the replicated
			// store: this node lets go of it once what it wrote is there,
			// and deletes nothing.
			id := cl.id
			s.dur.commit.AddThen(&persistence.Batch{}, nil, func() { js.Forget(id) })
		} else {
			s.dur.oneLocked(persistence.DeleteSession(cl.id), nil)
		}
	}
	var filters []string
	cl.sess.Subscriptions(func(sub session.Subscription) { filters = append(filters, sub.Filter) })
	cl.sess.Clear(&s.queueBudget)
	s.stats.queued.Add(-int64(cl.queued))
	cl.queued = 0
	s.stats.sessions.Add(-1)
	return filters
}

// unsubscribeAll removes a dropped session's filters from the trie.
func (s *Server) unsubscribeAll(cl *client, filters []string) {
	for _, f := range filters {
		if s.removeSubscription(f, cl) {
			s.stats.subscriptions.Add(-1)
		}
	}
}

// accountQueueLocked brings the queued-messages gauge in line with the
// session's queue after it changed; the bytes are counted by the queue
// budget itself. The caller holds cl.mu.
func (s *Server) accountQueueLocked(cl *client) {
	n := int32(cl.sess.Queued())
	s.stats.queued.Add(int64(n - cl.queued))
	cl.queued = n
}

// claimSession decides whether c may have the session its client id
// names: not another username's when other_user_session is refuse (ok
// false); a fresh one (fresh) for a clean start, or instead of another
// username's under replace. A persistent session that is not resumed has
// its record stored before the CONNACK, so that a crash just after it
// cannot leave the client counting on a session the broker forgot; it is
// added under the registry lock with the decision, so that it reaches the
// store before anything a later claimant of the id (which attach orders
// under the same lock) stores, and a fresh one deletes what the id held
// in the same transaction, so that no crash leaves the newcomer the old
// session's contents.
func (s *Server) claimSession(c *conn, cleanStart bool) (fresh, ok bool) {
	id := c.info.ClientID
	fresh = cleanStart
	s.mu.Lock()
	old := s.clients.Get(id)
	if old != nil && old.owner() != c.info.Username {
		if s.opts.Auth.OtherUserSession != OtherUserReplace {
			s.mu.Unlock()
			return false, false
		}
		fresh = true // never the other user's session
	}
	if s.dur == nil || c.expiry == 0 {
		s.mu.Unlock()
		return fresh, true
	}
	if old != nil && !fresh {
		old.mu.Lock()
		resumed := old.stored
		old.mu.Unlock()
		if resumed {
			s.mu.Unlock()
			return fresh, true
		}
	}
	var ops [2]persistence.Op
	b := persistence.Batch{Ops: ops[:0]}
	if old != nil {
		b.DeleteSession(id)
	}
	b.PutSession(persistence.Session{ID: id, Username: c.info.Username, Version: byte(c.version), Expiry: c.expiry,
		Listener: c.info.Listener})
	t := s.dur.commit.Add(&b, nil)
	s.mu.Unlock()
	done := make(chan struct{})
	s.dur.commit.Wait(t, func() { close(done) })
	<-done
	return fresh, true
}

// forgetNewSession takes out the record claimSession stored for a
// session the broker then had no room for (attach refuses only when there
// was no session of that id).
func (s *Server) forgetNewSession(c *conn) {
	if s.dur == nil || c.expiry == 0 {
		return
	}
	var ops [1]persistence.Op
	b := persistence.Batch{Ops: ops[:0]}
	b.DeleteSession(c.info.ClientID)
	s.dur.add(&b, nil, false)
}
