package mqttd

import (
	"slices"
	"sync"
	"time"

	"mqttd/auth"
	"mqttd/packets"
	"mqttd/persistence"
	"mqttd/session"
	"mqttd/topictrie"
)

// Routing: a published message matched against the subscription trie,
// and one copy handed to each client it reaches (deliver.go), subject to
// its ACL and options.

// subOpts is what the trie keeps per subscription.
type subOpts struct {
	qos            byte
	noLocal        bool
	retainAsPub    bool
	retainHandling byte
	id             uint32
}

// options are the subscription options the trie's entry stands for, as
// the store keeps them.
func (o subOpts) options() packets.SubOptions {
	return packets.SubOptions{QoS: o.qos, NoLocal: o.noLocal, RetainAsPublished: o.retainAsPub, RetainHandling: o.retainHandling}
}

// subOptsOf is the trie's entry for a stored subscription.
func subOptsOf(sub persistence.Subscription) subOpts {
	o := sub.Options
	return subOpts{qos: min(o.QoS, maxQoS), noLocal: o.NoLocal, retainAsPub: o.RetainAsPublished, retainHandling: o.RetainHandling, id: sub.ID}
}

// router is the scratch one publish needs. It is pooled rather than kept
// per connection, so idle connections do not carry it.
type router struct {
	matches []topictrie.Sub[*client, subOpts]
	// srv, topic and gen say what matches holds, when matched says it may
	// be used again: the subscriptions of topic as srv's trie had them at
	// its Generation gen, none of them shared. Routers are pooled for
	// every Server in the process, and each trie counts its own
	// generations. A publisher sends its topic again and again, and the
	// trie's match (its read lock, its walk) showed in qos1's profile.
	srv     *Server
	topic   []byte
	gen     uint64
	matched bool
	alt     [1]topictrie.Sub[*client, subOpts] // another share group member
	// remote marks a message another node of the cluster routed, which
	// this node's bridges leave to that node's (cluster.go).
	remote bool
	enc    encoded
	now    time.Time // read once per message, and only when needed
	// msg is the message routed when nothing need keep it past its
	// routing (publishTransient): it costs an allocation only when
	// something keeps it (encoded.kept).
	msg session.Message
	// noShares leaves the share groups out: they get the message through
	// the cluster (cluster_share.go). plain says matches were matched so.
	noShares, plain bool
	// stamp is the message's across a cluster's nodes, zero when it has
	// none (cluster_qos2.go): each session it reaches remembers it.
	stamp persistence.Stamp
}

// clock returns the time the message is being routed at. Reading the
// clock for every message showed in fan-in's profile, and QoS 0
// deliveries to online clients never need it.
func (r *router) clock() time.Time {
	if r.now.IsZero() {
		r.now = time.Now()
	}
	return r.now
}

var routerPool = sync.Pool{New: func() any { return new(router) }}

// publish routes m to every matching subscription, updates the retained
// store and sends m to the other nodes of a cluster (cluster.go), and
// reports how many clients it was delivered to (or dropped for), for the
// 5.0 "no matching subscribers" code. It runs on the publisher's
// goroutine; matches are collected under the trie's read lock, which is
// released before any session lock is taken. owner is the connection
// whose reader publishes m, which acknowledges it once what it changed is
// stored; nil for the broker's own messages.
func (s *Server) publish(m *session.Message, owner *conn) (clients int) {
	s.stats.messagesReceived.Add(1)
	if s.busy.on.Load() {
		s.busy.count(m.Topic)
	}
	if m.Retain {
		s.storeRetained(m, owner)
	}
	if s.cluster == nil {
		return s.route(m, owner)
	}
	r := routerPool.Get().(*router)
	clients = s.routeClustered(r, m, owner)
	routerPool.Put(r)
	return clients
}

// publishTransient publishes a QoS 0 message that is not retained and
// carries no properties, as publish does, without building it on the
// heap: most such messages are only encoded into outboxes. topic and
// payload need only stay unchanged until it returns (they may be in the
// read buffer): whatever keeps the message keeps a copy (encoded.kept).
func (s *Server) publishTransient(topic string, payload []byte, origin string, owner *conn) (clients int) {
	s.stats.messagesReceived.Add(1)
	if s.busy.on.Load() {
		s.busy.count(topic)
	}
	r := routerPool.Get().(*router)
	m := &r.msg
	m.Topic, m.Payload, m.Origin = topic, payload, origin
	if s.cluster != nil {
		clients = s.routeClustered(r, m, owner)
	} else {
		clients = s.routeWith(r, m, owner)
	}
	m.Topic, m.Payload, m.Origin = "", nil, ""
	routerPool.Put(r)
	return clients
}

// route is publish without counting m as received or retaining it: the
// broker's $SYS values (sys.go) are neither.
func (s *Server) route(m *session.Message, owner *conn) (clients int) {
	r := routerPool.Get().(*router)
	clients = s.routeWith(r, m, owner)
	routerPool.Put(r)
	return clients
}

