package cluster

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// Confirmed sends (PublishConfirmed): a message whose publisher waits
// for it to be kept is confirmed once every node it went to has
// committed what its delivery stored (the broker's Committed hook), so
// that the publisher's acknowledgement means the persistent sessions of
// other nodes hold it too, as it does for this node's. A batch holding
// such a message carries a sequence number (hdrAck) and this node's ack
// subject as its reply; the receiver answers each such batch once what
// its delivery added is committed. A batch not answered within
// confirmTimeout, or whose peer is gone, fails its messages: the
// broker then refuses the publisher's acknowledgement, and the
// publisher sends again.

// A share group's copy, which NATS gives to one node's queue subscriber
// (share.go), is confirmed alike by whichever node got it: the copy
// carries a reply subject of its own under this node's ack subject
// (sharedAck), answered "+" once what its delivery stored is committed
// and "-" when it was not or the node no longer had the group. NATS
// answers a copy that no node subscribes to with a no-responders status:
// nobody was to keep it, and it settles as confirmed.

// hdrAck is a batch's sequence number among those this node sent the
// receiver to confirm.
const hdrAck = "Mqttd-Ack"

// confirmTimeout bounds the wait for a receiver's answer: longer than a
// commit under load, shorter than a client's patience.
const confirmTimeout = 5 * time.Second

// confirmSweep is how often unanswered batches are looked at.
const confirmSweep = 250 * time.Millisecond

func ackSubject(cluster, node string) string {
	return string(appendLevel([]byte("mqttd."+cluster+".ack."), node))
}

// sharedAck is the reply subject of this node's shared copy seq.
func (n *Node) sharedAck(seq uint64) string {
	return n.ackTo + ".s." + strconv.FormatUint(seq, 10)
}

// confirm is one message's wait: done is called once, with true when
// every node it went to answered.
type confirm struct {
	left   atomic.Int32
	failed atomic.Bool
	done   func(ok bool)
}

func (c *confirm) settle(ok bool) {
	if !ok {
		c.failed.Store(true)
	}
	if c.left.Add(-1) == 0 {
		c.done(!c.failed.Load())
	}
}

// sentBatch is a batch sent for confirmation.
type sentBatch struct {
	seq  uint64
	at   time.Time
	msgs []*confirm
}

// sentShared is a share group's copy sent for confirmation.
type sentShared struct {
	at time.Time
	c  *confirm
}

// confirmer is what this node waits for, per peer slot.
type confirmer struct {
	mu      sync.Mutex
	next    uint64
	peer    [maxPeers]string
	waiting [maxPeers][]sentBatch
	count   int // batches and shared copies waiting
	// shared are the shared copies waiting, by sequence number.
	shared map[uint64]sentShared
	sweep  sync.Once
	closed bool // the sweeper is gone: nothing more waits
	// timeout is confirmTimeout; tests shorten it.
	timeout atomic.Int64
}

// registerConfirm records slot's batch of msgs, sent to peer, and
// returns its sequence number; once the node is closing (the sweeper
// gone), it fails them instead and returns 0.
func (n *Node) registerConfirm(slot int, peer string, msgs []*confirm) uint64 {
	cf := &n.confirms
	cf.mu.Lock()
	if cf.closed {
		cf.mu.Unlock()
		for _, c := range msgs {
			c.settle(false)
		}
		return 0
	}
	cf.next++
	seq := cf.next
	if cf.peer[slot] != peer {
		cf.failLocked(slot)
		cf.peer[slot] = peer
	}
	cf.waiting[slot] = append(cf.waiting[slot], sentBatch{seq: seq, at: time.Now(), msgs: msgs})
	cf.count++
	cf.mu.Unlock()
	cf.sweep.Do(func() { go n.sweepConfirms() })
	return seq
}

