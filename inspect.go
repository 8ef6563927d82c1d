package mqttd

import (
	"slices"
	"strings"
	"time"

	"mqttd/packets"
	"mqttd/session"
)

// Looking at the broker from outside: read-only listings of its sessions, their subscriptions and the
// retained topics, for operators (cmd/mqttd serves them over HTTP).
//
// A listing is paged in a stable order (by client id, filter or topic,
// compared as bytes): a page is the items after a cursor, the last item
// of the page before. There is no index kept in that order, as keeping
// one would cost every CONNECT; a page costs instead, per request, one
// pass over all the items (client pointers copied under Server.mu, about
// a millisecond per 100,000 sessions; retained topics walked under the
// retained store's read lock, which holds up only publishers of retained
// messages), a pointer or three of memory per item after the cursor, and
// O(n log limit) comparisons outside any lock. Session locks are taken
// one at a time, only for the items of the page.

// ClientState is one session the broker holds, online or not, as Clients
// reports it.
type ClientState struct {
	ID string `json:"id"`
	// Username is the session's owner: the username its client connected
	// with; "" for an anonymous client.
	Username string `json:"username"`
	// Connected is set while a connection has the session.
	Connected bool `json:"connected"`
	// Remote is the address of the client's connection, or of its last
	// one while offline; "" for a session restored from the store whose
	// client has not come back since.
	Remote string `json:"remote"`
	// Listener is the name of the listener of that connection.
	Listener string `json:"listener"`
	// Protocol is the MQTT version the client last connected with: "3.1",
	// "3.1.1" or "5.0".
	Protocol string `json:"protocol"`
	// KeepAlive is the connection's keepalive in seconds, as granted (0:
	// none); 0 while offline.
	KeepAlive int `json:"keepalive"`
	// Persistent is set when the session outlives its connection (3.1.1
	// clean session 0, 5.0 Session Expiry Interval above 0); a clean
	// session ends with its connection.
	Persistent bool `json:"persistent"`
	// ExpiresAt is when an offline session ends unless its client comes
	// back; zero while connected.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// OfflineSince is when an offline session's client left; zero while
	// connected, or when not known (a session restored from the store).
	OfflineSince time.Time `json:"offline_since,omitzero"`
	// Inflight counts the QoS 1/2 messages sent to the client and not
	// yet acknowledged.
	Inflight int `json:"inflight"`
	// Queued counts the messages waiting for room in that window, or for
	// the client to come back; QueuedBytes is their topic, payload and
	// properties bytes.
	Queued      int `json:"queued"`
	QueuedBytes int `json:"queued_bytes"`
	// Subscriptions counts the session's subscriptions.
	Subscriptions int `json:"subscriptions"`
	// BytesIn and BytesOut are the bytes read from and written to the
	// client's connection since it connected; absent while offline.
	BytesIn  uint64 `json:"bytes_in,omitempty"`
	BytesOut uint64 `json:"bytes_out,omitempty"`
	// Node is the cluster node that holds the session, in a listing
	// across the cluster (ClusterClients); "" otherwise.
	Node string `json:"node,omitempty"`
}

// SubscriptionState is one subscription of a session, as Subscriptions
// reports it.
type SubscriptionState struct {
	// Filter is the topic filter as subscribed, with its $share/group/
	// prefix for a shared subscription.
	Filter string `json:"filter"`
	// QoS is the maximum QoS granted.
	QoS byte `json:"qos"`
	// NoLocal, RetainAsPublished and RetainHandling are the 5.0
	// subscription options (false, false and 0 for 3.x clients).
	NoLocal           bool `json:"no_local"`
	RetainAsPublished bool `json:"retain_as_published"`
	RetainHandling    byte `json:"retain_handling"`
	// ID is the 5.0 Subscription Identifier; 0 when none.
	ID uint32 `json:"subscription_id,omitempty"`
}

