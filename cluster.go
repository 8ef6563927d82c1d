package mqttd

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"mqttd/cluster"
	"mqttd/packets"
	"mqttd/persistence"
	"mqttd/session"
)

// The broker's side of a cluster (Options.Cluster, package cluster): what
// this node routes goes to the other nodes that want its topic, what they
// route comes here and is routed to this node's clients only, and the
// filters this node's clients subscribe to are what it wants. A broker
// without a cluster pays a nil check per message and per subscription.
//
// Bridges in a cluster are configured alike on every node, as EMQX's are:
// each node's bridge forwards what that node's clients publish (a
// message from another node is left to that node's bridge), and brings
// in from the remote for that node's clients only (what it brings in is
// not sent to the other nodes, whose bridges bring it in themselves). Its
// default client id on the remote starts with the node's name, not the
// host's, so that two nodes on one host do not take each other's session.

// clusterLink is a Server's membership of its cluster.
type clusterLink struct {
	cfg cluster.Config

	// mu guards wanted, and orders the node's setting with it: a filter's
	// first subscription on this node, and its last, reach the node in the
	// order they were made.
	mu     sync.Mutex
	wanted map[string]int // filter → this node's subscriptions to it
	// node is nil until Serve joins the cluster, and after Shutdown; set
	// under mu, read without it by every message sent (toCluster).
	node atomic.Pointer[cluster.Node]
	// swap is the broker's store with replicated sessions (nil without),
	// and sessions the replicated store once swapped in
	// (cluster_sessions.go).
	swap     *switchStore
	sessions atomic.Pointer[cluster.SessionStore]
	// taking are the ids whose sessions this node is taking over from a
	// dead or departed node, each closed once done (takeDeadSession).
	takingMu sync.Mutex
	taking   map[string]chan struct{}
	// accepting is set once the node has claimed its kept sessions and
	// swept its own wills after binding the store (clusterRejoined), and
	// cleared while it is cut off: CONNECTs are refused meanwhile.
	accepting atomic.Bool
	// backlog is the online clients whose queues hold the cluster back
	// (cluster_backlog.go).
	backlog backlog
	// answerFrom is the store's applied ticket when the node began to
	// deliver the batch it answers next (deliveringConfirmed); only its
	// delivery goroutine uses it.
	answerFrom uint64
}

// addSubscription subscribes cl to filter in the trie and, in a cluster,
// counts the filter as one this node wants. It reports whether cl was not
// subscribed to filter before.
func (s *Server) addSubscription(filter string, cl *client, o subOpts) (bool, error) {
	isNew, err := s.subs.Subscribe(filter, cl, o)
	if isNew && err == nil && s.cluster != nil && crossesNodes(filter) {
		s.cluster.want(filter)
	}
	return isNew, err
}

// crossesNodes reports whether filter matches topics other nodes send:
// any but those of the broker's own '$' topics, which stay on their node,
// the dead letters aside (cluster.Crosses).
func crossesNodes(filter string) bool {
	if rest, ok := strings.CutPrefix(filter, "$share/"); ok {
		_, filter, _ = strings.Cut(rest, "/")
	}
	return cluster.Crosses(filter)
}

// removeSubscription unsubscribes cl from filter, in the trie and, in a
// cluster, from what this node wants. It reports whether cl was
// subscribed.
func (s *Server) removeSubscription(filter string, cl *client) bool {
	if !s.subs.Unsubscribe(filter, cl) {
		return false
	}
	if s.cluster != nil && crossesNodes(filter) {
		s.cluster.unwant(filter)
	}
	return true
}

func (l *clusterLink) want(filter string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.wanted[filter]++; l.wanted[filter] == 1 {
		if node := l.node.Load(); node != nil {
			wantOn(node, filter)
		}
	}
}

func (l *clusterLink) unwant(filter string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, ok := l.wanted[filter]
	if !ok {
		return
	}
	if n > 1 {
		l.wanted[filter] = n - 1
		return
	}
	delete(l.wanted, filter)
	if node := l.node.Load(); node != nil {
		unwantOn(node, filter)
	}
}