// registerShared records a shared copy of c and returns its sequence
// number, or 0 (c failed) once the node is closing.
func (n *Node) registerShared(c *confirm) uint64 {
	cf := &n.confirms
	cf.mu.Lock()
	if cf.closed {
		cf.mu.Unlock()
		c.settle(false)
		return 0
	}
	cf.next++
	seq := cf.next
	if cf.shared == nil {
		cf.shared = make(map[uint64]sentShared)
	}
	cf.shared[seq] = sentShared{at: time.Now(), c: c}
	cf.count++
	cf.mu.Unlock()
	cf.sweep.Do(func() { go n.sweepConfirms() })
	return seq
}

// settleSharedLocked settles shared copy seq, if it still waits. The
// caller holds cf.mu.
func (n *Node) settleSharedLocked(seq uint64, ok bool) {
	cf := &n.confirms
	w, found := cf.shared[seq]
	if !found {
		return
	}
	delete(cf.shared, seq)
	cf.count--
	if ok {
		n.stats.confirmed.Add(1)
	} else {
		n.stats.confirmsFailed.Add(1)
	}
	w.c.settle(ok)
}

// onSharedAck takes the answer to a shared copy: "+" or "-" from the
// node that got it, or NATS's no-responders status when none did.
func (n *Node) onSharedAck(msg *nats.Msg) {
	seq, err := strconv.ParseUint(msg.Subject[strings.LastIndexByte(msg.Subject, '.')+1:], 10, 64)
	if err != nil {
		n.stats.malformed.Add(1)
		return
	}
	var ok bool
	switch {
	case msg.Header.Get("Status") == "503":
		ok = true
	case string(msg.Data) == "+":
		ok = true
	case string(msg.Data) == "-":
	default:
		n.stats.malformed.Add(1)
		return
	}
	cf := &n.confirms
	cf.mu.Lock()
	defer cf.mu.Unlock()
	n.settleSharedLocked(seq, ok)
}

// answerShared answers a shared copy to confirm once its delivery is
// kept (ok) or, !ok, at once. The answer goes on the shared connection,
// which the copy came on: the main one does not echo, and the sender may
// be this node.
func (n *Node) answerShared(reply string, ok bool) {
	answer := func(ok bool) {
		data := []byte{'+'}
		if !ok {
			data[0] = '-'
		}
		sh := &n.shared
		sh.mu.RLock()
		nc := sh.nc
		sh.mu.RUnlock()
		if nc != nil {
			_ = nc.Publish(reply, data)
		}
	}
	if !ok || n.committed == nil {
		answer(ok)
		return
	}
	n.committed(answer)
}

// failLocked fails every batch waiting on slot. The caller holds cf.mu.
func (cf *confirmer) failLocked(slot int) {
	for _, b := range cf.waiting[slot] {
		for _, c := range b.msgs {
			c.settle(false)
		}
	}
	cf.count -= len(cf.waiting[slot])
	cf.waiting[slot] = nil
}

// settleLocked settles the batch seq of slot. The caller holds cf.mu.
func (cf *confirmer) settleLocked(slot int, seq uint64, ok bool) {
	w := cf.waiting[slot]
	for i := range w {
		if w[i].seq != seq {
			continue
		}
		for _, c := range w[i].msgs {
			c.settle(ok)
		}
		cf.waiting[slot] = append(w[:i:i], w[i+1:]...)
		cf.count--
		return
	}
}

// onAck takes a receiver's answer, "<seq> <node>" or, for a batch whose
// deliveries it could not keep, "-<seq> <node>", on nats.go's goroutine
// of the ack subscription.
func (n *Node) onAck(msg *nats.Msg) {
	num, peer, ok := strings.Cut(string(msg.Data), " ")
	num, failed := strings.CutPrefix(num, "-")
	seq, err := strconv.ParseUint(num, 10, 64)
	if !ok || err != nil {
		n.stats.malformed.Add(1)
		return
	}
	cf := &n.confirms
	cf.mu.Lock()
	defer cf.mu.Unlock()
	for slot := range cf.peer {
		if cf.peer[slot] == peer && len(cf.waiting[slot]) > 0 {
			cf.settleLocked(slot, seq, !failed)
			if failed {
				n.stats.confirmsFailed.Add(1)
			} else {
				n.stats.confirmed.Add(1)
			}
			return
		}
	}
}

