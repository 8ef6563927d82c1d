package mqttd

import (
	"sync/atomic"
	"time"

	"mqttd/persistence"
	"mqttd/session"
)

// Exactly once between the nodes of a cluster (cluster.sessions:
// replicated). A new QoS 2 message from a persistent session that other
// nodes want is stamped (cluster.Node.NewStamp) and kept with its packet
// id as a Forward, in the persistence group that stores its packet id and
// its local deliveries; it is sent to the other nodes only once that is
// stored, and its PUBREC waits for them to confirm it (confirmed sends,
// cluster_confirm.go). Once they have, the Forward is done with: the id
// is stored plain again. Should they not confirm it (a node slow or
// gone), the refusal closes a 3.1.1 connection and the Forward stays; so
// it does on a node that dies before the confirmation, in the replicated
// store, whichever node its session moves to. When the publisher sends
// the packet id again (DUP), the node holding its session routes the
// message again, here and to the other nodes, under the same stamp.
//
// Each session remembers for stampTTL the stamps of the messages it took
// (session.Session.Remember, persistence.OpPutStamp with the entry, so
// the stamps move with the session), and a copy whose stamp it remembers
// is not delivered again: a node that had stored the message before its
// publisher's node went away does not store it twice, nor does a session
// of the publisher's own node taken over elsewhere.
//
// Only a PUBLISH with DUP set is taken as the message sent again
// [MQTT-3.3.1-1]: a 5.0 client refused with 0x80 may reuse the packet id
// for a new message before this node has let go of the id.
//
// Not covered: a copy sent again more than stampTTL after the first (a
// publisher back later than that, or a session past MaxStamps stamps
// within it) may be delivered twice, as at least once allows; a share
// group's copy, which is not confirmed either, carries no stamp; and a
// 5.0 publisher refused with 0x80 has its packet id freed
// [MQTT-4.3.3-9]: what some nodes had of the message stays there.

// stampTTL is how long a session remembers a stamp: far longer than a
// node takes to be found dead and its sessions taken over, and a
// publisher to connect again.
const stampTTL = 2 * time.Minute

// qos2Forward is what the routing of a new QoS 2 message of a stored
// session tells publishQoS2 (conn.fwd): the stamp toCluster gave it when
// it goes to other nodes, zero when it does not.
type qos2Forward struct {
	pid   uint16
	stamp persistence.Stamp
	msg   *session.Message
}

// forwardNew keeps the stamped message f of c's client as the Forward of
// its packet id, in the persistence group its routing opened, and sends
// it to the other nodes once that is stored (sendForward); not at all
// when the store failed it, which refuses the message.
func (s *Server) forwardNew(c *conn, cl *client, f *qos2Forward) {
	fw := &session.Forward{Stamp: session.Stamp(f.stamp), Msg: f.msg}
	u := &forwardUnit{c: c}
	cl.mu.Lock()
	cl.sess.SetForward(f.pid, fw)
	ops := [1]persistence.Op{persistence.PutForward(cl.id, f.pid, f.stamp, s.dur.stored(f.msg))}
	c.holdAnswers()
	s.dur.track(c, s.dur.commit.Add(&persistence.Batch{Ops: ops[:]}, u), true)
	cl.mu.Unlock()
	s.sendForward(c, cl, f.pid, fw, u)
}

// forwardUnit is the Owner of a Forward's unit: told that it failed, it
// tells the connection, whose answer it covers, and keeps it, for the
// copies not to be sent.
type forwardUnit struct {
	c      *conn
	failed atomic.Bool
}

// StoreFailed implements persistence.Owner.
func (u *forwardUnit) StoreFailed(ticket uint64, err error) {
	u.failed.Store(true)
	u.c.StoreFailed(ticket, err)
}

// resendForward routes fw, the Forward of packet id pid that c's client
// sent again, once more under its stamp: to this node's sessions, which
// take it unless they remember the stamp, and to the other nodes, which
// do the same, holding c's PUBREC until they confirm it.
func (s *Server) resendForward(c *conn, cl *client, pid uint16, fw *session.Forward) {
	s.stats.qos2Resent.Add(1)
	r := routerPool.Get().(*router)
	// The share groups get it through the cluster, as a new message's do
	// (routeClustered).
	r.stamp, r.noShares = persistence.Stamp(fw.Stamp), true
	s.routeWith(r, fw.Msg, c)
	r.stamp, r.noShares = persistence.Stamp{}, false
	routerPool.Put(r)
	s.sendForward(c, cl, pid, fw, nil)
}