// RetainedState is one retained message, as RetainedTopics reports it.
type RetainedState struct {
	Topic string `json:"topic"`
	// QoS is the QoS it was published with.
	QoS byte `json:"qos"`
	// PayloadSize is the length of its payload in bytes.
	PayloadSize int `json:"payload_size"`
	// Payload is the start of the payload, when RetainedTopics was asked
	// for it: at most its payloadMax bytes.
	Payload []byte `json:"payload,omitempty"`
	// ExpiresAt is when a 5.0 message's Message Expiry Interval ends;
	// zero when it never expires.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// Clients returns the sessions whose client ids sort after after, at
// most limit of them (every one when limit is 0 or less), in the order
// of their ids, and next: the id to give as after for the next page, or
// "" when this page is the last. Sessions that start or end meanwhile may
// or may not be listed; the others are listed exactly once across pages.
func (s *Server) Clients(after string, limit int) (page []ClientState, next string) {
	return s.ClientsWhere(after, limit, ClientFilter{})
}

// ClientFilter narrows a listing of sessions (ClientsWhere).
type ClientFilter struct {
	// Search keeps the sessions whose client id or username contains it.
	Search string
	// Offline keeps the sessions without a connection.
	Offline bool
}

// ClientsWhere is Clients listing only the sessions f keeps. Filtering
// on Offline takes each session's lock in turn, as a page's items do.
func (s *Server) ClientsWhere(after string, limit int, f ClientFilter) (page []ClientState, next string) {
	cls := s.clientsAfter(after)
	if f.Search != "" || f.Offline {
		cls = slices.DeleteFunc(cls, func(cl *client) bool { return !f.keeps(cl) })
	}
	cls, next = firstPage(cls, limit, func(cl *client) string { return cl.id })
	page = make([]ClientState, 0, len(cls))
	for _, cl := range cls {
		if st, ok := clientState(cl); ok {
			page = append(page, st)
		}
	}
	return page, next
}

func (f ClientFilter) keeps(cl *client) bool {
	if f.Search != "" && !strings.Contains(cl.id, f.Search) && !strings.Contains(cl.owner(), f.Search) {
		return false
	}
	if f.Offline {
		cl.mu.Lock()
		online := cl.conn != nil
		cl.mu.Unlock()
		return !online
	}
	return true
}

// Client returns the session of clientID; ok is false when the broker
// holds none.
func (s *Server) Client(clientID string) (st ClientState, ok bool) {
	s.mu.Lock()
	cl := s.clients.Get(clientID)
	s.mu.Unlock()
	if cl == nil || cl.handler != nil {
		return st, false
	}
	return clientState(cl)
}

// clientsAfter is the part of Clients done under the registry lock: the
// clients whose ids sort after after, in no order.
func (s *Server) clientsAfter(after string) []*client {
	s.mu.Lock()
	defer s.mu.Unlock()
	cls := make([]*client, 0, s.clients.Len())
	for cl := range s.clients.All {
		id := cl.id
		if id > after {
			cls = append(cls, cl)
		}
	}
	return cls
}

// clientState reads cl under its lock; ok is false when its session has
// ended since the registry was read.
func clientState(cl *client) (st ClientState, ok bool) {
	st.ID = cl.id
	if who := cl.who.Load(); who != nil {
		st.Username, st.Listener = who.Username, who.Listener
		st.Protocol = protocolName(packets.Version(who.ProtocolVersion))
		if who.Remote != nil {
			st.Remote = who.Remote.String()
		}
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.dropped {
		return st, false
	}
	if c := cl.conn; c != nil {
		// Set before attach made c the session's connection, and not
		// changed since.
		st.Connected, st.KeepAlive = true, int(c.keepAlive)
		st.BytesIn, st.BytesOut = c.bytesIn.Load(), c.bytesOut.Load()
	}
	st.Persistent = !cl.clean
	if at := cl.sess.ExpireAt(); at != 0 {
		st.ExpiresAt = time.Unix(0, at).UTC()
	}
	if at := cl.sess.LeftAt(); at != 0 && !st.Connected {
		st.OfflineSince = time.Unix(0, at).UTC()
	}
	st.Inflight, st.Queued, st.QueuedBytes = cl.sess.Inflight(), cl.sess.Queued(), cl.sess.QueuedBytes()
	st.Subscriptions = cl.sess.SubscriptionCount()
	return st, true
}

func protocolName(v packets.Version) string {
	switch v {
	case packets.V31:
		return "3.1"
	case packets.V311:
		return "3.1.1"
	case packets.V5:
		return "5.0"
	}
	return ""
}

// Subscriptions returns the subscriptions of the session of clientID
// whose filters sort after after, at most limit of them (every one when
// limit is 0 or less), in the order of their filters, and the filter to
// give as after for the next page ("" after the last). ok is false when
// the broker holds no session for clientID.
func (s *Server) Subscriptions(clientID, after string, limit int) (page []SubscriptionState, next string, ok bool) {
	s.mu.Lock()
	cl := s.clients.Get(clientID)
	s.mu.Unlock()
	if cl == nil {
		return nil, "", false
	}
	cl.mu.Lock()
	if cl.dropped {
		cl.mu.Unlock()
		return nil, "", false
	}
	var subs []SubscriptionState
	cl.sess.Subscriptions(func(sub session.Subscription) {
		if sub.Filter > after {
			o := sub.Options
			subs = append(subs, SubscriptionState{Filter: sub.Filter, QoS: o.QoS, NoLocal: o.NoLocal,
				RetainAsPublished: o.RetainAsPublished, RetainHandling: o.RetainHandling, ID: sub.ID})
		}
	})
	cl.mu.Unlock()
	page, next = firstPage(subs, limit, func(s SubscriptionState) string { return s.Filter })
	return page, next, true
}

// RetainedTopics returns the retained messages whose topics sort after
// after, at most limit of them (every one when limit is 0 or less), in
// the order of their topics, $ topics included, and the topic to give as
// after for the next page ("" after the last). payloadMax above 0 copies
// up to that many bytes of each payload into Payload.
func (s *Server) RetainedTopics(after string, limit, payloadMax int) (page []RetainedState, next string) {
	type item struct {
		topic string
		m     *session.Message
	}
	var items []item
	for topic, m := range s.retain.All {
		if topic > after {
			items = append(items, item{topic, m})
		}
	}
	items, next = firstPage(items, limit, func(it item) string { return it.topic })
	now := time.Now()
	page = make([]RetainedState, 0, len(items))
	for _, it := range items {
		m := it.m
		if m.Expired(now) {
			continue // not sent to subscribers any more; removed when next matched
		}
		r := RetainedState{Topic: it.topic, QoS: m.QoS, PayloadSize: len(m.Payload)}
		r.ExpiresAt, _ = m.ExpiresAt()
		if payloadMax > 0 {
			// A copy: a caller must not be able to change what is routed.
			r.Payload = slices.Clone(m.Payload[:min(len(m.Payload), payloadMax)])
		}
		page = append(page, r)
	}
	return page, next
}

// firstPage orders items by key and cuts the first limit of them (all
// when limit is 0 or less); next is the key of the last one kept when
// more follow. Keys are unique.
func firstPage[T any](items []T, limit int, key func(T) string) (page []T, next string) {
	cmp := func(a, b T) int { return strings.Compare(key(a), key(b)) }
	if limit <= 0 || len(items) <= limit {
		slices.SortFunc(items, cmp)
		return items, ""
	}
	items = leastSorted(items, limit, cmp)
	return items, key(items[limit-1])
}

// leastSorted returns the n least of items (n < len(items)), sorted, in
// items' first n places. It keeps a max-heap of the n least seen so far:
// O(len(items) log n) comparisons where sorting everything would cost
// O(len(items) log len(items)), and most items lose to the heap's top
// after one.
func leastSorted[T any](items []T, n int, cmp func(a, b T) int) []T {
	h := items[:n]
	for i := n/2 - 1; i >= 0; i-- {
		siftDown(h, i, cmp)
	}
	for _, x := range items[n:] {
		if cmp(x, h[0]) < 0 {
			h[0] = x
			siftDown(h, 0, cmp)
		}
	}
	slices.SortFunc(h, cmp)
	return h
}

// siftDown restores the max-heap order of h below i.
func siftDown[T any](h []T, i int, cmp func(a, b T) int) {
	for {
		big, l, r := i, 2*i+1, 2*i+2
		if l < len(h) && cmp(h[l], h[big]) > 0 {
			big = l
		}
		if r < len(h) && cmp(h[r], h[big]) > 0 {
			big = r
		}
		if big == i {
			return
		}
		h[i], h[big] = h[big], h[i]
		i = big
	}
}
