package cluster

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Liveness and wills. Each node beats in the nodes bucket every
// NodeTimeout/5; a node that sees another's record unchanged for
// NodeTimeout, and that does not answer when asked over core NATS
// whether it is alive (aliveSubject), takes it for dead and sweeps its
// wills: the wills bucket
// holds a record per connected client with a will, under its node's
// name, and whichever node takes a record out first (compare-and-swap on
// its revision) publishes that will, so it is published once in the
// whole cluster. A node whose own beats have failed for NodeTimeout is
// cut off (the minority side of a netsplit, or NATS gone): it closes its
// clients' connections, leaving their wills to the nodes that can still
// write the store, and refuses clients until it can beat again.
//
// Time is each node's own monotonic clock: a record is dead when it has
// not changed for NodeTimeout as one node sees it, whatever the clocks of
// the others say.

// DefaultNodeTimeout is Config.NodeTimeout's default: longer than
// JetStream takes to elect a new leader for a bucket when a NATS server
// dies (up to about 10 s), so that the survivors do not take themselves
// for cut off meanwhile.
const DefaultNodeTimeout = 15 * time.Second

// Hooks are what the broker does when the cluster's membership changes;
// each runs on a goroutine of its own, one at a time.
type Hooks struct {
	// NodeDead is called for a node found dead, after its wills were
	// swept (SweepWills), and, with HoldDeadRoutes, for a node that said
	// goodbye (then again if it is found dead later: a second call finds
	// nothing left to take).
	NodeDead func(node string)
	// CutOff is called when this node has failed to reach the store for
	// NodeTimeout; Rejoined when it can again (and once its store is
	// first bound).
	CutOff, Rejoined func()
}

// nodeKey is a node name's key: base64url, as names may hold any
// printable character.
func nodeKey(name string) string { return base64.RawURLEncoding.EncodeToString([]byte(name)) }

func nodesBucket(cluster string) string { return "mqttd_" + cluster + "_nodes" }
func willsBucket(cluster string) string { return "mqttd_" + cluster + "_wills" }

// seen is what a node knows of another's beats.
type seen struct {
	name string
	rev  uint64
	at   time.Time
	dead bool
	// again: found dead before, its takeover given up (handBack), so
	// not counted again.
	again bool
}

// Watch starts the node's beats and its watch over the others, calling
// h's functions as nodes die and this node loses and regains the
// store; it returns at once. Call it once, before any client connects.
func (n *Node) Watch(h Hooks) {
	n.hooks = h
	n.live.Add(1)
	go n.beat()
}

// CutOff reports whether this node has lost the store for NodeTimeout.
func (n *Node) CutOff() bool { return n.cut.Load() }

// Closing is closed when Close starts: hooks that retry stop then.
func (n *Node) Closing() <-chan struct{} { return n.stopLive }

// Retry calls try, and again each second while it reports false (the
// store not answering), until it reports true; Retry then reports true,
// or false when the node closes first. A try that gives up (the node cut
// off) reports true.
func (n *Node) Retry(try func() bool) bool {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for !try() {
		select {
		case <-n.stopLive:
			return false
		case <-tick.C:
		}
	}
	return true
}

// beat is the liveness goroutine: until Close, it writes this node's
// record every interval and reads the others'.
func (n *Node) beat() {
	defer n.live.Done()
	select {
	case <-n.storeDone:
	case <-n.stopLive:
		return
	}
	st := n.store.Load()
	if st == nil {
		return
	}
	n.readRetained(st)
	n.run(n.hooks.Rejoined)
	interval := max(n.timeout/5, 50*time.Millisecond)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	others := map[string]*seen{}
	lastOK := time.Now()
	for {
		select {
		case <-n.stopLive:
			return
		case name := <-n.gone:
			n.left(st, name)
			continue
		case <-tick.C:
		}
		now := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), max(interval, time.Second))
		_, err := st.nodes.Put(ctx, nodeKey(n.name), []byte(n.name))
		if err == nil {
			lastOK = now
			if n.cut.CompareAndSwap(true, false) {
				n.log.Warn().Msg("cluster: the store is reachable again: accepting clients once settled")
				n.run(func() {
					// What was set while this node was away, first.
					n.readRetained(st)
					if f := n.hooks.Rejoined; f != nil {
						f()
					}
				})
			}
			wctx, wcancel := context.WithTimeout(context.Background(), storeTimeout)
			n.watchOthers(wctx, st, others, now)
			wcancel()
		} else if now.Sub(lastOK) > n.timeout && n.cut.CompareAndSwap(false, true) {
			n.stats.cutOffs.Add(1)
			n.log.Error().Err(err).Dur("node_timeout", n.timeout).
				Msg("cluster: cut off from the store: closing client connections (their wills are the other nodes' to publish) and refusing clients until it is back")
			n.run(n.hooks.CutOff)
		}
		cancel()
	}
}

