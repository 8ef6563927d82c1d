package crash

import (
	"errors"
	"fmt"
	"time"

	"mqttd/packets"
)

// errAborted ends a client whose test is over.
var errAborted = errors.New("aborted")

// maxDialAttempts bounds the reconnect loop of one client across a whole
// test; a broker that is down for good ends the client with an error.
const maxDialAttempts = 100000

// dialRetry is how often a client that cannot reach the broker tries again
// when no new address has been announced: a poll interval, not a wait for
// a known event.
const dialRetry = 20 * time.Millisecond

// peer is what the test's publishers and subscribers share: a persistent
// MQTT 3.1.1 identity that reconnects, with clean session 0, to wherever
// the broker listens now, and counts how often the broker forgot its
// session.
type peer struct {
	id       string
	book     *addrBook
	abort    <-chan struct{}
	deadline time.Time

	attempts     int
	connects     int
	sessionsLost int // reconnects after the first answered with session present 0
}

// connect dials until a connection is accepted, the test aborts or the
// deadline passes.
func (p *peer) connect() (*conn, bool, error) {
	for p.attempts < maxDialAttempts {
		p.attempts++
		addr, changed := p.book.get()
		c, present, err := dial(addr, packets.V311, connectPacket(packets.V311, p.id, false))
		if err == nil {
			if p.connects > 0 && !present {
				p.sessionsLost++
			}
			p.connects++
			return c, present, nil
		}
		left := time.Until(p.deadline)
		if left <= 0 {
			return nil, false, fmt.Errorf("%s: no connection before the deadline: %w", p.id, err)
		}
		retry := time.NewTimer(min(dialRetry, left))
		select {
		case <-p.abort:
			retry.Stop()
			return nil, false, errAborted
		case <-changed:
		case <-retry.C:
		}
		retry.Stop()
	}
	return nil, false, fmt.Errorf("%s: gave up after %d connection attempts", p.id, p.attempts)
}
