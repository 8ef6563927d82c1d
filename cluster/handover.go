package cluster

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
)

// The handover: a node that claimed a client id asks the node that held
// it, over NATS request/reply, to give it up (owner.go has the claim).

// handoverSubject is where node asks for the ids it owned.
func handoverSubject(cluster, node string) string {
	b := []byte("mqttd." + cluster + ".h.")
	return string(appendLevel(b, node))
}

// Handover headers.
const (
	hdrClient = "Mqttd-Client"
	hdrClean  = "Mqttd-Clean"
	hdrMore   = "Mqttd-More"
	hdrRev    = "Mqttd-Rev"
	hdrSame   = "Mqttd-Same-User"
)

// ErrNoAnswer is Handover's error when the previous owner did not
// answer: it is gone, or cut off.
var ErrNoAnswer = errors.New("cluster: the previous owner did not answer")

// HandoverFunc gives up client id on the previous owner's node: its
// connection, if any, is closed (Session taken over); unless clean (the
// new connection starts a fresh session), the session is returned,
// encoded by the broker, and nil when there is none.
//
// sameUser says the new connection is the session's user's: a will
// waiting for its delay is then dropped, the client being back
// [MQTT-3.1.2-8], as on one node.
type HandoverFunc func(id string, clean, sameUser bool) []byte

// ServeHandover answers other nodes' handover requests with fn, on a
// goroutine of the NATS connection: one request at a time.
func (n *Node) ServeHandover(fn HandoverFunc) error {
	_, err := n.nc.Subscribe(handoverSubject(n.cluster, n.name), func(msg *nats.Msg) {
		id := msg.Header.Get(hdrClient)
		rev, _ := strconv.ParseUint(msg.Header.Get(hdrRev), 10, 64)
		var state []byte
		// A request older than this node's own later claim is stale:
		// this node asked the requester to give the id up since.
		if n.owned.takeBefore(id, rev) {
			state = fn(id, msg.Header.Get(hdrClean) == "1", msg.Header.Get(hdrSame) == "1")
			n.stats.handedOver.Add(1)
		}
		n.replyChunks(msg.Reply, state)
	})
	if err != nil {
		return fmt.Errorf("cluster: serving handovers: %w", err)
	}
	return nil
}

// replyChunks sends state to reply in parts of at most handoverChunk
// bytes, each but the last marked with hdrMore.
func (n *Node) replyChunks(reply string, state []byte) {
	for {
		part := state[:min(len(state), handoverChunk)]
		state = state[len(part):]
		msg := &nats.Msg{Subject: reply, Data: part, Header: nats.Header{}}
		if len(state) > 0 {
			msg.Header.Set(hdrMore, "1")
		}
		if err := n.nc.PublishMsg(msg); err != nil {
			n.log.Warn().Err(err).Msg("cluster: answering a handover")
			return
		}
		if len(state) == 0 {
			return
		}
	}
}

// Handover asks node prev, which owned client id before this node
// claimed it, to give it up, and returns the session it sends (nil for
// none, or when the new connection is clean). A node that does not
// answer is taken to be gone: Handover then returns ErrNoAnswer (the
// session may be read from the replicated sessions, SessionStore.Adopt),
// and prev, if it comes back, finds it no longer owns the id.
func (n *Node) Handover(c Claim, id string, clean bool) ([]byte, error) {
	prev := c.Prev
	if prev == "" || prev == n.name {
		return nil, nil
	}
	n.stats.takeovers.Add(1)
	inbox := n.nc.NewRespInbox()
	sub, err := n.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	req := &nats.Msg{Subject: handoverSubject(n.cluster, prev), Reply: inbox, Header: nats.Header{}}
	req.Header.Set(hdrClient, id)
	req.Header.Set(hdrRev, strconv.FormatUint(c.Rev, 10))
	if c.SameUser {
		req.Header.Set(hdrSame, "1")
	}
	if clean {
		req.Header.Set(hdrClean, "1")
	}
	if err := n.nc.PublishMsg(req); err != nil {
		return nil, err
	}
	var state []byte
	for {
		msg, err := sub.NextMsg(handoverTimeout)
		if errors.Is(err, nats.ErrTimeout) {
			n.log.Info().Str("client_id", id).Str("previous_node", prev).Msg("cluster: previous owner did not answer")
			return nil, ErrNoAnswer
		}
		if errors.Is(err, nats.ErrNoResponders) { // prev is gone
			return nil, ErrNoAnswer
		}
		if err != nil {
			return nil, err
		}
		if len(state)+len(msg.Data) > MaxHandover {
			return nil, fmt.Errorf("cluster: session of %q larger than %d bytes", id, MaxHandover)
		}
		state = append(state, msg.Data...)
		if msg.Header.Get(hdrMore) == "" {
			if len(state) == 0 {
				return nil, nil
			}
			return state, nil
		}
	}
}