// run calls f, if set, on a goroutine Close waits for, one at a time.
func (n *Node) run(f func()) {
	if f == nil {
		return
	}
	n.live.Add(1)
	go func() {
		defer n.live.Done()
		n.hookMu.Lock()
		defer n.hookMu.Unlock()
		f()
	}()
}

// watchOthers reads the other nodes' records and sweeps those unchanged
// for NodeTimeout.
func (n *Node) watchOthers(ctx context.Context, st *kvStore, others map[string]*seen, now time.Time) {
	keys, err := st.nodes.Keys(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return
	}
	n.takeHandedBack(others, now)
	alive := 0
	for _, k := range keys {
		if k == nodeKey(n.name) {
			continue
		}
		e, err := st.nodes.Get(ctx, k)
		if err != nil {
			continue
		}
		s := others[k]
		if s == nil || s.rev != e.Revision() {
			others[k] = &seen{name: string(e.Value()), rev: e.Revision(), at: now}
			alive++
			continue
		}
		if s.dead || now.Sub(s.at) <= n.timeout {
			if !s.dead {
				alive++
			}
			continue
		}
		name, rev := string(e.Value()), e.Revision()
		// The fence is read before the question: a next life of the
		// node that claims anything after it has answered by then.
		fence, err := ownersFence(ctx, st)
		if err != nil {
			continue
		}
		if n.answers(name) {
			// Its beats are late in the store (a leader election, a
			// replica behind) while it serves its clients: taking its
			// sessions and wills now would make two owners.
			s.at = now
			alive++
			n.stats.lateBeats.Add(1)
			n.log.Warn().Str("late_node", name).Dur("node_timeout", n.timeout).
				Msg("cluster: a node's beats are late in the store, but it answers: not taken for dead")
			continue
		}
		s.dead = true
		n.setFence(name, fence)
		n.markDead(name)
		if !s.again {
			n.stats.deadNodes.Add(1)
		}
		n.log.Warn().Str("dead_node", name).Dur("node_timeout", n.timeout).Msg("cluster: node found dead: publishing its clients' wills")
		n.run(func() { n.takeOver(st, name, rev) })
	}
	n.nodesAlive.Store(int64(alive + 1))
	for k, s := range others {
		if contains(keys, k) {
			continue
		}
		if n.deadGrace > 0 {
			// Swept and forgotten (by this node or another, which may
			// have done it before this one found it dead): its sessions
			// are taken over, and its routes go once the nodes that took
			// them had time to say so.
			n.markDead(s.name)
			time.AfterFunc(n.deadGrace, func() { n.dropDead(s.name) })
		}
		delete(others, k)
	}
}

// handBack has the watch take node name, found dead here, for dead
// afresh: its takeover was given up.
func (n *Node) handBack(name string) {
	n.handBackMu.Lock()
	n.handedBack = append(n.handedBack, name)
	n.handBackMu.Unlock()
}

// takeHandedBack clears the dead mark of the nodes handed back, so that
// the watch finds them dead again after node_timeout while their
// records stay unchanged (no node swept them meanwhile).
func (n *Node) takeHandedBack(others map[string]*seen, now time.Time) {
	n.handBackMu.Lock()
	names := n.handedBack
	n.handedBack = nil
	n.handBackMu.Unlock()
	for _, name := range names {
		if s := others[nodeKey(name)]; s != nil && s.dead {
			s.dead, s.at, s.again = false, now, true
		}
	}
}

// ownersFence is the owners bucket's last revision.
func ownersFence(ctx context.Context, st *kvStore) (uint64, error) {
	status, err := st.owners.Status(ctx)
	if err != nil {
		return 0, err
	}
	bs, ok := status.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return 0, fmt.Errorf("cluster: owners bucket status of type %T", status)
	}
	return bs.StreamInfo().State.LastSeq, nil
}

