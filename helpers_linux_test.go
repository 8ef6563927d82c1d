//go:build linux

package mqttd

import (
	"net"
	"testing"

	"mqttd/listeners"
)

// eventConnFor returns the event state startEvent would give a connection
// on nc, whose descriptor it takes (nc is closed), without registering it
// with a poller: the test wakes its reader. The descriptor is closed when
// the test ends, if the connection did not close it.
func eventConnFor(t *testing.T, nc net.Conn) *eventConn {
	t.Helper()
	fd, _, err := listeners.Detach(nc)
	if err != nil {
		t.Fatal(err)
	}
	ev := new(eventConn)
	ev.Init(fd)
	t.Cleanup(func() { ev.close() })
	return ev
}

// trackConn registers c with s as startConn does, so that its cleanup's
// untrack balances; the test ending finishes c if the test did not.
func trackConn(t *testing.T, s *Server, c *conn) {
	t.Helper()
	s.mu.Lock()
	s.trackLocked(c)
	s.connWG.Add(1)
	s.mu.Unlock()
	s.stats.connections.Add(1)
	t.Cleanup(func() { c.finishEvent(errShutdown) })
}
