package mqttd

import "time"

// A client that ends its session (5.0 DISCONNECT with Session Expiry 0),
// closes its socket and connects again at once expects no session: its
// DISCONNECT arrived first. But the old connection's reader and the new
// one's run in any order, and the new CONNECT could take the session over
// before the old reader had read the DISCONNECT (Mosquitto's
// 05-session-expiry-v5 saw session present 1). So a CONNECT whose client
// id is held by a connection its client has closed waits, for at most
// predecessorWait, for that connection to end; one still open is taken
// over at once.

// predecessorWait bounds how long a CONNECT waits for the connection it
// takes over to handle what its client sent before closing it: the old
// reader normally takes microseconds, and only the new client waits.
const predecessorWait = time.Second

// awaitPredecessor waits, when the connection holding c's client id was
// closed by its client, until that connection has ended or
// predecessorWait has passed, outside the bound on readers.
func (c *conn) awaitPredecessor() {
	s := c.srv
	id := c.info.ClientID
	old := s.connOf(id)
	if old == nil || !old.peerClosed() {
		return
	}
	s.stats.takeoverWaits.Add(1)
	s.ends.Waiters.Add(1)
	defer s.ends.Waiters.Add(-1)
	timer := time.NewTimer(predecessorWait)
	defer timer.Stop()
	c.mayBlock(func() {
		for {
			ended := s.ends.Wait() // before looking: an end after the look closes it
			if s.connOf(id) != old {
				return
			}
			select {
			case <-ended:
			case <-timer.C:
				if !s.takeoverWarned.limited() {
					c.fields(s.log.Warn()).Str("client_id", id).Dur("waited", predecessorWait).
						Msg("the connection this CONNECT takes over, closed by its client, did not end in time; taking it over (logged at most every 10 s; mqttd_takeover_waits_total counts the waits)")
				}
				return
			}
		}
	})
}

// connOf is the connection holding the client id's session, if any.
func (s *Server) connOf(id string) *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	cl := s.clients.Get(id)
	if cl == nil {
		return nil
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.conn
}