// setFence records the owners bucket's revision before node was found
// dead (ClaimFrom).
func (n *Node) setFence(node string, rev uint64) {
	n.fenceMu.Lock()
	defer n.fenceMu.Unlock()
	if n.fences == nil {
		n.fences = make(map[string]uint64)
	}
	n.fences[node] = rev
}

// fence is the revision past which ClaimFrom takes nothing from node:
// none for a node not found dead here (this node's own previous life).
func (n *Node) fence(node string) uint64 {
	n.fenceMu.Lock()
	defer n.fenceMu.Unlock()
	if f, ok := n.fences[node]; ok {
		return f
	}
	return math.MaxUint64
}

// aliveSubject is where node answers that it is alive and not cut off.
func aliveSubject(cluster, node string) string {
	return string(appendLevel([]byte("mqttd."+cluster+".alive."), node))
}

// aliveTimeout bounds the wait for a node's answer that it is alive,
// aliveTries the times it is asked when it does not answer in time (a
// node busy on a loaded machine answers late, and taking it for dead
// then would make two owners of its sessions).
const (
	aliveTimeout = time.Second
	aliveTries   = 3
)

// answers asks node whether it is alive and not cut off.
func (n *Node) answers(node string) bool {
	for range aliveTries {
		m, err := n.nc.Request(aliveSubject(n.cluster, node), nil, aliveTimeout)
		switch {
		case err == nil:
			return len(m.Data) == 0
		case !errors.Is(err, nats.ErrTimeout):
			return false // no responders: nothing listens for it
		}
	}
	return false
}

// onAlive answers another node asking whether this one is alive: an
// empty answer, or "cut" while it is cut off (it has closed its
// clients' connections then, and its sessions are the others' to take).
func (n *Node) onAlive(m *nats.Msg) {
	var cut []byte
	if n.cut.Load() {
		cut = []byte("cut")
	}
	_ = m.Respond(cut)
}

// takeOver sweeps the wills of node name, found dead or gone, runs the
// NodeDead hook (the broker takes its sessions over), lets its held
// routes go after the grace, and forgets its beat record at revision rev.
func (n *Node) takeOver(st *kvStore, name string, rev uint64) {
	if !n.sweepDead(name) {
		// Cut off (or closing): its routes stay held, as its sessions may
		// have been taken by no one. Another node may sweep it, and its
		// routes go when its record does; but every other node may have
		// been cut off as well, and then none would ever take it over.
		// So the watch takes it for dead afresh once this node is back.
		n.handBack(name)
		return
	}
	if f := n.hooks.NodeDead; f != nil {
		f(name)
	}
	if n.deadGrace > 0 {
		time.AfterFunc(n.deadGrace, func() { n.dropDead(name) })
	}
	// Forgotten once swept, so that a node coming back under the name
	// starts anew.
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	_ = st.nodes.Purge(ctx, nodeKey(name), jetstream.LastRevision(rev))
}

// left takes over a node that said goodbye (its Close) when routes are
// held (HoldDeadRoutes, replicated sessions): its persistent sessions
// are taken over at once, not after node_timeout, and until they are,
// its routes stay held, so that a confirmed send for them is refused
// rather than going to no node. Its wills are not swept: it takes them
// out itself as it closes (the broker, not the clients, ended those
// connections), and the watch sweeps what a node that died while
// closing left, finding it dead. A store that does not answer leaves
// the sessions to that too.
func (n *Node) left(st *kvStore, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	fence, err := ownersFence(ctx, st)
	if err != nil {
		return
	}
	n.setFence(name, fence)
	n.log.Info().Str("left_node", name).Msg("cluster: node left: taking its sessions over")
	n.run(func() {
		if f := n.hooks.NodeDead; f != nil {
			f(name)
		}
		time.AfterFunc(n.deadGrace, func() { n.dropDead(name) })
	})
}

// sweepDead sweeps a dead node's wills, again each second while the
// store does not answer all of it, and reports whether it did; it gives
// up when this node closes or is cut off (then the records wait for a
// node that can reach them).
func (n *Node) sweepDead(name string) bool {
	swept := false
	n.Retry(func() bool {
		_, err := n.SweepWills(name, nil)
		swept = err == nil
		return swept || n.cut.Load()
	})
	return swept
}

func contains(keys []string, k string) bool {
	for _, x := range keys {
		if x == k {
			return true
		}
	}
	return false
}

// WillRef names one connection's will record in the cluster.
type WillRef struct {
	Key string
	Rev uint64
}

