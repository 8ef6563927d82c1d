package cluster

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// Shared subscriptions across nodes: a share group ($share/group/filter)
// whose members are on several nodes gets each message once in the
// whole cluster. Every node with a member holds, for each (group, filter)
// pair, a NATS queue subscription to the filter's subjects in one queue
// group named alike on every node, and NATS gives each message to one
// subscriber of the queue group among all nodes'; the node it chose
// hands the message to its own members of that group only
// (Message.Group), whose local choice of one member is the broker's. A
// node does not deliver to its own groups what it routes (the broker
// leaves them out), since their copy comes back through NATS, even for a
// publisher on the same node.
//
// These subscriptions live on a second NATS connection of the node, the
// shared connection: the main one does not echo, and a member on the
// publishing node must be able to win. It is opened by the first
// WantShared (a node without shared subscribers pays nothing), on a
// goroutine of its own, since its caller may hold the broker's locks,
// with the main connection's servers and options; closed at Close.
// Its messages join the main connection's in the one delivery queue and
// goroutine, bounded alike.

// shares are a node's shared subscriptions.
type shares struct {
	// mu guards what follows; read-locked by the delivery goroutine for
	// each message of the shared connection (tag).
	mu sync.RWMutex
	// nc is the shared connection, nil until it is opened; opening is
	// closed once the goroutine opening it is done, nil before the first
	// WantShared.
	nc       *nats.Conn
	ncClosed chan struct{}
	opening  chan struct{}
	// closed is set at Close: no connection is opened past it.
	closed bool
	byKey  map[shareKey]*share
	bySub  map[*nats.Subscription]*share
	nsubs  int
	// dropped counts the drops of the subscriptions gone; retired is set
	// at Close, when every live one's are in it.
	dropped uint64
	retired bool

	in, unwanted atomic.Uint64
}

// shareKey is one shared subscription: a share group on a topic filter.
type shareKey struct{ group, filter string }

// share is one wanted (group, filter) pair: how many of this node's
// subscriptions use it, and its NATS subscriptions.
type share struct {
	shareKey
	refs int
	subs []*nats.Subscription
}

// WantShared counts one more of this node's subscriptions to share group
// group on filter (without its $share/group/ prefix); the first
// subscribes in NATS to the filter's subjects, and to its retained
// messages' (which every node also gets for its store), in the pair's
// queue group, on the shared connection: at once, or as soon as the
// node's first WantShared has opened it. It never waits for the network.
// Filters of '$' topics, which never cross, are ignored.
func (n *Node) WantShared(group, filter string) {
	topic, ok := wantedTopic(filter)
	if !ok || group == "" || n.closed.Load() {
		return
	}
	sh := &n.shared
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.closed {
		return
	}
	k := shareKey{group, topic}
	if s := sh.byKey[k]; s != nil {
		s.refs++
		return
	}
	if sh.byKey == nil {
		sh.byKey = map[shareKey]*share{}
		sh.bySub = map[*nats.Subscription]*share{}
	}
	s := &share{shareKey: k, refs: 1}
	sh.byKey[k] = s
	// The senders publish a message on its own subject only while a
	// node has a share group on a filter matching it.
	n.announce(routeKey{filter: topic, shared: true}, 1)
	switch {
	case sh.nc != nil:
		n.subscribeShare(s)
	case sh.opening == nil:
		sh.opening = make(chan struct{})
		go n.openShared()
	}
}

// subscribeShare makes s's NATS subscriptions; n.shared.mu is held and
// the shared connection open.
func (n *Node) subscribeShare(s *share) {
	sh := &n.shared
	queue := shareQueue(n.cluster, s.group, s.filter)
	for _, subj := range shareSubjects(n.cluster, s.filter) {
		if len(subj) > MaxSubjectLen {
			continue // no topic it matches can be sent
		}
		sub, err := sh.nc.ChanQueueSubscribe(subj, queue, n.in)
		if err != nil {
			n.log.Warn().Err(err).Str("group", s.group).Str("filter", s.filter).Msg("cluster: NATS subscribe failed")
			continue
		}
		s.subs = append(s.subs, sub)
		sh.bySub[sub] = s
	}
	sh.nsubs += len(s.subs)
}

// UnwantShared counts one fewer of this node's subscriptions to share
// group group on filter; the last unsubscribes in NATS. What NATS had
// already given this node for the pair is dropped (Stats.SharedUnwanted).
// UnwantShared of a pair not wanted is a no-op.
func (n *Node) UnwantShared(group, filter string) {
	topic, ok := wantedTopic(filter)
	if !ok {
		return
	}
	sh := &n.shared
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k := shareKey{group, topic}
	s := sh.byKey[k]
	if s == nil {
		return
	}
	if s.refs--; s.refs > 0 {
		return
	}
	delete(sh.byKey, k)
	n.announce(routeKey{filter: topic, shared: true}, -1)
	for _, sub := range s.subs {
		delete(sh.bySub, sub)
		if d, err := sub.Dropped(); err == nil {
			sh.dropped += uint64(d)
		}
		if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) &&
			!errors.Is(err, nats.ErrConnectionDraining) && !errors.Is(err, nats.ErrBadSubscription) {
			n.log.Warn().Err(err).Str("group", group).Str("filter", topic).Msg("cluster: NATS unsubscribe failed")
		}
	}
	sh.nsubs -= len(s.subs)
}