// sendForward sends fw, the Forward of c's client's packet id pid, to the
// nodes that want it once everything added to the store before is
// applied, unless stored (the unit that stored it, nil when it was
// before) failed, and holds c's next answer until they confirm it; then
// the Forward is done with (forwarded).
func (s *Server) sendForward(c *conn, cl *client, pid uint16, fw *session.Forward, stored *forwardUnit) {
	node := s.clusterNode()
	if node == nil {
		return
	}
	t := s.holdForNodes(c)
	cm := clusterMessage(fw.Msg)
	cm.Stamp = persistence.Stamp(fw.Stamp)
	s.dur.commit.Wait(t, func() {
		if stored != nil && stored.failed.Load() {
			c.confirmed(t, false)
			return
		}
		// On the committer's goroutine: nothing here may wait for room.
		_ = node.PublishConfirmed(&cm, 0, nil, func(ok bool) {
			if ok {
				s.forwarded(cl, pid, fw)
			}
			c.confirmed(t, ok)
		})
	})
}

// forwarded stores packet id pid of cl plain again once the nodes have
// confirmed its Forward fw, unless the id has moved on meanwhile
// (released, or another message's).
func (s *Server) forwarded(cl *client, pid uint16, fw *session.Forward) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.sess.ForwardOf(pid) != fw {
		return
	}
	cl.sess.SetForward(pid, nil)
	if cl.stored {
		s.dur.oneLocked(persistence.PutAwaitingRel(cl.id, pid), nil)
	}
}

// putRelState appends to b what a stored session holds of inbound QoS 2:
// its awaiting-rel ids, as Forwards where they are, and its stamps.
func putRelState(b *persistence.Batch, id string, rel []uint16, fwds []persistence.Forward, stamps []persistence.SeenStamp) {
	forward := make(map[uint16]*persistence.Forward, len(fwds))
	for i := range fwds {
		forward[fwds[i].PacketID] = &fwds[i]
	}
	for _, pid := range rel {
		if f := forward[pid]; f != nil {
			b.PutForward(id, pid, f.Stamp, &f.Message)
		} else {
			b.PutAwaitingRel(id, pid)
		}
	}
	for _, st := range stamps {
		b.PutStamp(id, st.Stamp, st.Expiry)
	}
}

// restoreRelLocked puts back into cl's session what it held of inbound
// QoS 2 (putRelState's), and reports which ids it took: those within its
// limit. The caller holds cl.mu, or has cl to itself.
func restoreRelLocked(cl *client, rel []uint16, fwds []persistence.Forward, stamps []persistence.SeenStamp) []uint16 {
	took := rel[:0:0]
	for _, pid := range rel {
		if _, err := cl.sess.ReceiveQoS2(pid); err == nil {
			took = append(took, pid)
		}
	}
	for i := range fwds {
		f := &fwds[i]
		pm := &f.Message
		m := newMessage(pm.Topic, pm.Payload, pm.QoS, pm.Retain, &pm.Properties, pm.Origin)
		m.Expiry = pm.Expiry
		cl.sess.SetForward(f.PacketID, &session.Forward{Stamp: session.Stamp(f.Stamp), Msg: m})
	}
	now := time.Now().UnixNano()
	for _, st := range stamps {
		cl.sess.Remember(session.Stamp(st.Stamp), st.Expiry, now)
	}
	return took
}

// relStateLocked is cl's inbound QoS 2 state as putRelState and
// restoreRelLocked take it. The caller holds cl.mu.
func relStateLocked(cl *client) (rel []uint16, fwds []persistence.Forward, stamps []persistence.SeenStamp) {
	rel = cl.sess.AwaitingRelIDs()
	cl.sess.Forwards(func(id uint16, fw *session.Forward) {
		pm := persistence.Message{Topic: fw.Msg.Topic, Payload: fw.Msg.Payload, QoS: fw.Msg.QoS, Retain: fw.Msg.Retain,
			Expiry: fw.Msg.Expiry, Origin: fw.Msg.Origin}
		if fw.Msg.Properties != nil {
			pm.Properties = *fw.Msg.Properties
		}
		fwds = append(fwds, persistence.Forward{PacketID: id, Stamp: persistence.Stamp(fw.Stamp), Message: pm})
	})
	for _, st := range cl.sess.Stamps(time.Now().UnixNano()) {
		stamps = append(stamps, persistence.SeenStamp{Stamp: persistence.Stamp(st.Stamp), Expiry: st.Expiry})
	}
	return rel, fwds, stamps
}