// willKey is the key of the will of connection seq (unique on this node
// for its life) of client id under node: each connection has its own
// record, so one client's connections, old and new, never share one.
func willKey(node, id, seq string) string { return nodeKey(node) + "." + ownerKey(id) + "." + seq }

// PutWill records the will of a connection of client id on this node
// (data as the broker encodes it), for TakeWill and DropWill.
func (n *Node) PutWill(id string, data []byte) (WillRef, error) {
	st := n.store.Load()
	if st == nil {
		return WillRef{}, ErrNoStore
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	key := willKey(n.name, id, n.incarnation+strconv.FormatUint(n.willSeq.Add(1), 36))
	rev, err := st.wills.Put(ctx, key, data)
	if err != nil {
		return WillRef{}, storeErr(err)
	}
	return WillRef{Key: key, Rev: rev}, nil
}

// TakeWill takes out will record ref, which this node is about to
// publish, and reports whether it did: false when another node took it
// first (it found this node dead, and published it). It returns an
// error, and the caller tries again or leaves the will to whoever can
// reach the store, when the store does not answer.
func (n *Node) TakeWill(ref WillRef) (bool, error) {
	st := n.store.Load()
	if st == nil {
		return false, ErrNoStore
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	err := st.wills.Purge(ctx, ref.Key, jetstream.LastRevision(ref.Rev), jetstream.PurgeTTL(markerTTL))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch) || isWrongLastSeq(err):
		return false, nil
	}
	return false, storeErr(err)
}

// DropWill takes out will record ref without publishing it (the client
// disconnected normally, or came back in time), without waiting: the
// releaser does it.
func (n *Node) DropWill(ref WillRef) {
	n.queueRelease(release{id: ref.Key, rev: ref.Rev, will: true})
}

// SweepWills takes out node's will records and hands each one this node
// took to the publisher SetWillPublisher set. want, if not nil, chooses
// the records to take: this node's own sweep leaves those of its live
// connections. It returns the number published, and an error when the
// records could not be read: the caller sweeps again later.
func (n *Node) SweepWills(node string, want func(ref WillRef, data []byte) bool) (int, error) {
	st := n.store.Load()
	publish := n.publishWill
	if st == nil || publish == nil {
		return 0, ErrNoStore
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*storeTimeout)
	defer cancel()
	w, err := st.wills.Watch(ctx, nodeKey(node)+".>", jetstream.IgnoreDeletes())
	if err != nil {
		return 0, storeErr(err)
	}
	var entries []jetstream.KeyValueEntry
	complete := false
	for e := range w.Updates() {
		if e == nil {
			complete = true
			break
		}
		entries = append(entries, e)
	}
	_ = w.Stop()
	if !complete {
		return 0, fmt.Errorf("%w: the wills of %s not read within %v", ErrNoStore, node, 4*storeTimeout)
	}
	published := 0
	var failed error
	for _, e := range entries {
		if want != nil && !want(WillRef{Key: e.Key(), Rev: e.Revision()}, e.Value()) {
			continue
		}
		taken, err := n.TakeWill(WillRef{Key: e.Key(), Rev: e.Revision()})
		if err != nil {
			failed = err // left for the next sweep
			continue
		}
		if taken {
			publish(e.Value())
			published++
		}
	}
	n.stats.willsSwept.Add(uint64(published))
	return published, failed
}

// SetWillPublisher sets what publishes a will record SweepWills took;
// call it before Watch.
func (n *Node) SetWillPublisher(f func(data []byte)) { n.publishWill = f }

// purgeOwnWills takes out this node's remaining will records at Close:
// the broker, not the clients, ends those connections, which leave no
// will.
func (n *Node) purgeOwnWills() {
	st := n.store.Load()
	if st == nil || !n.nc.IsConnected() {
		return // left to the others, who find this node dead
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*storeTimeout)
	defer cancel()
	keys, err := st.wills.ListKeysFiltered(ctx, nodeKey(n.name)+".>")
	if err != nil {
		return
	}
	// A few at a time, each with a timeout of its own: each is a round
	// trip, and a node with thousands of clients has thousands.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for k := range keys.Keys() {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			pctx, pcancel := context.WithTimeout(context.Background(), storeTimeout)
			defer pcancel()
			_ = st.wills.Purge(pctx, k, jetstream.PurgeTTL(markerTTL))
		}()
	}
	wg.Wait()
	// Its beat record last: a node seeing it gone has nothing to sweep.
	_ = st.nodes.Purge(ctx, nodeKey(n.name))
}
