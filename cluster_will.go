package mqttd

import (
	"encoding/json"

	"mqttd/auth"
	"mqttd/cluster"
	"mqttd/packets"
	"mqttd/persistence"
)

// Wills in a cluster (cluster/liveness.go has the store's side). A
// connection's will is recorded in the replicated store before its
// CONNACK, under its node; the node publishes it as on its own only
// after taking the record out (compare-and-swap on its revision), and
// takes it out without publishing when the will is discarded. If the
// node dies, or is cut off from the store, a node that can reach the
// store takes the records out and publishes them: each will once.

// willRecord is a will as recorded in the cluster: enough for any node to
// publish it with the rules of its publisher.
type willRecord struct {
	ClientID, Username, Listener string
	Version                      byte
	Message                      persistence.Message
}

// recordWill records c's will (of CONNECT cp) in the cluster, in a
// record of c's own (c.willRef). A will the store does not take is left
// to this node alone.
func (c *conn) recordWill(cp *packets.Connect) {
	node := c.srv.clusterNode()
	if node == nil || c.claimRev == 0 {
		return
	}
	w := willMessage(cp, c.info.ClientID)
	rec := willRecord{ClientID: c.info.ClientID, Username: c.info.Username, Listener: c.info.Listener,
		Version: byte(cp.ProtocolVersion), Message: persistence.Message{Topic: w.Topic, Payload: w.Payload,
			QoS: w.QoS, Retain: w.Retain, Origin: w.Origin}}
	if w.Properties != nil {
		rec.Message.Properties = *w.Properties
	}
	data, err := json.Marshal(&rec)
	if err != nil {
		return
	}
	var ref cluster.WillRef
	c.mayBlock(func() { ref, err = node.PutWill(c.info.ClientID, data) })
	if err != nil {
		c.fields(c.srv.log.Warn()).Err(err).Msg("cluster: will not recorded in the cluster: only this node can publish it")
		return
	}
	c.willRef = &ref
}

// publishRecordedWill publishes a will another node (or this one in a
// former life) recorded, which this node took out of the store.
func (s *Server) publishRecordedWill(data []byte) {
	var rec willRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		s.log.Warn().Err(err).Msg("cluster: unreadable will record dropped")
		return
	}
	pm := &rec.Message
	w := leftWill{msg: newMessage(pm.Topic, pm.Payload, pm.QoS, pm.Retain, &pm.Properties, pm.Origin),
		who: &auth.ClientInfo{ClientID: rec.ClientID, Username: rec.Username, ProtocolVersion: rec.Version, Listener: rec.Listener}}
	if rec.Username != "" && s.opts.Authenticator == nil && len(s.methods) == 0 {
		w.passwdStamp = stampUnknown
	}
	s.publishWillNow(w)
}

// takeRecordedWill decides whether this node may publish a will recorded
// in the cluster (w.ref): only once it has taken the record out. It runs
// the decision on a goroutine of its own, so that no reader or timer
// waits for the store, and publishes from there.
func (s *Server) takeRecordedWill(w leftWill) {
	node := s.clusterNode()
	if node == nil || node.CutOff() {
		return // the nodes that can reach the store publish it
	}
	s.writers.Add(1)
	go func() {
		defer s.writers.Done()
		// Again while the store does not answer: a netsplit shorter
		// than node_timeout must not lose the will. Cut off, the node
		// leaves it to the others (or to its own sweep on rejoining).
		node.Retry(func() bool {
			taken, err := node.TakeWill(*w.ref)
			if err == nil && taken {
				s.publishWillNow(w)
			}
			return err == nil || node.CutOff()
		})
	}()
}

// dropWillRecord takes a discarded will's record out of the cluster.
// Not inlined: the CONNECT path (attach) runs on a reader's stack, which
// must stay within 4 KiB (TestReaderStacksStay4KiB), and a single node
// never needs it.
//
//go:noinline
func (s *Server) dropWillRecord(ref *cluster.WillRef) {
	if ref == nil {
		return
	}
	if node := s.clusterNode(); node != nil {
		node.DropWill(*ref)
	}
}

// keepOwnWill chooses the records this node's own sweep takes (after its
// store was first bound, or bound again after a cut-off): those of
// connections it no longer has. A will waiting here for its delay
// (restored from the store after a crash, without its record) adopts
// its record instead, to take it when it fires.
func (s *Server) keepOwnWill(ref cluster.WillRef, data []byte) bool {
	var rec willRecord
	if json.Unmarshal(data, &rec) != nil {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cl := s.clients.Get(rec.ClientID)
	if cl == nil {
		return true
	}
	if dw := s.wills[cl]; dw != nil && (dw.ref != nil && dw.ref.Key == ref.Key || dw.ref == nil && dw.clusterOnly) {
		dw.ref = &ref
		return false
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.conn == nil || cl.conn.willRef == nil || cl.conn.willRef.Key != ref.Key
}

// clusterCutOff closes every client's connection when this node lost
// the store: their clients reconnect to a node that has it, and their
// wills are the records' (the others publish them).
func (s *Server) clusterCutOff() {
	s.cluster.accepting.Store(false)
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for _, c := range s.conns {
		if c.link() == nil {
			conns = append(conns, c)
		}
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.sendDisconnectAsync(packets.UseAnotherServer)
		c.closeWith(errCutOff)
	}
}

// clusterRejoined runs when this node has the store, first or again:
// it moves its sessions to the replicated store when they are to be
// kept there (replicateSessions, once), claims the sessions it kept and publishes the wills of its
// connections that ended meanwhile, again each second while the store
// does not answer all of it (just after a netsplit heals, its buckets
// may still be electing leaders), until it has, or the node is cut off
// again or closes.
func (s *Server) clusterRejoined(node *cluster.Node) {
	replicated, adopted, swept := false, false, false
	node.Retry(func() bool {
		if !replicated {
			if replicated = s.replicateSessions(node); !replicated {
				return node.CutOff()
			}
		}
		if !adopted {
			adopted = s.adoptKept(node)
		}
		if !swept {
			_, err := node.SweepWills(node.Name(), s.keepOwnWill)
			swept = err == nil
		}
		return adopted && swept || node.CutOff()
	})
	if adopted && swept {
		// Only now: a client accepted before the sweep could have its
		// new record taken for one of a connection gone.
		s.cluster.accepting.Store(true)
	}
}