// clusterConfig is o's cluster configuration with the broker's defaults:
// an embedded server keeps its JetStream files in data_dir/nats, and the
// replicated retained messages are bounded as the broker's are, twice
// over: the stream also keeps deletions, and counts subjects and headers.
func clusterConfig(o *Options) cluster.Config {
	cfg := *o.Cluster
	cfg.Retained = cluster.RetainedLimits{Messages: 2 * int64(o.Limits.MaxRetained), Bytes: 2 * o.Limits.MaxRetainedBytes}
	if e := cfg.NATS.Embedded; e != nil && e.StoreDir == "" && o.DataDir != "" {
		ec := *e
		ec.StoreDir = filepath.Join(o.DataDir, "nats")
		cfg.NATS.Embedded = &ec
	}
	return cfg
}

// joinCluster connects this node to its cluster and asks for the filters
// its clients (restored sessions, bridges) already subscribe to.
func (s *Server) joinCluster() error {
	l := s.cluster
	node, err := cluster.Start(l.cfg, s.log, s.fromCluster)
	if err != nil {
		return fmt.Errorf("mqttd: joining cluster %s: %w", l.cfg.Name, err)
	}
	node.SetBehind(s.backlogged)
	if err := node.ServeHandover(s.handOver); err != nil {
		_ = node.Close()
		return err
	}
	if err := node.ServeAdmin(s.adminHere); err != nil {
		_ = node.Close()
		return err
	}
	if err := node.ServeList(s.listHere); err != nil {
		_ = node.Close()
		return err
	}
	node.SetWillPublisher(s.publishRecordedWill)
	node.SetRetainedKeeper(s.keepRetained)
	node.SetCommitted(s.deliveringConfirmed, s.answerCommitted)
	if l.cfg.ReplicatedSessions() {
		node.HoldDeadRoutes(deadRouteGrace)
	}
	node.Watch(cluster.Hooks{CutOff: s.clusterCutOff, Rejoined: func() { s.clusterRejoined(node) },
		NodeDead: func(dead string) { s.takeDeadSessions(node, dead) }})
	l.mu.Lock()
	l.node.Store(node)
	for f := range l.wanted {
		wantOn(node, f)
	}
	l.mu.Unlock()
	s.log.Info().Str("cluster", l.cfg.Name).Str("node", node.Name()).Msg("joined the cluster")
	return nil
}

// leaveCluster closes this node's connection to the cluster: nothing more
// comes from it, nor goes to it.
func (s *Server) leaveCluster() {
	l := s.cluster
	if l == nil {
		return
	}
	l.mu.Lock()
	node := l.node.Swap(nil)
	l.mu.Unlock()
	if node == nil {
		return
	}
	if s.replicated() != nil {
		// The node's goodbye has the others take its sessions over at
		// once: nothing may be written to them from here after it.
		// What waits for a commit from now on fails (the connection
		// to NATS is closed), and its clients are not acknowledged.
		defer s.dur.commit.Hold()()
	}
	if err := node.Close(); err != nil {
		s.log.Warn().Err(err).Msg("leaving the cluster")
	}
}

// clusterNode returns the node while this broker is in its cluster.
func (s *Server) clusterNode() *cluster.Node {
	if s.cluster == nil {
		return nil
	}
	return s.cluster.node.Load()
}

