package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// An operator's action on a client (a kick, a session deleted) made on
// any node reaches the node that owns the client id, over NATS
// request/reply: the node that got it finds the owner in the owners
// bucket and asks it to act on its own client. A listing of sessions
// asks every node for its part.

// adminSubject is where node takes actions on its clients.
func adminSubject(cluster, node string) string {
	b := []byte("mqttd." + cluster + ".a.")
	return string(appendLevel(b, node))
}

// Admin request and answer headers.
const (
	hdrAction  = "Mqttd-Action"
	hdrOutcome = "Mqttd-Outcome"
)

// adminTimeout bounds the wait for the owner's answer: longer than the
// broker's own wait for a kicked client to let go of its session.
const adminTimeout = 5 * time.Second

// AdminFunc performs action on client id's session on this node and
// returns its outcome: "" when done, else what the asking node's
// operator is to be told, in the broker's own words (the cluster carries
// it as it is).
type AdminFunc func(action, id string) (outcome string)

// ServeAdmin performs other nodes' actions on this node's clients with
// fn, on a goroutine of the NATS connection: one at a time.
func (n *Node) ServeAdmin(fn AdminFunc) error {
	_, err := n.nc.Subscribe(adminSubject(n.cluster, n.name), func(msg *nats.Msg) {
		out := fn(msg.Header.Get(hdrAction), msg.Header.Get(hdrClient))
		reply := &nats.Msg{Subject: msg.Reply, Header: nats.Header{}}
		reply.Header.Set(hdrOutcome, out)
		if err := n.nc.PublishMsg(reply); err != nil {
			n.log.Warn().Err(err).Msg("cluster: answering an action on a client")
		}
	})
	if err != nil {
		return fmt.Errorf("cluster: serving actions on clients: %w", err)
	}
	return nil
}

// Admin asks node to perform action on client id and returns the outcome
// its AdminFunc gave, or ErrNoAnswer when node did not answer.
func (n *Node) Admin(node, action, id string) (outcome string, err error) {
	req := &nats.Msg{Subject: adminSubject(n.cluster, node), Header: nats.Header{}}
	req.Header.Set(hdrAction, action)
	req.Header.Set(hdrClient, id)
	reply, err := n.nc.RequestMsg(req, adminTimeout)
	if errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) {
		return "", fmt.Errorf("%w: node %s, about client %q", ErrNoAnswer, node, id)
	}
	if err != nil {
		return "", err
	}
	return reply.Header.Get(hdrOutcome), nil
}

// Owner returns the node that owns client id, "" when none does.
func (n *Node) Owner(id string) (string, error) {
	st := n.store.Load()
	if st == nil {
		return "", ErrNoStore
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	e, err := st.owners.Get(ctx, ownerKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", nil
	}
	if err != nil {
		return "", storeErr(err)
	}
	owner, _ := parseOwner(e.Value())
	return owner, nil
}

// listSubject is where every node of a cluster answers listings.
func listSubject(cluster string) string { return "mqttd." + cluster + ".l" }

// hdrNode names the node a listing comes from, or answers it.
const hdrNode = "Mqttd-Node"

// listTimeout bounds the wait for the other nodes' answers to a listing.
const listTimeout = 2 * time.Second

// ListFunc answers another node's listing; the query and the answer are
// the broker's encoding.
type ListFunc func(query []byte) []byte

// ServeList answers other nodes' listings with fn, on a goroutine of the
// NATS connection: one at a time.
func (n *Node) ServeList(fn ListFunc) error {
	_, err := n.nc.Subscribe(listSubject(n.cluster), func(msg *nats.Msg) {
		if msg.Header.Get(hdrNode) == n.name || msg.Reply == "" {
			return
		}
		reply := &nats.Msg{Subject: msg.Reply, Data: fn(msg.Data), Header: nats.Header{}}
		reply.Header.Set(hdrNode, n.name)
		if err := n.nc.PublishMsg(reply); err != nil {
			n.log.Warn().Err(err).Msg("cluster: answering a listing")
		}
	})
	if err != nil {
		return fmt.Errorf("cluster: serving listings: %w", err)
	}
	return nil
}

// List asks every other node for its answer to query, and returns the
// answers by node: every live node's (NodesAlive), or those that came
// within listTimeout.
func (n *Node) List(query []byte) (map[string][]byte, error) {
	want := int(n.nodesAlive.Load()) - 1
	got := make(map[string][]byte, max(want, 0))
	if want <= 0 {
		return got, nil
	}
	inbox := n.nc.NewRespInbox()
	sub, err := n.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	req := &nats.Msg{Subject: listSubject(n.cluster), Reply: inbox, Data: query, Header: nats.Header{}}
	req.Header.Set(hdrNode, n.name)
	if err := n.nc.PublishMsg(req); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(listTimeout)
	for len(got) < want {
		msg, err := sub.NextMsg(time.Until(deadline))
		if errors.Is(err, nats.ErrTimeout) {
			break
		}
		if err != nil {
			return got, err
		}
		got[msg.Header.Get(hdrNode)] = msg.Data
	}
	return got, nil
}
