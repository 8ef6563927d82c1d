package mqttd

import (
	"time"

	"mqttd/packets"
	"mqttd/persistence"
	"mqttd/session"
)

// Wills: a connection that ends without DISCONNECT 0x00 leaves its will
// to be published, at once or, for a 5.0 will with a Will Delay Interval,
// when the interval has passed or the session ends, whichever comes
// first; a connection that takes the session over in the meantime
// cancels it [MQTT-3.1.3-9]. A session that another connection took over
// and goes on with never publishes the old connection's will: the client
// is back.

// delayedWill is a will waiting for its Will Delay Interval. A timer each
// is fine: only clients that went away abnormally with a delay have one,
// at most one per session; none when the session ends first.
type delayedWill struct {
	msg   *session.Message
	timer *time.Timer
}

// settleWill decides, once the connection's session was released
// (cleanup, after detach), what becomes of its will.
func (c *conn) settleWill() {
	will := c.will
	c.will = nil // the idle wheel may hold the closed connection a while
	s := c.srv
	if will == nil || c.graceful || s.closing.Load() {
		return
	}
	cl := c.cl
	s.mu.Lock()
	cl.mu.Lock()
	ended := cl.dropped || s.clients[cl.id] != cl
	resumed := !ended && cl.conn != nil
	at := cl.sess.ExpireAt()
	cl.mu.Unlock()
	if resumed {
		s.mu.Unlock()
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
			s.dur.oneLocked(persistence.Op{Kind: persistence.OpPutWill, SessionID: cl.id,
				Will: &persistence.Will{Message: *s.dur.stored(will), At: time.Now().Add(delay).UnixNano()}}, nil)
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
func (s *Server) delayWillLocked(cl *client, will *session.Message, delay time.Duration, at int64) {
	dw := &delayedWill{msg: will}
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
		s.dur.oneLocked(persistence.Op{Kind: persistence.OpDeleteWill, SessionID: cl.id}, nil)
	}
	cl.mu.Unlock()
	s.mu.Unlock()
	s.publishWill(dw.msg)
}

// takeWillLocked takes cl's delayed will out, stopping its timer, and
// returns it: the caller publishes it when the session ends (once it
// has released s.mu) or drops it when the client is back. The caller
// holds s.mu.
func (s *Server) takeWillLocked(cl *client) *session.Message {
	dw, ok := s.wills[cl]
	if !ok {
		return nil
	}
	if dw.timer != nil {
		dw.timer.Stop()
	}
	delete(s.wills, cl)
	s.stats.willsDelayed.Add(-1)
	return dw.msg
}

// dropWillsLocked forgets every delayed will at Shutdown: wills are not
// published when the broker, not the client, ends the connection. The
// caller holds s.mu.
func (s *Server) dropWillsLocked() {
	for cl := range s.wills {
		s.takeWillLocked(cl)
	}
}

// publishWill publishes a will; its Message Expiry Interval starts now.
func (s *Server) publishWill(will *session.Message) {
	if will == nil {
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