// toCluster sends a message this node routed to the nodes that want it,
// and reports whether it went: the broker's own topics ($SYS) stay on
// their node. The node copies what it keeps past the call: m may be in
// a read buffer.
//
// When the node's outgoing queue is full (another node's delivery is
// behind and paused this one's sending, cluster/pause.go), a client's
// reader waits for room, outside the bound on readers (mayBlock), as it
// would for a subscriber's full outbox here: up to maxStall for QoS 0,
// clusterWait for QoS 1 and 2, then the message is dropped and counted.
// Nothing else waits: the broker's own messages (wills, a bridge's state,
// Server.Publish) may come from goroutines others wait for, and a QoS 2
// message from a stored session is routed with a persistence group open
// (conn.committing). owner is the publishing connection, nil for the
// broker's own messages.
func (s *Server) toCluster(m *session.Message, owner *conn) bool {
	if !cluster.Crosses(m.Topic) {
		return false
	}
	node := s.clusterNode()
	if node == nil {
		return false
	}
	if owner != nil && owner.fwd != nil && m.QoS == 2 && node.Wants(m.Topic) {
		// A new QoS 2 message of a stored session: stamped, and sent once
		// the store holds it (forwardNew). A retained one that no node
		// wants goes to the retained stream at once, below, unstamped.
		owner.fwd.stamp, owner.fwd.msg = node.NewStamp(), m
		return true
	}
	var err error
	cm := clusterMessage(m)
	switch {
	case owner != nil && m.QoS > 0 && s.replicated() != nil:
		err = s.toClusterConfirmed(node, &cm, owner)
	case owner == nil || owner.committing:
		err = node.Publish(&cm)
	case m.QoS == 0:
		err = node.PublishWaiting(&cm, maxStall, owner.mayBlock)
	default:
		err = node.PublishWaiting(&cm, clusterWait, owner.mayBlock)
	}
	return err == nil
}

// clusterMessage is m as it goes to the other nodes. It shares m's topic
// and payload.
func clusterMessage(m *session.Message) cluster.Message {
	cm := cluster.Message{Topic: m.Topic, Payload: m.Payload, QoS: m.QoS, Retain: m.Retain, Origin: m.Origin}
	if m.Properties != nil || m.Expiry != 0 {
		// The other nodes count a message's expiry from when it reaches
		// them: it travels as what is left of it.
		p := forwardProperties(m, nil)
		cm.Properties = &p
	}
	return cm
}

// clusterWait bounds how long a client's QoS 1 or 2 message waits for
// room in the cluster's outgoing queue before it is dropped.
const clusterWait = 5 * time.Second

// fromCluster routes a message another node published to this node's
// clients but its share groups; one that came for a share group
// (cluster_share.go) goes to that group only. A retained message is kept
// when it comes from the replicated stream (keepRetained), not here. It
// runs on the cluster connection's goroutine; nothing it does waits for
// a client or the disk.
func (s *Server) fromCluster(cm *cluster.Message) {
	if s.closing.Load() {
		return
	}
	if err := s.topics.ValidTopicName(cm.Topic); err != nil || cm.QoS > maxQoS {
		s.stats.clusterDropped.Add(1)
		return
	}
	s.stats.clusterIn.Add(1)
	r := routerPool.Get().(*router)
	var m *session.Message
	if cm.Properties == nil && cm.Group == "" {
		// Routed as a client's transient message is: its topic and
		// payload, in the node's batch, are copied only by whatever keeps
		// the message (encoded.kept).
		m = &r.msg
		m.Topic, m.Payload, m.QoS, m.Retain, m.Origin = cm.Topic, cm.Payload, cm.QoS, cm.Retain, cm.Origin
	} else {
		var p packets.Properties
		if cm.Properties != nil {
			p = *cm.Properties
		}
		topic, payload := cm.Topic, cm.Payload
		if cm.Group == "" { // from a batch: kept, so copied out of it
			topic, payload = strings.Clone(topic), bytes.Clone(payload)
		}
		m = newMessage(topic, payload, cm.QoS, cm.Retain, &p, cm.Origin)
	}
	if cm.Group != "" {
		routerPool.Put(r)
		s.toShareGroup(m, cm.Group, cm.Filter)
		return
	}
	r.remote, r.noShares = true, true
	if s.replicated() != nil {
		// Stamps are kept only by the replicated store: before this node
		// has it (clusterRejoined), its deliveries are at least once.
		r.stamp = cm.Stamp
	}
	s.routeWith(r, m, nil)
	r.remote, r.noShares, r.stamp = false, false, persistence.Stamp{}
	r.msg = session.Message{}
	routerPool.Put(r)
}

