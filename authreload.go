package mqttd

import (
	"mqttd/auth/passwd"
	"mqttd/packets"
)

// What a reload of the password files does beyond swapping them in: the
// users they no longer have lose their connections, and entries still
// on $6$ are warned about.

// revokeDeleted ends, after a reload, the connections of users whose
// entry in the password file of their listener is gone or changed (a new
// password): a 5.0 client is told DISCONNECT 0x87 (not authorized), a
// 3.1.1 one is closed. Their wills are then asked about again
// (willRefused) and not published: a revoked credential publishes
// nothing. It returns how many it ended.
func (s *Server) revokeDeleted() int {
	if len(s.authFiles.passwd) == 0 {
		return 0
	}
	s.mu.Lock()
	var gone []*conn
	for _, cl := range s.clients {
		cl.mu.Lock()
		c, stamp := cl.conn, cl.passwdStamp
		cl.mu.Unlock()
		if c == nil || stamp == 0 {
			continue
		}
		if g := s.gates[c.info.Listener]; g != nil && g.passwd != nil && !sameEntry(g.passwd, c.info.Username, stamp) {
			gone = append(gone, c)
		}
	}
	if s.closing.Load() {
		gone = nil // Shutdown closes them all, and waits for no more writers
	}
	// Counted under the registry lock, as Shutdown sets closing under it
	// before it waits for the writers.
	s.writers.Add(len(gone))
	s.mu.Unlock()
	for _, c := range gone {
		s.stats.clientsRevoked.Add(1)
		// Each on its own goroutine: telling a 5.0 client waits for its
		// outbox to drain, up to a second, and one stuck client must not
		// hold up the reload.
		go func() {
			defer s.writers.Done()
			c.sendDisconnectAsync(packets.NotAuthorized)
			c.closeWith(errRevoked)
		}()
	}
	return len(gone)
}

// staleEntry reports whether the password file of c's listener no longer
// has the entry with stamp that let c's user in.
func (c *conn) staleEntry(stamp uint32) bool {
	g := c.srv.gateOf(c.info.Listener)
	return g.passwd != nil && !sameEntry(g.passwd, c.info.Username, stamp)
}

// sameEntry reports whether a's file still has user's entry with stamp:
// any stamp will do when it is unknown (a will restored from the store).
func sameEntry(a *passwd.Authenticator, user string, stamp uint32) bool {
	cur, ok := a.Entry(user)
	return ok && (stamp == stampUnknown || cur == stamp)
}

// stampUnknown stands for a password-file login whose entry is not
// known: a session restored from the store keeps no stamp.
const stampUnknown = ^uint32(0)

// warnLegacy warns, at start and after a reload, of the $6$ entries of
// the password file at path: quicker to check than an unknown user
// (which costs what the dearest entry does), so a client timing its
// refusals can tell those names exist, and cheap to crack from a stolen
// file.
func (s *Server) warnLegacy(path string, a *passwd.Authenticator) {
	legacy := a.Legacy()
	if len(legacy) == 0 {
		return
	}
	const most = 10
	s.log.Warn().Str("password_file", path).Int("count", len(legacy)).Strs("users", legacy[:min(len(legacy), most)]).
		Msg("password file has $6$ entries (salted SHA-512, from Mosquitto before 2.0): cheap to crack, and answered " +
			"faster than unknown users, so their names can be told by timing; list them with " +
			"mqttd passwd --upgrade FILE and set each password again")
}
