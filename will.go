package mqttd

import (
	"time"

	"mqttd/auth"
	"mqttd/cluster"
	"mqttd/packets"
	"mqttd/persistence"
	"mqttd/session"
)

// Wills: a connection that ends without DISCONNECT 0x00 leaves its will
// to be published, at once or, for a 5.0 will with a Will Delay Interval,
// when the interval has passed or the session ends, whichever comes
// first. A new connection of the same user with the client id before
// then cancels it, whatever its Clean Start [MQTT-3.1.2-8], though with
// Clean Start 1 it ends the session (README, What works). A session that
// another connection took over and goes on with never publishes the old
// connection's will: the client is back.

// leftWill is a will with the client that left it, asked about again when
// it is published: a reload may have taken the user out of the password
// file, or the will's topic out of its rules, since the CONNECT.
type leftWill struct {
	msg *session.Message
	who *auth.ClientInfo
	// passwdStamp: the client logged in with the entry of its
	// listener's password file with this stamp, which must still be
	// there unchanged (0: it did not use the password file).
	passwdStamp uint32
	// ref is the will's record in the cluster (cluster_will.go), zero
	// when it has none; clusterOnly marks a will restored from the store
	// in a cluster, published only with its record (keepOwnWill adopts
	// it): without one, the other nodes published it while this one was
	// down.
	ref         *cluster.WillRef
	clusterOnly bool
}

// delayedWill is a will waiting for its Will Delay Interval. A timer each
// is fine: only clients that went away abnormally with a delay have one,
// at most one per session; none when the session ends first.
type delayedWill struct {
	leftWill
	timer *time.Timer
}

// settleWill decides, once the connection's session was released
// (cleanup, after detach), what becomes of its will.
func (c *conn) settleWill() {
	will := leftWill{msg: c.will, who: c.info, ref: c.willRef}
	c.will = nil // the idle wheel may hold the closed connection a while
	s := c.srv
	if will.msg == nil || s.closing.Load() {
		return
	}
	if c.graceful {
		s.dropWillRecord(will.ref)
		return
	}
	cl := c.cl
	s.mu.Lock()
	cl.mu.Lock()
	will.passwdStamp = cl.passwdStamp
	ended := cl.dropped || s.clients.Get(cl.id) != cl
	// Taken over by its user: back before any delay could pass, even in
	// a new session [MQTT-3.1.2-8]; a will without delay is published as
	// the connection closed abnormally.
	resumed := cl.moved || !ended && cl.conn != nil || c.succeeded && c.willDelay > 0
	at := cl.sess.ExpireAt()
	cl.mu.Unlock()
	if resumed {
		s.mu.Unlock()
		s.dropWillRecord(will.ref)
		return
	}
	if ended || c.willDelay == 0 {
		s.mu.Unlock()
		s.publishWill(will)
		return
	}
	delay := time.Duration(c.willDelay) * time.Second
	if s.dur != nil {
		cl.mu.Lock()
		if cl.stored {
			s.dur.oneLocked(persistence.PutWill(cl.id,
				&persistence.Will{Message: *s.dur.stored(will.msg), At: time.Now().Add(delay).UnixNano()}), nil)
		}
		cl.mu.Unlock()
	}
	s.delayWillLocked(cl, will, delay, at)
	s.mu.Unlock()
}

// delayWillLocked files a will to be published after delay, unless the
// session ends first, at at (unix nanos; 0: never): it is then published
// as the session ends (expireSession), and needs no timer. The caller
// holds s.mu.
func (s *Server) delayWillLocked(cl *client, will leftWill, delay time.Duration, at int64) {
	dw := &delayedWill{leftWill: will}
	s.wills[cl] = dw
	s.stats.willsDelayed.Add(1)
	if at == 0 || time.Now().Add(delay).UnixNano() < at {
		dw.timer = time.AfterFunc(delay, func() { s.fireWill(cl, dw) })
	}
}

// fireWill publishes a delayed will whose time has come, unless it was
// taken out meanwhile.
func (s *Server) fireWill(cl *client, dw *delayedWill) {
	s.mu.Lock()
	if s.wills[cl] != dw || s.closing.Load() {
		s.mu.Unlock()
		return
	}
	delete(s.wills, cl)
	s.stats.willsDelayed.Add(-1)
	cl.mu.Lock()
	if cl.stored {
		s.dur.oneLocked(persistence.DeleteWill(cl.id), nil)
	}
	cl.mu.Unlock()
	s.mu.Unlock()
	s.publishWill(dw.leftWill)
}

// takeWillLocked takes cl's delayed will out, stopping its timer, and
// returns it: the caller publishes it when the session ends (once it
// has released s.mu) or drops it when the client is back. The caller
// holds s.mu.
func (s *Server) takeWillLocked(cl *client) leftWill {
	dw, ok := s.wills[cl]
	if !ok {
		return leftWill{}
	}
	if dw.timer != nil {
		dw.timer.Stop()
	}
	delete(s.wills, cl)
	s.stats.willsDelayed.Add(-1)
	return dw.leftWill
}

// dropWillsLocked forgets every delayed will at Shutdown: wills are not
// published when the broker, not the client, ends the connection. The
// caller holds s.mu.
func (s *Server) dropWillsLocked() {
	for cl := range s.wills {
		s.takeWillLocked(cl)
	}
}

// publishWill publishes a will, if the client that left it may still
// publish it; its Message Expiry Interval starts now. A will recorded in
// the cluster is published once its record is taken out.
func (s *Server) publishWill(w leftWill) {
	if w.msg == nil {
		return
	}
	if w.ref != nil {
		s.takeRecordedWill(w)
		return
	}
	if w.clusterOnly {
		return
	}
	s.publishWillNow(w)
}

// publishWillNow is publishWill once the will is this node's to publish.
func (s *Server) publishWillNow(w leftWill) {
	will := w.msg
	if why := s.willRefused(w); why != "" {
		s.stats.willsRefused.Add(1)
		if !s.willWarned.limited() {
			s.log.Info().Str("client_id", will.Origin).Str("username", w.who.Username).Str("topic", will.Topic).
				Msg("will not published: " + why + " (logged at most every 10 s; mqttd_wills_refused_total counts them all)")
		}
		return
	}
	if props := will.Properties; props != nil && props.Has(packets.PropMessageExpiry) {
		will.SetExpiresAt(time.Now().Add(time.Duration(props.MessageExpiry) * time.Second))
	}
	s.stats.willsPublished.Add(1)
	s.log.Info().Str("client_id", will.Origin).Str("topic", will.Topic).Uint8("qos", will.QoS).Bool("retain", will.Retain).
		Msg("will published")
	s.publish(will, nil)
}

// willRefused says why a will may no longer be published, or "" when it
// may: it was authorized at CONNECT, but a reload since may have taken
// the user out of the password file (a revoked credential publishes
// nothing, its will included) or the topic out of the user's rules.
func (s *Server) willRefused(w leftWill) string {
	if w.who == nil {
		return ""
	}
	if w.passwdStamp != 0 {
		if g := s.gateOf(w.who.Listener); g.passwd != nil && !g.identity && !sameEntry(g.passwd, w.who.Username, w.passwdStamp) {
			return "the user's password file entry was deleted or changed"
		}
	}
	m := w.msg
	if isBrokerTopic(m.Topic) || !s.authz.Authorize(*w.who, auth.Request{Action: auth.Will, Topic: m.Topic, QoS: m.QoS, Retain: m.Retain}) {
		return "the rules no longer let the client write the will's topic"
	}
	return ""
}