// keepRetained keeps a retained message read from the cluster's
// replicated stream (its own node's included), in the stream's order,
// which every node applies alike: it is stored, or deleted by an empty
// payload, never routed (its live copy was, by fromCluster).
func (s *Server) keepRetained(cm *cluster.Message) {
	if s.closing.Load() || s.topics.ValidTopicName(cm.Topic) != nil || cm.QoS > maxQoS {
		return
	}
	var p packets.Properties
	if cm.Properties != nil {
		p = *cm.Properties
	}
	if p.Has(packets.PropMessageExpiry) {
		// What was left of the interval when sent, less the time since.
		age := uint32(min(cm.Age/time.Second, 1<<32-1))
		if age >= p.MessageExpiry {
			s.storeRetained(newMessage(cm.Topic, nil, 0, true, &packets.Properties{}, cm.Origin), nil)
			return
		}
		p.MessageExpiry -= age
	}
	s.storeRetained(newMessage(cm.Topic, cm.Payload, cm.QoS, true, &p, cm.Origin), nil)
}

// fromHere reports whether what c's reader publishes goes to the other
// nodes of a cluster: all but what a bridge brings in from its remote,
// which the same bridge on each node brings in itself (bridges in a
// cluster). c is nil for the broker's own messages, which go.
func (c *conn) fromHere() bool { return c == nil || c.link() == nil }

// ClusterState is this node's view of its cluster, for the JSON API and
// metrics.
type ClusterState struct {
	Name      string `json:"name"`
	Node      string `json:"node"`
	Connected bool   `json:"connected"`
	// Filters are the filters this node's clients subscribe to, each
	// wanted from the other nodes once.
	Filters int `json:"filters"`
	// MessagesIn and MessagesOut count the messages received from and
	// sent to the other nodes. DroppedOut counts those not sent to them
	// (the outgoing queue full past a publisher's wait, NATS refusing
	// them, a topic too long for a subject); DroppedIn those from them not
	// delivered here (the receiving queue full, unreadable); Dropped is
	// both.
	MessagesIn  uint64 `json:"messages_in"`
	MessagesOut uint64 `json:"messages_out"`
	Dropped     uint64 `json:"dropped"`
	DroppedIn   uint64 `json:"dropped_in"`
	DroppedOut  uint64 `json:"dropped_out"`
	// BatchesIn and BatchesOut count the batches (one NATS message each,
	// many messages) received from and sent to the other nodes.
	BatchesIn  uint64 `json:"batches_in"`
	BatchesOut uint64 `json:"batches_out"`
	// Routes is the number of filters the other nodes want that this
	// node holds in its route table (bounded per node), Peers the nodes
	// it holds them for; RouteResyncs counts the whole tables it asked
	// of them (a gap, a node new or restarted).
	Routes       int    `json:"routes"`
	Peers        int    `json:"peers"`
	RouteResyncs uint64 `json:"route_resyncs"`
	// PausesSent counts the pauses this node asked of the others, its
	// delivery behind, PausesReceived those it got from them; Held is the
	// time its sending was held by them, in seconds. PublishWaits counts
	// the messages of its clients that waited for room in the outgoing
	// queue, PublishWaited their time, in seconds.
	PausesSent     uint64  `json:"pauses_sent"`
	PausesReceived uint64  `json:"pauses_received"`
	Held           float64 `json:"held_seconds"`
	PublishWaits   uint64  `json:"publish_waits"`
	PublishWaited  float64 `json:"publish_waited_seconds"`
	Reconnects     uint64  `json:"reconnects"`
	// StoreReady reports the replicated store reachable and this node's
	// own records settled (its kept sessions claimed, its wills swept):
	// it can claim client ids, and so accept clients.
	StoreReady bool `json:"store_ready"`
	// TakeoversIn counts client ids this node took over from other
	// nodes, TakeoversOut those it gave up to them; Refused the clients
	// refused because their id could not be claimed.
	TakeoversIn  uint64 `json:"takeovers_in"`
	TakeoversOut uint64 `json:"takeovers_out"`
	Refused      uint64 `json:"refused"`
	// Adopted counts the persistent sessions this node read from the
	// replicated store for clients whose node was gone (cluster.sessions:
	// replicated).
	Adopted uint64 `json:"sessions_adopted"`
	// StoreCommits counts the commits that wrote to the replicated store
	// (cluster.sessions: replicated), StoreRoundTrips the atomic batches
	// they sent, each confirmed by a quorum of its replicas (one a commit
	// of up to 1,000 records), StoreRecords the records written.
	StoreCommits    uint64 `json:"store_commits"`
	StoreRoundTrips uint64 `json:"store_round_trips"`
	StoreRecords    uint64 `json:"store_records"`
	// QoS2Resent counts the QoS 2 messages routed again under their stamp
	// (their publisher sent them again before the nodes confirmed them),
	// QoS2Duplicates the copies a session did not take again, remembering
	// their stamp, StampsEvicted the stamps a session forgot before their
	// time, past its bound (cluster_qos2.go).
	QoS2Resent     uint64 `json:"qos2_resent"`
	QoS2Duplicates uint64 `json:"qos2_duplicates"`
	StampsEvicted  uint64 `json:"stamps_evicted"`
	// Nodes is the nodes this one sees beating, itself included; CutOff
	// reports this node cut off from the store (it closed its clients'
	// connections). DeadNodes counts the nodes it found dead, WillsSwept
	// the wills of their clients it published, LateBeats the nodes whose
	// beats were late but that answered they were alive.
	Nodes      int    `json:"nodes"`
	CutOff     bool   `json:"cut_off"`
	DeadNodes  uint64 `json:"dead_nodes"`
	WillsSwept uint64 `json:"wills_swept"`
	LateBeats  uint64 `json:"late_beats"`
}

