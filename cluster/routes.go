package cluster

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// The route table: which other nodes want which topics. Each node
// announces the filters its clients subscribe to (Want, WantShared) on
// the cluster's routes subject, one add or remove each, numbered by a
// sequence within the node's generation (its start); every
// summaryEvery it publishes a summary (generation, last sequence), so
// that a node that missed an announcement, or a node new to it or
// restarted, notices and asks for the whole table (a snapshot, request
// and reply). A node that stops announcing for NodeTimeout, says
// goodbye, or is found dead (liveness.go) has its routes dropped.
//
// Each node keeps the others' filters in a trie (routeTrie): Publish
// matches a topic once and queues the message for the nodes it names,
// in batches (batch.go). A peer's table is bounded (maxPeerRoutes,
// maxPeerRouteBytes): past it the peer is taken to want every topic,
// which costs traffic, not memory.

const (
	// summaryEvery is how often a node publishes its summary: a lost
	// announcement is repaired within about that long.
	summaryEvery = time.Second
	// snapWait bounds the wait for each part of a snapshot.
	snapWait = 2 * time.Second
	// snapPart is the most filter bytes in one part of a snapshot.
	snapPart = 256 << 10
	// maxPeerRoutes and maxPeerRouteBytes bound the filters held for one
	// other node.
	maxPeerRoutes     = 1 << 18
	maxPeerRouteBytes = 16 << 20
	// maxPending and maxPendingBytes bound the announcements held while a
	// snapshot is awaited; past them they are dropped, and the next
	// summary asks again.
	maxPending      = 4096
	maxPendingBytes = 1 << 20
	// routeOverhead is what a filter is counted as beyond its length.
	routeOverhead = 64
)

// Kinds of route messages.
const (
	routeAdd     = 'a'
	routeRemove  = 'd'
	routeSummary = 's'
	routeBye     = 'b'
	routeHello   = 'h' // a summary asking every node for its own at once
)

func routesSubject(cluster string) string      { return "mqttd." + cluster + ".routes" }
func snapSubject(cluster, node string) string  { return "mqttd." + cluster + ".snap." + node }
func batchSubject(cluster, node string) string { return "mqttd." + cluster + ".to." + node }

// routeKey is one announced filter: wanted plainly, or by a share group.
type routeKey struct {
	filter string
	shared bool
}

// routeMsg is a decoded route message.
type routeMsg struct {
	kind     byte
	name     string
	gen, seq uint64
	key      routeKey
}

// routes is a node's route table: its own announced filters and the
// other nodes'.
type routes struct {
	// mu guards what follows; Publish read-locks it to match.
	mu   sync.RWMutex
	trie routeTrie
	// gen is this node's generation, seq its last announcement's number,
	// local its announced filters with their use counts.
	gen   uint64
	seq   uint64
	local map[routeKey]int
	// peers are the other nodes by name, slots by slot; everything the
	// peers taken to want every topic.
	peers      map[string]*peer
	slots      [maxPeers]*peer
	everything peerSet
	// held counts the filters held for the peers; maxFilters and
	// maxBytes bound one peer's (maxPeerRoutes, maxPeerRouteBytes).
	held                 int
	maxFilters, maxBytes int

	resyncs, overflows, malformed atomic.Uint64
	// syncing counts the resync goroutines, waited for at Close.
	syncing sync.WaitGroup
}

// peer is another node as the route table knows it.
type peer struct {
	name, subject string
	slot          int
	gen, seq      uint64
	filters       map[routeKey]struct{}
	bytes         int
	seen          time.Time
	// syncing is set while a snapshot is awaited; pending holds the
	// announcements that came meanwhile.
	syncing      bool
	pending      []routeMsg
	pendingBytes int
	// all is set while the peer is taken to want every topic.
	all bool
	// dead is set while a node found dead keeps its routes for a while
	// (HoldDeadRoutes): what matches them fails its confirmation.
	dead bool
}

// startRoutes subscribes to the other nodes' announcements and to this
// node's snapshot requests.
func (n *Node) startRoutes() error {
	rt := &n.routes
	rt.gen = uint64(time.Now().UnixNano())
	rt.local = map[routeKey]int{}
	rt.peers = map[string]*peer{}
	rt.maxFilters, rt.maxBytes = maxPeerRoutes, maxPeerRouteBytes
	if _, err := n.nc.Subscribe(routesSubject(n.cluster), n.onRoutes); err != nil {
		return err
	}
	_, err := n.nc.Subscribe(snapSubject(n.cluster, n.name), n.onSnapRequest)
	return err
}

