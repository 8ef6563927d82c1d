package mqttd

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"mqttd/packets"
	"mqttd/session"
)

// The inline client API: programs that embed mqttd, $SYS and bridges
// publish and subscribe through the same routing as a network client,
// without a connection.

// Message is a message delivered to an inline subscriber. Its fields are
// shared with every other subscriber and must not be modified.
type Message struct {
	Topic   string
	Payload []byte
	QoS     byte // as published
	Retain  bool // true for a retained message sent on Subscribe
	// Properties are the publisher's 5.0 properties with the remaining
	// message expiry; nil when there are none.
	Properties *packets.Properties
	// PublishedRetain is the retain flag its publisher set (Retain is how it
	// comes here: set only for a retained message sent on Subscribe).
	PublishedRetain bool
	// From is the client id of the client that published it (a will's
	// client for a will); empty for what the broker or Publish published.
	From string
}

// Handler receives the messages of an inline subscription. It runs on the
// goroutine of whoever published (a client's reader, or a caller of
// Publish), so it must return quickly and must not block; it may keep the
// Message. A handler that needs to do slow work queues the message to a
// goroutine of its own.
type Handler func(Message)

// inlineOrigin is the publisher id of messages published inline, as No
// Local sees it, and the prefix of inline subscribers' ids.
const inlineOrigin = "$inline"

// inlineIDs numbers inline subscribers, each a client of its own.
var inlineIDs atomic.Uint64

// Publish routes a message as if a client had published it: to every
// matching subscription, and into the retained store when retain is set
// (an empty payload clears it). topic must be a topic name, without
// wildcards; qos is 0, 1 or 2; props, which may be nil, are the 5.0
// properties forwarded to subscribers (a topic alias or subscription
// identifier in them is ignored). topic, payload and props are copied.
// While the broker publishes its $SYS tree (Options.SysInterval), a
// retained message under $SYS/broker/ is refused: it would take the place
// of the broker's own value.
func (s *Server) Publish(topic string, payload []byte, qos byte, retain bool, props *packets.Properties) error {
	if s.closing.Load() {
		return ErrServerClosed
	}
	if qos > maxQoS {
		return fmt.Errorf("mqttd: QoS %d", qos)
	}
	if err := s.topics.ValidTopicName(topic); err != nil {
		return fmt.Errorf("mqttd: %w", err)
	}
	if retain && s.sys.on() && strings.HasPrefix(topic, sysPrefix) {
		return fmt.Errorf("mqttd: %s is the broker's $SYS tree: a message retained there would replace its values", topic)
	}
	var p packets.Properties
	if props != nil {
		p = props.Clone()
		p.Present &^= 1<<packets.PropTopicAlias | 1<<packets.PropSubscriptionID
		p.SubscriptionIDs = nil
	}
	s.publish(newMessage(strings.Clone(topic), bytes.Clone(payload), qos, retain, &p, inlineOrigin), nil)
	return nil
}

// Subscribe calls h for every message published to a topic matching
// filter, from any client or from Publish, starting with the retained
// messages that match it. A filter of the form $share/{group}/{filter}
// joins a share group, in which each message goes to one member. The
// returned function ends the subscription.
func (s *Server) Subscribe(filter string, h Handler) (unsubscribe func(), err error) {
	if h == nil {
		return nil, errors.New("mqttd: Subscribe with a nil handler")
	}
	if s.closing.Load() {
		return nil, ErrServerClosed
	}
	f, err := s.topics.ParseFilter(filter)
	if err != nil {
		return nil, fmt.Errorf("mqttd: %w", err)
	}
	filter = strings.Clone(filter) // the trie keeps it
	cl := &client{id: fmt.Sprintf("%s/%d", inlineOrigin, inlineIDs.Add(1)), handler: h}
	if _, err := s.addSubscription(filter, cl, subOpts{qos: maxQoS}); err != nil {
		return nil, fmt.Errorf("mqttd: %w", err)
	}
	s.stats.subscriptions.Add(1)
	if f.Group == "" {
		now := time.Now()
		for _, it := range s.retain.Match(f.Topic, nil) {
			if !it.Value.Expired(now) {
				deliverInline(h, it.Value, true)
			}
		}
	}
	if wakesSys(f.Topic) {
		s.sys.wakeUp()
	}
	var once atomic.Bool
	return func() {
		if once.CompareAndSwap(false, true) && s.removeSubscription(filter, cl) {
			s.stats.subscriptions.Add(-1)
		}
	}, nil
}

// deliverInline hands one message to an inline subscriber.
func deliverInline(h Handler, m *session.Message, retain bool) {
	msg := Message{Topic: m.Topic, Payload: m.Payload, QoS: m.QoS, Retain: retain, PublishedRetain: m.Retain, From: m.Origin}
	if msg.From == inlineOrigin {
		msg.From = ""
	}
	if m.Properties != nil || m.Expiry != 0 {
		p := forwardProperties(m, nil)
		msg.Properties = &p
	}
	h(msg)
}