// routeWith routes m with r's scratch; m is borrowed when it is r.msg.
func (s *Server) routeWith(r *router, m *session.Message, owner *conn) (clients int) {
	s.matchInto(r, m.Topic)
	r.enc.reset(m, owner)
	r.enc.borrowed = m == &r.msg
	if !r.stamp.IsZero() {
		r.enc.stamped(r.stamp)
	}
	r.now = time.Time{}
	topictrie.ForEachDelivery(r.matches, func(run []topictrie.Sub[*client, subOpts]) {
		if s.deliverRun(r, m, run) {
			clients++
		}
	})
	if !r.matched {
		clear(r.matches) // drop references to clients that may leave
	}
	clear(r.alt[:])
	r.enc.reset(nil, nil)
	return clients
}

// matchInto leaves in r.matches the subscriptions topic matches: those
// of the last topic matched with r when it is the same, on s, and s's
// trie has not changed since, else the trie's. A result with a shared
// subscription is not kept, nor one for a topic longer than maxKeptTopic.
// With r.noShares the share groups are not matched (nor their choice
// moved on), and a result matched so serves only such a match.
// What a kept result holds (clients, s) stays reachable from r until a
// match that cannot use it, or until the pool drops r.
func (s *Server) matchInto(r *router, topic string) {
	gen := s.subs.Generation() // before the match: a change after it is seen next time
	if r.matched && r.srv == s && r.gen == gen && string(r.topic) == topic && (r.noShares || !r.plain) {
		return
	}
	if r.matched {
		clear(r.matches) // kept since the last match, which may return fewer
	}
	if r.plain = r.noShares; r.plain {
		r.matches = s.subs.MatchPlain(topic, r.matches[:0])
	} else {
		r.matches = s.subs.Match(topic, r.matches[:0])
	}
	r.matched = len(topic) <= maxKeptTopic && !slices.ContainsFunc(r.matches,
		func(sub topictrie.Sub[*client, subOpts]) bool { return sub.Group != "" })
	r.srv, r.topic, r.gen = nil, r.topic[:0], gen
	if r.matched {
		r.srv, r.topic = s, append(r.topic, topic...)
	}
}

// maxKeptTopic bounds the topic a router keeps its matches for, and so
// the buffer it keeps the topic in.
const maxKeptTopic = 256

// deliverRun delivers one copy to the client of run, every matching
// subscription of that client: at the highest QoS [MQTT-3.3.4-2], with
// every subscription identifier [MQTT-3.3.4-4]. It reports whether any
// subscription was for m (No Local leaves some out).
func (s *Server) deliverRun(r *router, m *session.Message, run []topictrie.Sub[*client, subOpts]) bool {
	if s.readCheck && run[0].Group != "" && !s.readable(run[0].Key, m) {
		// The member picked may not read it: another of the group takes it.
		sub := run[0]
		alt, ok := s.subs.ShareMember(sub.Group, sub.Filter, topictrie.Message{Topic: m.Topic},
			func(k *client) bool { return !s.readable(k, m) })
		if !ok {
			s.stats.readDenied.Add(1)
			return false
		}
		r.alt[0] = alt
		run = r.alt[:]
	}
	target := run[0].Key
	if r.remote && target.bridge.Load() != nil {
		return false
	}
	var qos byte
	var retain, matched bool
	var ids []uint32
	for _, sub := range run {
		o := sub.Value
		if o.noLocal && target.id == m.Origin {
			continue // [MQTT-3.8.3-3]
		}
		matched = true
		qos = max(qos, min(o.qos, m.QoS))
		retain = retain || (o.retainAsPub && m.Retain)
		if o.id != 0 {
			ids = append(ids, o.id)
		}
	}
	if matched {
		s.deliver(target, m, qos, retain, ids, &r.enc, r.clock)
	}
	return matched
}

// readable is mayRead without counting a denial: for choosing among the
// members of a share group.
func (s *Server) readable(cl *client, m *session.Message) bool {
	return s.readableAs(cl, m, m.QoS, m.Retain)
}

// mayRead asks the Authorizer whether cl may receive m (auth.Read):
// whatever filter granted the subscription, and whether the message is
// routed now, retained, queued or resent, a topic the client may not read
// is not delivered. A denial is counted.
func (s *Server) mayRead(cl *client, m *session.Message, qos byte, retain bool) bool {
	if s.readableAs(cl, m, qos, retain) {
		return true
	}
	s.stats.readDenied.Add(1)
	return false
}

// readableAs is the Authorizer's answer for cl receiving m at qos and
// retain.
func (s *Server) readableAs(cl *client, m *session.Message, qos byte, retain bool) bool {
	who := cl.who.Load()
	return who == nil || s.authz.Authorize(*who, auth.Request{Action: auth.Read, Topic: m.Topic, QoS: qos, Retain: retain})
}