// announce counts one more (d 1) or one fewer (d -1) use of key by this
// node, and announces the first and the last.
func (n *Node) announce(key routeKey, d int) {
	rt := &n.routes
	rt.mu.Lock()
	defer rt.mu.Unlock()
	c := rt.local[key] + d
	switch {
	case c < 0:
		return
	case c == 0:
		delete(rt.local, key)
	default:
		rt.local[key] = c
	}
	if c > 1 || (c == 1 && d < 0) {
		return
	}
	kind := byte(routeAdd)
	if c == 0 {
		kind = routeRemove
	}
	if key.shared {
		// This node's share groups get their messages through NATS too.
		rt.trie.share(key.filter, d)
	}
	rt.seq++
	n.publishRoute(routeMsg{kind: kind, name: n.name, gen: rt.gen, seq: rt.seq, key: key})
}

// publishRoute sends m on the routes subject; one lost is repaired by
// the next summary.
func (n *Node) publishRoute(m routeMsg) {
	if err := n.nc.Publish(routesSubject(n.cluster), appendRouteMsg(nil, m)); err != nil && n.warn.allow() {
		n.log.Warn().Err(err).Msg("cluster: route announcement not sent (the next summary repairs it)")
	}
}

// summarize publishes this node's summary, a hello when asked.
func (n *Node) summarize(kind byte) {
	rt := &n.routes
	rt.mu.RLock()
	m := routeMsg{kind: kind, name: n.name, gen: rt.gen, seq: rt.seq}
	rt.mu.RUnlock()
	n.publishRoute(m)
}

// routesLoop publishes the summary every summaryEvery and drops the
// peers silent for NodeTimeout, until Close. With HoldDeadRoutes it
// marks them dead instead: they go once found dead and taken over
// (watchOthers), or when they speak again. Dropping them for silence
// alone could come before the takeover has announced their sessions'
// subscriptions from their new nodes (this node cut off meanwhile, or
// JetStream electing leaders), and a confirmed send would match no node.
func (n *Node) routesLoop() {
	defer n.live.Done()
	n.summarize(routeHello)
	tick := time.NewTicker(summaryEvery)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-n.stopLive:
			n.summarize(routeBye)
			return
		}
		n.summarize(routeSummary)
		rt := &n.routes
		now := time.Now()
		rt.mu.Lock()
		for _, p := range rt.peers {
			silent := now.Sub(p.seen)
			switch {
			case silent <= n.timeout:
			case n.deadGrace == 0:
				n.log.Info().Str("peer", p.name).Msg("cluster: node silent for node_timeout: its routes dropped")
				rt.dropLocked(p)
			case !p.dead:
				n.log.Info().Str("peer", p.name).Msg("cluster: node silent for node_timeout: its routes held until its sessions are taken over")
				p.dead = true
			}
		}
		rt.mu.Unlock()
	}
}

// dropPeer forgets node's routes: it was found dead.
// HoldDeadRoutes makes a node found dead keep its routes for grace after
// its takeover (Hooks.NodeDead) instead of losing them at once: a
// confirmed send matching them fails, and its publisher sends it again,
// by then to the nodes that took the dead node's sessions over, rather
// than it going to no node and being confirmed. Call it before Watch.
func (n *Node) HoldDeadRoutes(grace time.Duration) { n.deadGrace = grace }

// markDead marks node's routes dead, or drops them without
// HoldDeadRoutes.
func (n *Node) markDead(node string) {
	if n.deadGrace == 0 {
		n.dropPeer(node)
		return
	}
	rt := &n.routes
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if p := rt.peers[node]; p != nil {
		p.dead = true
	}
}

// dropDead drops node's routes if they are still those marked dead.
func (n *Node) dropDead(node string) {
	rt := &n.routes
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if p := rt.peers[node]; p != nil && p.dead {
		rt.dropLocked(p)
	}
}

func (n *Node) dropPeer(node string) {
	rt := &n.routes
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if p := rt.peers[node]; p != nil {
		rt.dropLocked(p)
	}
}

