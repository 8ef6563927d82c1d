package crash

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"mqttd/packets"
)

// subscriber is a persistent (clean session 0) subscriber that behaves as
// a compliant receiver: QoS 1 messages are handed to the application and
// acknowledged; a QoS 2 message is handed over when its packet id is not
// already awaiting PUBREL, and the id is kept until the PUBREL comes
// (§4.3.3, method B), so a PUBLISH the broker sends again with DUP is not
// delivered twice. That state belongs to the client and survives broker
// restarts, as it would in a real client.
//
// When the broker answers a reconnect with session present 0 it has lost
// the session: the subscriber counts it, drops its QoS 2 state as the
// protocol says [MQTT-3.2.2-4] and subscribes again, as a real client
// would, so that the test goes on measuring what else is lost.
type subscriber struct {
	peer
	filter string

	// awaiting maps the QoS 2 packet ids awaiting PUBREL to their
	// payloads; it is the goroutine's own.
	awaiting map[uint16]string
	err      error // valid once run has returned

	mu        sync.Mutex
	got       map[string]int // deliveries to the application, by payload
	gotQoS    map[string]byte
	received  int       // PUBLISH packets received, DUP ones included
	lastAt    time.Time // when the last PUBLISH arrived
	protoErrs []string
	// history tells, per QoS 2 payload, what happened to it on the wire,
	// for the message of a test that finds it delivered twice.
	history map[string][]string
}

func newSubscriber(p peer, filter string) *subscriber {
	return &subscriber{
		peer: p, filter: filter,
		awaiting: map[uint16]string{}, got: map[string]int{}, gotQoS: map[string]byte{},
		history: map[string][]string{},
	}
}

// join connects for the first time and subscribes at QoS 2; it returns the
// connection for run.
func (s *subscriber) join() (*conn, error) {
	c, _, err := s.connect()
	if err != nil {
		return nil, err
	}
	if err := c.subscribe(1, s.filter, 2); err != nil {
		c.close(false)
		return nil, err
	}
	return c, nil
}

// run receives until aborted, reconnecting after every broker restart;
// c is the connection join made, or nil to connect first.
func (s *subscriber) run(c *conn) {
	for {
		if c == nil {
			var present bool
			var err error
			c, present, err = s.connect()
			if err != nil {
				if !errors.Is(err, errAborted) {
					s.err = err
				}
				return
			}
			if !present {
				clear(s.awaiting)
				if err := c.send(&packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{{Filter: s.filter, Options: packets.SubOptions{QoS: 2}}}}); err != nil {
					c.close(false)
					c = nil
					continue
				}
			}
		}
		err := s.serve(c)
		c.close(false)
		c = nil
		if errors.Is(err, errAborted) {
			return
		}
	}
}

// serve handles one connection until it ends or the test aborts.
func (s *subscriber) serve(c *conn) error {
	for {
		select {
		case pk, ok := <-c.in:
			if !ok {
				return errConnLost
			}
			if err := s.handle(c, pk); err != nil {
				return errConnLost
			}
		case <-s.abort:
			return errAborted
		}
	}
}

// handle answers one packet; an error is a write that failed.
func (s *subscriber) handle(c *conn, pk packets.Packet) error {
	switch p := pk.(type) {
	case *packets.Publish:
		s.mu.Lock()
		s.received++
		s.lastAt = time.Now()
		s.mu.Unlock()
		switch p.QoS {
		case 0:
			s.deliver(p)
		case 1:
			s.deliver(p)
			return c.send(&packets.Puback{PacketID: p.PacketID})
		case 2:
			key, held := s.awaiting[p.PacketID]
			if !held {
				key = string(p.Payload)
				s.awaiting[p.PacketID] = key
				s.deliver(p)
				s.note(key, "id %d%s delivered", p.PacketID, dupMark(p.Dup))
			} else {
				s.note(key, "id %d%s not delivered: awaiting PUBREL", p.PacketID, dupMark(p.Dup))
				if other := string(p.Payload); other != key {
					// The id is still in use for another message, so the
					// broker may not send a new one with it [MQTT-2.2.1-3]; a
					// compliant receiver drops the new message as a
					// duplicate, so the test says why it goes missing.
					s.note(other, "id %d%s not delivered: the id still awaits PUBREL for %s", p.PacketID, dupMark(p.Dup), key)
					s.protoErr("packet id %d reused for %s while %s awaits PUBREL", p.PacketID, other, key)
				}
			}
			return c.send(&packets.Pubrec{PacketID: p.PacketID})
		}
	case *packets.Pubrel:
		if key, held := s.awaiting[p.PacketID]; held {
			s.note(key, "id %d PUBREL, PUBCOMP sent", p.PacketID)
		}
		delete(s.awaiting, p.PacketID)
		return c.send(&packets.Pubcomp{PacketID: p.PacketID})
	case *packets.Suback:
		if len(p.ReasonCodes) != 1 || p.ReasonCodes[0] > 2 {
			s.protoErr("SUBACK %v", p.ReasonCodes)
		}
	default:
		s.protoErr("unexpected %s", pk.Type())
	}
	return nil
}

// deliver hands a message to the "application": it is counted.
func (s *subscriber) deliver(p *packets.Publish) {
	key := string(p.Payload)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got[key]++
	if q, seen := s.gotQoS[key]; seen && q != p.QoS {
		s.protoErrs = append(s.protoErrs, fmt.Sprintf("%s: %s delivered at QoS %d and at QoS %d", s.id, key, q, p.QoS))
	}
	s.gotQoS[key] = p.QoS
}

// note adds one event to a QoS 2 message's history, naming the connection.
func (s *subscriber) note(key, format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.history[key] = append(s.history[key], fmt.Sprintf("conn %d: ", s.connects)+fmt.Sprintf(format, args...))
}

// story is what happened to a QoS 2 message, oldest first.
func (s *subscriber) story(key string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.history[key], "; ")
}

func dupMark(dup bool) string {
	if dup {
		return " (DUP)"
	}
	return ""
}

func (s *subscriber) protoErr(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.protoErrs) < 20 {
		s.protoErrs = append(s.protoErrs, s.id+": "+fmt.Sprintf(format, args...))
	}
}

// progress reports how many PUBLISH packets arrived and when the last did.
func (s *subscriber) progress() (int, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.received, s.lastAt
}

// hasAll reports whether every payload in want was delivered.
func (s *subscriber) hasAll(want []string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range want {
		if s.got[k] == 0 {
			return false
		}
	}
	return true
}

// deliveries returns a copy of what was delivered, by payload.
func (s *subscriber) deliveries() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]int, len(s.got))
	for k, v := range s.got {
		m[k] = v
	}
	return m
}