// sweepConfirms fails, until Close, the batches not answered in time
// and those of peers gone from the route table.
func (n *Node) sweepConfirms() {
	t := time.NewTicker(confirmSweep)
	defer t.Stop()
	for {
		select {
		case <-n.stopOut:
			n.failAllConfirms()
			return
		case now := <-t.C:
			n.sweepOnce(now)
		}
	}
}

func (n *Node) sweepOnce(now time.Time) {
	cf := &n.confirms
	cf.mu.Lock()
	defer cf.mu.Unlock()
	if cf.count == 0 {
		return
	}
	timeout := time.Duration(cf.timeout.Load())
	if timeout == 0 {
		timeout = confirmTimeout
	}
	rt := &n.routes
	for slot := range cf.waiting {
		w := cf.waiting[slot]
		if len(w) == 0 {
			continue
		}
		rt.mu.RLock()
		p := rt.slots[slot]
		gone := p == nil || p.name != cf.peer[slot]
		rt.mu.RUnlock()
		if gone {
			n.stats.confirmsFailed.Add(uint64(len(w)))
			cf.failLocked(slot)
			continue
		}
		for len(cf.waiting[slot]) > 0 && now.Sub(cf.waiting[slot][0].at) > timeout {
			n.stats.confirmsFailed.Add(1)
			cf.settleLocked(slot, cf.waiting[slot][0].seq, false)
		}
	}
	for seq, w := range cf.shared {
		if now.Sub(w.at) > timeout {
			n.settleSharedLocked(seq, false)
		}
	}
}

func (n *Node) failAllConfirms() {
	cf := &n.confirms
	cf.mu.Lock()
	defer cf.mu.Unlock()
	cf.closed = true
	for slot := range cf.waiting {
		cf.failLocked(slot)
	}
	for seq := range cf.shared {
		n.settleSharedLocked(seq, false)
	}
}

// SetCommitted sets what the node calls around the deliveries of each
// batch it owes a sender an answer for, from its one delivery goroutine:
// begin before them (nil: nothing), and f(answer) after them, which runs
// answer once what they stored is committed, with ok false when some of
// it failed (f nil: answered at once, the node keeps nothing). Set it
// before Watch.
func (n *Node) SetCommitted(begin func(), f func(answer func(ok bool))) {
	n.delivering, n.committed = begin, f
}

// answerBatch answers a batch to confirm once its deliveries are kept:
// "<seq> <node>", or "-<seq> <node>" when they were not, which fails the
// batch's sends at once (a node that does not know the form takes it
// for malformed, and its sends fail at their timeout).
func (n *Node) answerBatch(reply string, seq uint64) {
	answer := func(ok bool) {
		var data []byte
		if !ok {
			data = append(data, '-')
		}
		data = strconv.AppendUint(data, seq, 10)
		data = append(append(data, ' '), n.name...)
		_ = n.nc.Publish(reply, data)
	}
	if n.committed == nil {
		answer(true)
		return
	}
	n.committed(answer)
}

// flushConfirmed publishes a batch holding confirmed sends (conf),
// asking peer to answer it.
func (n *Node) flushConfirmed(subject, peer string, slot int, data []byte, conf []*confirm) {
	seq := n.registerConfirm(slot, peer, conf)
	if seq == 0 {
		return
	}
	m := &nats.Msg{Subject: subject, Reply: n.ackTo, Data: data, Header: nats.Header{hdrAck: {strconv.FormatUint(seq, 10)}}}
	if err := n.nc.PublishMsg(m); err != nil {
		n.refused(err, len(conf))
		cf := &n.confirms
		cf.mu.Lock()
		cf.settleLocked(slot, seq, false)
		cf.mu.Unlock()
		return
	}
	n.stats.batchesOut.Add(1)
}

// SetConfirmTimeout sets how long a confirmed send waits for its
// receivers' answers (0: confirmTimeout).
func (n *Node) SetConfirmTimeout(d time.Duration) { n.confirms.timeout.Store(int64(d)) }