// onRoutes takes another node's announcement, on nats.go's goroutine of
// the routes subscription.
func (n *Node) onRoutes(msg *nats.Msg) {
	m, err := decodeRouteMsg(msg.Data)
	if err != nil {
		n.routes.malformed.Add(1)
		n.warnMalformed(err, msg.Subject)
		return
	}
	if m.name == n.name {
		return
	}
	if m.kind == routeHello {
		n.summarize(routeSummary)
	}
	rt := &n.routes
	rt.mu.Lock()
	defer rt.mu.Unlock()
	p := rt.peers[m.name]
	if p != nil && p.dead {
		// Back under its name: a new node, whatever it announced before.
		rt.dropLocked(p)
		p = nil
	}
	if m.kind == routeBye {
		switch {
		case p == nil:
		case n.deadGrace > 0:
			p.dead = true
			select {
			case n.gone <- m.name:
			default: // the watch finds it dead
			}
		default:
			rt.dropLocked(p)
		}
		return
	}
	if p == nil {
		if p = rt.newPeerLocked(n.cluster, m.name); p == nil {
			if n.warn.allow() {
				n.log.Warn().Str("peer", m.name).Int("max_peers", maxPeers).Msg("cluster: too many nodes, one ignored")
			}
			return
		}
	}
	p.seen = time.Now()
	switch {
	case p.syncing:
		size := len(m.key.filter) + routeOverhead
		if (m.kind == routeAdd || m.kind == routeRemove) && len(p.pending) < maxPending && p.pendingBytes+size <= maxPendingBytes {
			p.pending = append(p.pending, m)
			p.pendingBytes += size
		}
	case m.kind == routeSummary || m.kind == routeHello:
		if m.gen == p.gen && m.seq == p.seq {
			return
		}
		if m.seq == 0 {
			// A node that never announced: nothing to ask for.
			rt.replaceLocked(p, m.gen, 0, nil, false)
			return
		}
		n.resyncLocked(p)
	case m.gen != p.gen || m.seq != p.seq+1:
		n.resyncLocked(p)
	default:
		rt.applyLocked(p, m)
	}
}

// newPeerLocked makes the peer of name in a free slot, nil when there is
// none; rt.mu is held.
func (rt *routes) newPeerLocked(cluster, name string) *peer {
	for i, s := range rt.slots {
		if s == nil {
			p := &peer{name: name, subject: batchSubject(cluster, name), slot: i, filters: map[routeKey]struct{}{}}
			rt.slots[i], rt.peers[name] = p, p
			return p
		}
	}
	return nil
}

// applyLocked applies the next announcement of p; rt.mu is held.
func (rt *routes) applyLocked(p *peer, m routeMsg) {
	p.seq = m.seq
	if p.all {
		return
	}
	_, had := p.filters[m.key]
	size := len(m.key.filter) + routeOverhead
	switch {
	case m.kind == routeAdd && !had:
		if len(p.filters) >= rt.maxFilters || p.bytes+size > rt.maxBytes {
			rt.allLocked(p)
			return
		}
		p.filters[m.key] = struct{}{}
		p.bytes += size
		rt.held++
		rt.insertLocked(p, m.key)
	case m.kind == routeRemove && had:
		delete(p.filters, m.key)
		p.bytes -= size
		rt.held--
		if m.key.shared {
			rt.trie.share(m.key.filter, -1)
		} else {
			rt.trie.remove(m.key.filter, p.slot)
		}
	}
}

func (rt *routes) insertLocked(p *peer, key routeKey) {
	if key.shared {
		rt.trie.share(key.filter, 1)
	} else {
		rt.trie.add(key.filter, p.slot)
	}
}

// clearLocked takes p's filters out of the trie; rt.mu is held.
func (rt *routes) clearLocked(p *peer) {
	for key := range p.filters {
		if key.shared {
			rt.trie.share(key.filter, -1)
		} else {
			rt.trie.remove(key.filter, p.slot)
		}
	}
	rt.held -= len(p.filters)
	p.filters, p.bytes = map[routeKey]struct{}{}, 0
}

// allLocked takes p to want every topic, its table past the bounds;
// rt.mu is held.
func (rt *routes) allLocked(p *peer) {
	rt.clearLocked(p)
	p.all = true
	rt.everything.add(p.slot)
	rt.overflows.Add(1)
}

// replaceLocked makes keys p's whole table at (gen, seq); over the
// bounds (all) p wants every topic. rt.mu is held.
func (rt *routes) replaceLocked(p *peer, gen, seq uint64, keys []routeKey, all bool) {
	rt.clearLocked(p)
	p.gen, p.seq, p.all = gen, seq, all
	rt.everything.remove(p.slot)
	if all {
		rt.allLocked(p)
		return
	}
	for _, key := range keys {
		if _, dup := p.filters[key]; dup {
			continue
		}
		p.filters[key] = struct{}{}
		p.bytes += len(key.filter) + routeOverhead
		rt.insertLocked(p, key)
	}
	rt.held += len(p.filters)
}

