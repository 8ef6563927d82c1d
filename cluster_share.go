package mqttd

import (
	"strings"
	"time"

	"mqttd/cluster"
	"mqttd/persistence"
	"mqttd/session"
	"mqttd/topictrie"
)

// Shared subscriptions in a cluster (issue 38): a share group gets each
// message once in the whole cluster, not once per node. A node wants each
// (group, filter) pair its clients' share groups use through the pair's
// NATS queue group (cluster.Node.WantShared), and NATS gives each message
// to one node among those with members; that node's group then picks a
// member as it does alone, and the hand-off of a leaving member's
// unacknowledged messages stays within the node (share.go).
//
// So a message routed here, from a client of this node or from another
// node, goes to this node's plain subscribers only
// (router.noShares); its share groups get it back through NATS, tagged
// with their group and filter, even for a publisher on this node. A
// message that does not go to the other nodes ('$' topics, what a bridge
// brings in, one NATS cannot take) goes to this node's groups at once.

// wantOn asks node for filter: a shared one as its (group, filter) pair.
func wantOn(node *cluster.Node, filter string) {
	if group, topic, ok := splitShare(filter); ok {
		node.WantShared(group, topic)
		return
	}
	node.Want(filter)
}

// unwantOn undoes wantOn.
func unwantOn(node *cluster.Node, filter string) {
	if group, topic, ok := splitShare(filter); ok {
		node.UnwantShared(group, topic)
		return
	}
	node.Unwant(filter)
}

// splitShare returns the group and the topic filter of a shared
// subscription's filter, and false for a plain one.
func splitShare(filter string) (group, topic string, ok bool) {
	rest, ok := strings.CutPrefix(filter, "$share/")
	if !ok {
		return "", "", false
	}
	return strings.Cut(rest, "/")
}

// routeClustered routes m, which this node's client (owner) or the broker
// published, here and to the other nodes; its share groups here get it
// through NATS when it went there. m may be in a read buffer: the node
// copies what it keeps.
func (s *Server) routeClustered(r *router, m *session.Message, owner *conn) (clients int) {
	sent := owner.fromHere() && s.toCluster(m, owner)
	r.noShares = sent
	if owner != nil && owner.fwd != nil {
		r.stamp = owner.fwd.stamp // the local deliveries remember it too
	}
	clients = s.routeWith(r, m, owner)
	r.noShares, r.stamp = false, persistence.Stamp{}
	if sent {
		// Another node's subscribers are not counted: none is told
		// there were no matching subscribers when some may be there.
		clients = max(clients, 1)
	}
	return clients
}

// toShareGroup delivers m, which NATS chose this node for on behalf of
// share group group on filter, to one of the group's members here.
func (s *Server) toShareGroup(m *session.Message, group, filter string) {
	sub, ok := s.subs.ShareMember(group, filter, topictrie.Message{Topic: m.Topic}, func(*client) bool { return false })
	if !ok {
		s.stats.dropped[dropNoMember].Add(1) // the group's last member here left meanwhile
		return
	}
	r := routerPool.Get().(*router)
	r.enc.reset(m, nil)
	r.now = time.Time{}
	r.alt[0] = sub
	s.deliverRun(r, m, r.alt[:])
	clear(r.alt[:])
	r.enc.reset(nil, nil)
	routerPool.Put(r)
}
