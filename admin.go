package mqttd

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"mqttd/packets"
)

// Acting on the broker from outside: an operator (cmd/mqttd's HTTP API,
// or an embedder) ends a connection or a session, or clears a retained
// message. Each action looks its target up under the registry lock,
// releases it, and does what takes time (telling a client, routing) with
// no lock held (LOCKING.md). In a cluster, an action on a client id this
// node holds no session of goes to the node that owns it (elsewhere).

// Errors of the actions, which callers tell apart with errors.Is.
var (
	// ErrNoSession: the broker holds no session for the client id.
	ErrNoSession = errors.New("mqttd: no session with that client id")
	// ErrNotConnected: the session has no connection to end.
	ErrNotConnected = errors.New("mqttd: the client is not connected")
	// ErrSessionOnline: the session has a connection; end it first.
	ErrSessionOnline = errors.New("mqttd: the session is online")
	// ErrNoRetained: no retained message on the topic.
	ErrNoRetained = errors.New("mqttd: no retained message on that topic")
	// ErrBrokerTopic: the topic is one of the broker's own values.
	ErrBrokerTopic = errors.New("mqttd: the topic is the broker's own")
)

// disconnectWait bounds how long Disconnect waits for the connection it
// closed to let go of its session.
const disconnectWait = 2 * time.Second

// Disconnect ends the connection of clientID's client: a 5.0 client is
// sent DISCONNECT 0x98 (Administrative action), a 3.x one is closed. Its
// will is published, as for any connection the client did not end with
// a DISCONNECT of its own. A persistent session stays, for the client to
// resume, unless discardSession: the session then ends as a clean one
// would, its records taken out of the store and its will (delayed or not)
// published now. With discardSession an offline session is ended too,
// as DeleteSession does.
//
// It returns once the session is released (at most a couple of seconds
// for a client that does not read), ErrNoSession for an unknown id and
// ErrNotConnected for an offline session without discardSession. In a
// cluster the client may be another node's.
func (s *Server) Disconnect(clientID string, discardSession bool) error {
	action := adminKick
	if discardSession {
		action = adminKickDiscard
	}
	return s.elsewhere(clientID, action, s.disconnectHere(clientID, discardSession))
}

// disconnectHere is Disconnect of this node's client.
func (s *Server) disconnectHere(clientID string, discardSession bool) error {
	s.mu.Lock()
	cl := s.clients.Get(clientID)
	if cl == nil || cl.handler != nil {
		s.mu.Unlock()
		return fmt.Errorf("%w: %q", ErrNoSession, clientID)
	}
	cl.mu.Lock()
	c := cl.conn
	if c != nil && discardSession {
		// detach then ends the session as it ends a clean one; a CONNECT
		// taking it over meanwhile finds it clean and starts afresh.
		cl.clean = true
	}
	cl.mu.Unlock()
	if c == nil {
		s.mu.Unlock()
		if discardSession {
			return s.deleteSessionHere(clientID)
		}
		return fmt.Errorf("%w: %q", ErrNotConnected, clientID)
	}
	if s.closing.Load() {
		s.mu.Unlock()
		return ErrServerClosed
	}
	// Counted under the registry lock, as Shutdown sets closing under it
	// before it waits for the writers.
	s.writers.Add(1)
	s.mu.Unlock()
	s.ends.Waiters.Add(1)
	defer s.ends.Waiters.Add(-1)
	func() {
		defer s.writers.Done()
		c.sendDisconnectAsync(packets.AdministrativeAction)
		c.closeWith(errAdministrative)
	}()
	timer := time.NewTimer(disconnectWait)
	defer timer.Stop()
	for {
		ended := s.ends.Wait() // before looking: an end after the look closes it
		if s.connOf(clientID) != c {
			return nil
		}
		select {
		case <-ended:
		case <-timer.C:
			return nil // closed; its reader releases the session when it can
		}
	}
}

// DeleteSession ends clientID's offline session: its queue, its
// subscriptions and its records in the store go, and a will waiting for
// its delay is published, as when a session expires. It returns
// ErrNoSession for an unknown id and ErrSessionOnline while a connection
// has the session (Disconnect ends both). In a cluster the session may be
// another node's.
func (s *Server) DeleteSession(clientID string) error {
	return s.elsewhere(clientID, adminDelete, s.deleteSessionHere(clientID))
}

// deleteSessionHere is DeleteSession of this node's session.
func (s *Server) deleteSessionHere(clientID string) error {
	s.mu.Lock()
	cl := s.clients.Get(clientID)
	if cl == nil || cl.handler != nil {
		s.mu.Unlock()
		return fmt.Errorf("%w: %q", ErrNoSession, clientID)
	}
	cl.mu.Lock()
	online := cl.conn != nil
	cl.mu.Unlock()
	if online {
		s.mu.Unlock()
		return fmt.Errorf("%w: %q", ErrSessionOnline, clientID)
	}
	s.clients.Remove(clientID)
	will := s.takeWillLocked(cl)
	dropped := s.dropSessionLocked(cl)
	s.mu.Unlock()
	s.unsubscribeAll(cl, dropped)
	s.publishWill(will)
	s.releaseClientID(clientID, nil)
	return nil
}

// DeleteRetained clears the retained message on topic, as a client
// publishing an empty retained message there would: the store forgets
// it and its subscribers are sent the empty message. A value of the
// broker's $SYS/broker/ tree is refused (ErrBrokerTopic); a topic with
// no retained message is ErrNoRetained. A dead letter ($DLQ/) may be
// cleared this way too (DropDeadLetter).
func (s *Server) DeleteRetained(topic string) error {
	if strings.HasPrefix(topic, sysPrefix) {
		return fmt.Errorf("%w: %s is kept by the broker", ErrBrokerTopic, topic)
	}
	if _, ok := s.retain.Get(topic); !ok {
		return fmt.Errorf("%w: %q", ErrNoRetained, topic)
	}
	if err := s.Publish(topic, nil, 0, true, nil); err != nil {
		return err
	}
	if strings.HasPrefix(topic, dlqPrefix) {
		s.dlq.forget(topic)
	}
	return nil
}