// dropLocked forgets p; rt.mu is held.
func (rt *routes) dropLocked(p *peer) {
	rt.clearLocked(p)
	rt.everything.remove(p.slot)
	delete(rt.peers, p.name)
	rt.slots[p.slot] = nil
}

// resyncLocked asks p for its whole table, on a goroutine of its own;
// rt.mu is held.
func (n *Node) resyncLocked(p *peer) {
	if n.closed.Load() {
		return
	}
	p.syncing, p.pending, p.pendingBytes = true, nil, 0
	n.routes.resyncs.Add(1)
	n.routes.syncing.Add(1)
	go n.resync(p)
}

// resync fetches p's snapshot and applies it, then the announcements
// that came meanwhile; on failure the next summary asks again.
func (n *Node) resync(p *peer) {
	defer n.routes.syncing.Done()
	gen, seq, keys, all, err := n.fetchSnapshot(p.name)
	rt := &n.routes
	rt.mu.Lock()
	defer rt.mu.Unlock()
	pending := p.pending
	p.syncing, p.pending, p.pendingBytes = false, nil, 0
	if rt.peers[p.name] != p {
		return // dropped meanwhile
	}
	if err != nil {
		if n.warn.allow() {
			n.log.Warn().Err(err).Str("peer", p.name).Msg("cluster: route snapshot failed, asking again at the next summary")
		}
		p.gen, p.seq = 0, 0 // the next summary differs
		return
	}
	rt.replaceLocked(p, gen, seq, keys, all)
	for _, m := range pending {
		switch {
		case m.gen != gen || m.seq <= p.seq:
		case m.seq == p.seq+1:
			rt.applyLocked(p, m)
		default:
			p.gen, p.seq = 0, 0 // a gap: the next summary asks again
			return
		}
	}
}

// errSnapshot is a snapshot that did not come whole.
var errSnapshot = errors.New("cluster: route snapshot incomplete or malformed")

// fetchSnapshot asks node for its table: parts on an inbox of this
// node's, the last one flagged.
func (n *Node) fetchSnapshot(node string) (gen, seq uint64, keys []routeKey, all bool, err error) {
	inbox := n.nc.NewRespInbox()
	sub, err := n.nc.SubscribeSync(inbox)
	if err != nil {
		return 0, 0, nil, false, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := n.nc.PublishRequest(snapSubject(n.cluster, node), inbox, nil); err != nil {
		return 0, 0, nil, false, err
	}
	n.routes.mu.RLock()
	maxFilters, maxBytes := n.routes.maxFilters, n.routes.maxBytes
	n.routes.mu.RUnlock()
	bytes := 0
	for part := 0; ; part++ {
		msg, err := sub.NextMsg(snapWait)
		if err != nil {
			return 0, 0, nil, false, err
		}
		g, s, last, ks, err := decodeSnapPart(msg.Data)
		if err != nil || (part > 0 && (g != gen || s != seq)) {
			n.routes.malformed.Add(1)
			return 0, 0, nil, false, errSnapshot
		}
		gen, seq = g, s
		for _, k := range ks {
			bytes += len(k.filter) + routeOverhead
		}
		if !all {
			keys = append(keys, ks...)
		}
		if len(keys) > maxFilters || bytes > maxBytes {
			all, keys = true, nil
		}
		if last {
			return gen, seq, keys, all, nil
		}
	}
}

// onSnapRequest answers a request for this node's table, in parts.
func (n *Node) onSnapRequest(msg *nats.Msg) {
	if msg.Reply == "" {
		return
	}
	rt := &n.routes
	rt.mu.RLock()
	gen, seq := rt.gen, rt.seq
	keys := make([]routeKey, 0, len(rt.local))
	for k := range rt.local {
		keys = append(keys, k)
	}
	rt.mu.RUnlock()
	for {
		part, size := keys, 0
		for i, k := range keys {
			if size += len(k.filter) + 4; size > snapPart && i > 0 {
				part = keys[:i]
				break
			}
		}
		keys = keys[len(part):]
		if err := n.nc.Publish(msg.Reply, appendSnapPart(nil, gen, seq, len(keys) == 0, part)); err != nil {
			return
		}
		if len(keys) == 0 {
			return
		}
	}
}
