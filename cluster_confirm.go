package mqttd

import (
	"errors"
	"slices"

	"mqttd/cluster"
	"mqttd/persistence"
)

// Confirmed sends between nodes (cluster.sessions: replicated): a QoS 1
// or 2 message a client publishes is acknowledged (PUBACK, PUBREC) only
// once every node it went to has committed what its delivery stored, so
// that a persistent session on another node holds it as surely as one
// here. The send takes a place among the connection's held answers (an
// empty unit's ticket, tracked as its other units are) that is settled
// by the nodes' answers instead of the commit alone; a node that does
// not answer turns the acknowledgement into a refusal (5.0: 0x80; 3.1.1:
// the connection closed), and the client sends the message again.

// errNotConfirmed is a confirmed send that failed.
var errNotConfirmed = errors.New("a node holding subscribers of the message did not confirm it")

// toClusterConfirmed sends cm for owner's reader, holding owner's next
// answer until the nodes it went to confirm it.
func (s *Server) toClusterConfirmed(node *cluster.Node, cm *cluster.Message, owner *conn) error {
	t := s.holdForNodes(owner)
	wait, block := clusterWait, owner.mayBlock
	if owner.committing {
		wait, block = 0, nil
	}
	return node.PublishConfirmed(cm, wait, block, func(ok bool) { owner.confirmed(t, ok) })
}

// holdForNodes takes a place among owner's held answers for a confirmed
// send, and returns its ticket: an empty unit's, tracked as covering,
// whose answer waits for the nodes (confirmed) as well as for the store.
func (s *Server) holdForNodes(owner *conn) uint64 {
	d := s.dur
	owner.holdAnswers()
	var b persistence.Batch
	t := d.commit.Add(&b, owner)
	d.track(owner, t, true)
	h := owner.held
	h.mu.Lock()
	h.remote = append(h.remote, t)
	h.mu.Unlock()
	return t
}

// confirmed settles the confirmed send of ticket t: its answer goes once
// nothing else holds it, a refusal if !ok.
func (c *conn) confirmed(t uint64, ok bool) {
	c.releaseWith(0, func(h *heldAnswers) {
		if i := slices.Index(h.remote, t); i >= 0 {
			h.remote = slices.Delete(h.remote, i, i+1)
		}
		if !ok {
			h.failures = append(h.failures, storeFailure{t, errNotConfirmed})
		}
	})
}

// deliveringConfirmed notes, before the node delivers a batch whose
// sender waits for its answer, what the store has applied.
func (s *Server) deliveringConfirmed() {
	if d := s.dur; d != nil {
		s.cluster.answerFrom = d.commit.Applied()
	}
}

// answerCommitted runs answer once everything added to the store before
// the call is committed: a node's answer to another's confirmed send
// (cluster.Node.SetCommitted), ok only if no unit failed that was not
// yet applied when the batch's delivery began. That covers the units
// its deliveries added, and those they relied on: a copy passed over
// because a session took its stamp from an earlier copy, whose unit was
// still to be stored then. A failure of another unit only makes the
// sender refuse a message that was kept, which its publisher then sends
// again.
func (s *Server) answerCommitted(answer func(ok bool)) {
	d := s.dur
	if d == nil {
		answer(true)
		return
	}
	from := s.cluster.answerFrom
	var b persistence.Batch
	d.commit.AddThen(&b, nil, func() { answer(!d.commit.FailedAfter(from)) })
	d.commit.Flush()
}