// shareQueue is the NATS queue group of share group group on filter in
// cluster cluster, the same on every node. It is a hash, so that any
// group and filter give a short queue name NATS accepts.
func shareQueue(cluster, group, filter string) string {
	h := sha256.New()
	h.Write(binary.AppendUvarint(nil, uint64(len(group))))
	h.Write([]byte(group))
	h.Write([]byte(filter))
	return "mqttd." + cluster + ".s." + hex.EncodeToString(h.Sum(nil)[:16])
}

// shareSubjects are the subjects of filter's messages, live and retained.
func shareSubjects(cluster, filter string) []string {
	live := FilterSubjects(cluster, filter)
	all := append(make([]string, 0, 2*len(live)), live...)
	for _, subj := range live {
		all = append(all, retainedPrefix(cluster)+strings.TrimPrefix(subj, prefix(cluster)))
	}
	return all
}

// openShared opens the shared connection and makes the subscriptions
// wanted meanwhile; a connection that fails at first is retried in the
// background, as the main one reconnects, and nats.go sends them once it
// is up. Close waits for it.
func (n *Node) openShared() {
	sh := &n.shared
	defer close(sh.opening)
	closed := make(chan struct{})
	nc, err := nats.Connect(strings.Join(n.nc.Opts.Servers, ","), n.sharedOptions(closed)...)
	if err != nil {
		// Only options nats.go refuses, which the main connection's are not.
		n.log.Error().Err(err).Msg("cluster: shared subscriptions' NATS connection failed")
		return
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.closed {
		nc.Close()
		return
	}
	sh.nc, sh.ncClosed = nc, closed
	for _, s := range sh.byKey {
		n.subscribeShare(s)
	}
	n.log.Info().Int("filters", len(sh.byKey)).Msg("cluster: shared subscriptions' NATS connection opened")
}

// sharedOptions are the main connection's options, with handlers of its
// own. No echo either: NATS gives the shared connection what the main
// one publishes, as another client's.
func (n *Node) sharedOptions(closed chan struct{}) []nats.Option {
	log := n.log.With().Str("connection", "shared").Logger()
	return append(n.options(),
		nats.Name("mqttd "+n.cluster+"/"+n.name+" shared"),
		nats.RetryOnFailedConnect(true),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if !n.closed.Load() {
				log.Warn().Err(err).Msg("cluster: NATS connection lost, reconnecting")
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info().Str("nats", nc.ConnectedUrlRedacted()).Msg("cluster: NATS connection restored")
		}),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }),
	)
}

// tag sets m's Group and Filter from msg's shared subscription, and
// reports false when that subscription has gone since: m is then
// dropped.
func (n *Node) tag(msg *nats.Msg, m *Message) bool {
	sh := &n.shared
	sh.mu.RLock()
	s := sh.bySub[msg.Sub]
	sh.mu.RUnlock()
	if s == nil {
		sh.unwanted.Add(1)
		return false
	}
	m.Group, m.Filter = s.group, s.filter
	sh.in.Add(1)
	return true
}

// sharedStats adds the shared subscriptions' counts to st.
func (n *Node) sharedStats(st *Stats) {
	sh := &n.shared
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	st.SharedFilters, st.SharedSubscriptions = len(sh.byKey), sh.nsubs
	st.SharedIn, st.SharedUnwanted = sh.in.Load(), sh.unwanted.Load()
	st.DroppedIn += sh.dropped
	if !sh.retired {
		for sub := range sh.bySub {
			if d, err := sub.Dropped(); err == nil {
				st.DroppedIn += uint64(d)
			}
		}
	}
}

// closeShared drains and closes the shared connection, once opened; no
// WantShared opens one after it.
func (n *Node) closeShared() error {
	sh := &n.shared
	sh.mu.Lock()
	sh.closed = true
	opening := sh.opening
	sh.mu.Unlock()
	if opening != nil {
		<-opening
	}
	sh.mu.Lock()
	for sub := range sh.bySub {
		if d, err := sub.Dropped(); err == nil {
			sh.dropped += uint64(d)
		}
	}
	sh.retired = true
	nc, closed := sh.nc, sh.ncClosed
	sh.mu.Unlock()
	if nc == nil {
		return nil
	}
	return drainConn(nc, closed)
}

// drainConn unsubscribes, lets the server send what it has for the
// connection, and closes it, waiting for nats.go's bounded drain; closed
// is closed by the connection's ClosedHandler.
func drainConn(nc *nats.Conn, closed <-chan struct{}) error {
	if !nc.IsConnected() {
		// Nothing can drain: what waits in the reconnect buffer is lost
		// either way.
		nc.Close()
		return nil
	}
	if err := nc.Drain(); err != nil {
		nc.Close()
		if errors.Is(err, nats.ErrConnectionClosed) {
			return nil
		}
		return err
	}
	select {
	case <-closed:
		return nil
	case <-time.After(drainTimeout + time.Second):
		nc.Close()
		return errors.New("cluster: NATS drain timed out")
	}
}