// Cluster returns this node's state in its cluster, and false when the
// broker is not in one (Options.Cluster).
func (s *Server) Cluster() (ClusterState, bool) {
	l := s.cluster
	if l == nil {
		return ClusterState{}, false
	}
	l.mu.Lock()
	st := ClusterState{Name: l.cfg.Name, Node: l.cfg.NodeName, Filters: len(l.wanted)}
	node := l.node.Load()
	l.mu.Unlock()
	st.MessagesIn, st.DroppedIn = s.stats.clusterIn.Load(), s.stats.clusterDropped.Load()
	st.Refused, st.Adopted = s.stats.clusterRefused.Load(), s.stats.clusterAdopted.Load()
	st.QoS2Resent, st.QoS2Duplicates = s.stats.qos2Resent.Load(), s.stats.qos2Duplicates.Load()
	st.StampsEvicted = s.stats.stampsEvicted.Load()
	if js := l.sessions.Load(); js != nil {
		w := js.Writes()
		st.StoreCommits, st.StoreRoundTrips, st.StoreRecords = w.Commits, w.RoundTrips, w.Records
	}
	if node != nil {
		ns := node.Stats()
		st.Node, st.Connected = node.Name(), ns.Connected
		st.MessagesOut, st.Reconnects = ns.MessagesOut, ns.Reconnects
		st.BatchesIn, st.BatchesOut = ns.BatchesIn, ns.BatchesOut
		st.Routes, st.Peers, st.RouteResyncs = ns.Routes, ns.Peers, ns.RouteResyncs
		st.DroppedIn += ns.DroppedIn + ns.Malformed + ns.SharedUnwanted
		st.DroppedOut = ns.DroppedOut + ns.TooLong
		st.PausesSent, st.PausesReceived, st.Held = ns.PausesSent, ns.PausesIn, ns.Held.Seconds()
		st.PublishWaits, st.PublishWaited = ns.PublishWaits, ns.PublishWaited.Seconds()
		st.StoreReady, st.TakeoversIn, st.TakeoversOut = ns.StoreReady && l.accepting.Load(), ns.Takeovers, ns.HandedOver
		st.Nodes, st.CutOff, st.DeadNodes, st.WillsSwept = ns.NodesAlive, ns.CutOff, ns.DeadNodes, ns.WillsSwept
		st.LateBeats = ns.LateBeats
	}
	st.Dropped = st.DroppedIn + st.DroppedOut
	return st, true
}
