package mqttd

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"mqttd/packets"
	"mqttd/session"
	"mqttd/topictrie"
)

type retainedItem = topictrie.Item[*session.Message]

// Reviewing dead letters: a person lists the letters kept on $DLQ/
// (deadletter.go), and publishes one again on its original topic, or
// drops it. The letters are read back from the retained store, so those
// kept before a restart, or set aside while dead letters were on and
// since turned off, are listed too.

// ErrNoDeadLetter: no letter kept on the topic, or the topic is not a
// letter's ($DLQ/<reason>/<topic>).
var ErrNoDeadLetter = errors.New("mqttd: no dead letter on that topic")

// DeadLetterState is one letter kept, as DeadLetters reports it.
type DeadLetterState struct {
	// Topic is the letter's: $DLQ/<reason>/<original topic>.
	Topic string `json:"topic"`
	// Reason is why the message was set aside: expired, queue_full,
	// too_large, delivery_limit or no_subscribers.
	Reason string `json:"reason"`
	// OriginalTopic is the topic the message was published to.
	OriginalTopic string `json:"original_topic"`
	// ClientID is the client the message was given up on for (its
	// publisher, for no_subscribers).
	ClientID string `json:"client_id"`
	// Time is when it was set aside; zero when the letter does not say.
	Time time.Time `json:"time,omitzero"`
	// Deliveries is how many times it had been sent to that client.
	Deliveries int `json:"deliveries"`
	// QoS is the message's QoS when the letter says it (envelope json),
	// else the letter's own, 1.
	QoS byte `json:"qos"`
	// PayloadSize is the length of the original payload; Payload its
	// start, when DeadLetters was asked for it.
	PayloadSize int    `json:"payload_size"`
	Payload     []byte `json:"payload,omitempty"`
}

// DeadLetters returns the letters kept whose topics sort after after, at
// most limit of them (every one when limit is 0 or less), in the order
// of their topics, and the topic to give as after for the next page (""
// after the last). payloadMax above 0 copies up to that many bytes of
// each original payload into Payload.
func (s *Server) DeadLetters(after string, limit, payloadMax int) (page []DeadLetterState, next string) {
	items := s.retain.Match(dlqPrefix+"#", nil)
	items = slices.DeleteFunc(items, func(it retainedItem) bool { return it.Topic <= after })
	items, next = firstPage(items, limit, func(it retainedItem) string { return it.Topic })
	page = make([]DeadLetterState, 0, len(items))
	for _, it := range items {
		l, ok := readLetter(it.Topic, it.Value)
		if !ok {
			continue
		}
		st := l.state
		st.PayloadSize = len(l.payload)
		if payloadMax > 0 {
			st.Payload = slices.Clone(l.payload[:min(len(l.payload), payloadMax)])
		}
		page = append(page, st)
	}
	return page, next
}

// keptLetter is a letter read back: what it says, and the original
// message's payload and properties (the dlq-* user properties left out).
type keptLetter struct {
	state   DeadLetterState
	payload []byte
	props   *packets.Properties
}

// readLetter reads the letter m retained on topic, in either envelope;
// ok is false when topic is not a letter's.
func readLetter(topic string, m *session.Message) (l keptLetter, ok bool) {
	rest, ok := strings.CutPrefix(topic, dlqPrefix)
	if !ok {
		return l, false
	}
	reason, orig, ok := strings.Cut(rest, "/")
	if !ok || len(m.Payload) == 0 {
		return l, false
	}
	l.state = DeadLetterState{Topic: topic, Reason: reason, OriginalTopic: orig, QoS: 1}
	var e jsonLetter
	if m.Properties == nil || !hasLetterProperties(m.Properties) {
		if json.Unmarshal(m.Payload, &e) == nil && e.Topic != "" {
			l.state.ClientID, l.state.Deliveries, l.state.QoS = e.ClientID, e.Deliveries, max(e.QoS, 1)
			l.state.Time, _ = time.Parse(time.RFC3339Nano, e.Time)
			l.payload = e.PayloadBase64
			if e.Payload != "" {
				l.payload = []byte(e.Payload)
			}
			return l, true
		}
		l.payload = m.Payload
		return l, true
	}
	p := m.Properties.Clone()
	p.User = slices.DeleteFunc(p.User, func(u packets.UserProperty) bool {
		switch u.Key {
		case "dlq-client-id":
			l.state.ClientID = u.Value
		case "dlq-time":
			l.state.Time, _ = time.Parse(time.RFC3339Nano, u.Value)
		case "dlq-deliveries":
			l.state.Deliveries, _ = strconv.Atoi(u.Value)
		}
		return strings.HasPrefix(u.Key, "dlq-")
	})
	if len(p.User) == 0 {
		p.Present &^= 1 << packets.PropUserProperty
	}
	l.payload, l.props = m.Payload, &p
	return l, true
}

// hasLetterProperties reports whether p carries a letter's user
// properties (envelope properties).
func hasLetterProperties(p *packets.Properties) bool {
	return slices.ContainsFunc(p.User, func(u packets.UserProperty) bool { return u.Key == "dlq-reason" })
}

// RepublishDeadLetter publishes the letter kept on topic again, on its
// original topic, with its original payload and properties (the dlq-*
// user properties left out), not retained, at QoS 1 (or the QoS a JSON
// letter names), then clears the letter. It returns ErrNoDeadLetter when
// no letter is kept there. A message that fails again is set aside
// again.
func (s *Server) RepublishDeadLetter(topic string) error {
	m, ok := s.letterAt(topic)
	if !ok {
		return fmt.Errorf("%w: %q", ErrNoDeadLetter, topic)
	}
	l, _ := readLetter(topic, m)
	// Cleared first: the message failing again sets a new letter on the
	// same topic, which clearing after would take away.
	if err := s.DropDeadLetter(topic); err != nil {
		return err
	}
	if err := s.Publish(l.state.OriginalTopic, l.payload, l.state.QoS, false, l.props); err != nil {
		// Put back, as it was: nothing is lost for a failed try.
		if err2 := s.Publish(topic, m.Payload, 1, true, m.Properties); err2 == nil {
			s.dlq.keep(topic, int64(len(topic)+len(m.Payload)))
		}
		return err
	}
	return nil
}

// DropDeadLetter clears the letter kept on topic ($DLQ/<reason>/<topic>),
// or returns ErrNoDeadLetter when there is none.
func (s *Server) DropDeadLetter(topic string) error {
	if _, ok := s.letterAt(topic); !ok {
		return fmt.Errorf("%w: %q", ErrNoDeadLetter, topic)
	}
	return s.DeleteRetained(topic)
}

// letterAt is the letter retained on topic.
func (s *Server) letterAt(topic string) (*session.Message, bool) {
	if !strings.HasPrefix(topic, dlqPrefix) {
		return nil, false
	}
	m, ok := s.retain.Get(topic)
	if !ok || len(m.Payload) == 0 {
		return nil, false
	}
	_, ok = readLetter(topic, m)
	return m, ok
}

// DeadLettersKept counts the letters kept, by reason.
func (s *Server) DeadLettersKept() map[string]int {
	kept := make(map[string]int, numLetterReasons)
	for _, it := range s.retain.Match(dlqPrefix+"#", nil) {
		if reason, _, ok := strings.Cut(strings.TrimPrefix(it.Topic, dlqPrefix), "/"); ok {
			kept[reason]++
		}
	}
	return kept
}

// forget takes a letter cleared by an operator out of the letters kept,
// so that it no longer counts against their bounds.
func (d *deadLetters) forget(topic string) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.kept.forget(topic)
}

// keep records a letter put back on topic.
func (d *deadLetters) keep(topic string, size int64) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.kept.room(topic, size, 0, 0)
}

// forget takes topic out of the letters kept, if it is there.
func (k *keptLetters) forget(topic string) {
	size, ok := k.size[topic]
	if !ok {
		return
	}
	k.bytes -= size
	delete(k.size, topic)
	if i := slices.Index(k.order, topic); i >= 0 {
		k.order = slices.Delete(k.order, i, i+1)
	}
}
