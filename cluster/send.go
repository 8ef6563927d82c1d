package cluster

import (
	"bytes"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// recPool holds the records' buffers, given back by the sending
// goroutine once it has copied them into its batches: a record is
// garbage a moment after it is made.
var recPool = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledRecord is the largest record buffer given back to recPool.
const maxPooledRecord = 4 << 10

// outItem is one message queued for the sending goroutine.
type outItem struct {
	// rec is the message's record for the batches of the peers in dst,
	// nil when no other node wants it plainly; from recPool.
	rec *[]byte
	dst peerSet
	// msg is the message on its own subject, for the share groups
	// (publish) and, retained, for the replicated stream; nil: neither.
	msg           *nats.Msg
	publish, keep bool
	size          int64
	// confirm, for PublishConfirmed, waits for every node in dst.
	confirm *confirm
}

// Publish sends m to the nodes that want its topic (the route table),
// once per node, and to the share groups on it. It never blocks: it
// matches the topic, encodes m and queues it for the node's sending
// goroutine, which batches it per destination and hands the batches to
// nats.go (whose own buffer holds them while the connection is down);
// past OutQueueMessages or OutQueueBytes it drops m and returns
// ErrQueueFull, counted in Stats.DroppedOut. A retained message is also
// written to the replicated stream. Publish copies what it keeps: m may
// change once it returns. Topics beginning with '$' are not sent (each
// node has its own $SYS), nor topics nobody else wants; Publish returns
// nil for them.
func (n *Node) Publish(m *Message) error {
	var it outItem
	if ok, err := n.encode(m, &it); !ok {
		return err
	}
	if !n.enqueue(&it) {
		return n.queueFull(m.Topic)
	}
	return nil
}

// PublishConfirmed is PublishWaiting for a message whose publisher waits
// for it to be kept (confirm.go): done is called once, with true when
// every node it went to has committed what its delivery stored (at once
// when it goes to none), false when one did not answer in time, is
// gone, or the message was not sent. A share group's copy is waited
// for too, from whichever node NATS gave it to (confirm.go).
func (n *Node) PublishConfirmed(m *Message, wait time.Duration, block func(func()), done func(ok bool)) error {
	var it outItem
	ok, err := n.encode(m, &it)
	waits := it.dst.count()
	if it.publish && it.msg != nil {
		waits++
	}
	if !ok || waits == 0 {
		done(err == nil)
		if !ok {
			return err
		}
	} else {
		it.confirm = &confirm{done: done}
		it.confirm.left.Store(int32(waits))
	}
	if n.enqueue(&it) {
		return nil
	}
	err = n.publishWaited(m.Topic, it, wait, block)
	if err != nil && it.confirm != nil {
		done(false)
	}
	return err
}

// PublishWaiting is Publish for a caller that may wait: when the
// outgoing queue is full (another node's pause holds it, or NATS is
// slow) it waits for room, up to wait, then drops m as Publish does. It
// waits inside block (block(f) runs f: the broker lets another reader
// run meanwhile), which it calls only when it must wait; block nil runs
// f itself. The caller must hold no lock another goroutine may need.
// Waits are counted in Stats.PublishWaits.
func (n *Node) PublishWaiting(m *Message, wait time.Duration, block func(func())) error {
	var it outItem
	if ok, err := n.encode(m, &it); !ok {
		return err
	}
	if n.enqueue(&it) {
		return nil
	}
	return n.publishWaited(m.Topic, it, wait, block)
}

// publishWaited is PublishWaiting's wait, apart so that its closure
// costs only the calls that wait.
func (n *Node) publishWaited(topic string, it outItem, wait time.Duration, block func(func())) (err error) {
	n.flow.waits.Add(1)
	start := time.Now()
	waited := func() { err = n.waitRoom(&it, start.Add(wait)) }
	if block == nil {
		waited()
	} else {
		block(waited)
	}
	n.flow.waitNanos.Add(uint64(time.Since(start)))
	if errors.Is(err, ErrQueueFull) {
		return n.queueFull(topic)
	}
	return err
}

// encode matches m's topic in the route table and makes its queue item
// it, and reports false (and the error to return) for a message not to
// send.
func (n *Node) encode(m *Message, it *outItem) (bool, error) {
	if !Crosses(m.Topic) {
		return false, nil
	}
	if n.closed.Load() {
		return false, ErrClosed
	}
	rt := &n.routes
	rt.mu.RLock()
	shared := rt.trie.match(m.Topic, &it.dst)
	it.dst.union(&rt.everything)
	rt.mu.RUnlock()
	if it.dst.empty() && !shared && !m.Retain {
		return false, nil
	}
	if !it.dst.empty() {
		rec := recPool.Get().(*[]byte)
		var err error
		if *rec, err = appendRecord((*rec)[:0], m); err != nil {
			return false, n.unencodable(m.Topic, err)
		}
		it.rec, it.size = rec, int64(len(*rec))
	}
	if shared || m.Retain {
		if err := n.encodeMsg(it, m); err != nil {
			return false, err
		}
		it.publish, it.keep = shared, m.Retain && it.msg != nil
	}
	return true, nil
}

// encodeMsg makes m's NATS message on its own subject: the share groups
// subscribe to those, and the replicated stream keeps retained messages
// under them.
func (n *Node) encodeMsg(it *outItem, m *Message) error {
	subj := Subject(n.cluster, m.Topic)
	if m.Retain {
		subj = subjectUnder(retainedPrefix(n.cluster), m.Topic)
	}
	if len(subj) > MaxSubjectLen {
		n.stats.tooLong.Add(1)
		n.warnf("cluster: topic too long for a NATS subject, not sent to share groups nor kept", m.Topic)
		if it.rec != nil {
			return nil // its record still goes
		}
		return ErrTooLong
	}
	meta, err := encodeMeta(m)
	if err != nil {
		return n.unencodable(m.Topic, err)
	}
	it.msg = &nats.Msg{Subject: subj, Data: bytes.Clone(m.Payload), Header: nats.Header{metaHeader: {meta}}}
	it.size += int64(len(subj) + len(meta) + len(m.Payload))
	return nil
}

func (n *Node) unencodable(topic string, err error) error {
	n.stats.droppedOut.Add(1)
	n.warnf("cluster: message not encodable, not sent to other nodes", topic)
	return err
}

// enqueue queues it for the sending goroutine, and reports false when
// the queue is at a bound.
func (n *Node) enqueue(it *outItem) bool {
	if n.outBytes.Add(it.size) > OutQueueBytes {
		n.outBytes.Add(-it.size)
		return false
	}
	select {
	case n.out <- *it:
		return true
	default:
		n.outBytes.Add(-it.size)
		return false
	}
}

// waitRoom queues it once there is room, or returns ErrQueueFull at
// deadline and ErrClosed at Close.
func (n *Node) waitRoom(it *outItem, deadline time.Time) error {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	r := &n.flow.room
	for {
		// Registered before the bytes are counted: a message sent after
		// the count signals this wait.
		r.Waiters.Add(1)
		room := r.Wait()
		if n.outBytes.Add(it.size) > OutQueueBytes {
			n.outBytes.Add(-it.size)
			select {
			case <-room:
				r.Waiters.Add(-1)
				continue
			case <-t.C:
				r.Waiters.Add(-1)
				return ErrQueueFull
			case <-n.stopOut:
				r.Waiters.Add(-1)
				return ErrClosed
			}
		}
		r.Waiters.Add(-1)
		select {
		case n.out <- *it:
			return nil
		case <-t.C:
			n.outBytes.Add(-it.size)
			return ErrQueueFull
		case <-n.stopOut:
			n.outBytes.Add(-it.size)
			return ErrClosed
		}
	}
}

func (n *Node) queueFull(topic string) error {
	n.stats.droppedOut.Add(1)
	n.warnf("cluster: outgoing queue full, message not sent to other nodes", topic)
	return ErrQueueFull
}

// warnf logs msg at most once per throttle period, with the drop counts.
func (n *Node) warnf(msg, topic string) {
	if n.warn.allow() {
		n.log.Warn().Str("topic", truncate(topic, 200)).Uint64("dropped_out", n.stats.droppedOut.Load()).
			Uint64("too_long", n.stats.tooLong.Load()).Uint64("malformed", n.stats.malformed.Load()).Msg(msg)
	}
}

// batches are the sending goroutine's buffers, one per peer slot.
type batches struct {
	buf   [maxPeers][]byte
	count [maxPeers]int
	full  peerSet
	// conf are the confirmed sends in each batch.
	conf [maxPeers][]*confirm
}

// sendLoop takes queued messages into the batches, the only goroutine
// that may block on the connection's buffer, holding them while another
// node's pause is in force (pause.go), and sends the batches when the
// queue is empty; at Close it sends what is queued, paused or not.
func (n *Node) sendLoop() {
	defer close(n.sendDone)
	b := &batches{}
	for {
		select {
		case it := <-n.out:
			n.hold()
			n.send(b, it)
		case <-n.stopOut:
			for {
				select {
				case it := <-n.out:
					n.send(b, it)
				default:
					n.flushAll(b)
					return
				}
			}
		}
		if len(n.out) == 0 {
			n.flushAll(b)
		}
	}
}

// send appends it to its batches, sending each that would grow past
// batchMax first, and publishes its own message.
func (n *Node) send(b *batches, it outItem) {
	n.outBytes.Add(-it.size)
	n.flow.room.Signal()
	if it.rec != nil {
		rec := *it.rec
		it.dst.each(func(slot int) {
			if len(b.buf[slot])+len(rec) > batchMax && b.count[slot] > 0 {
				n.flush(b, slot)
			}
			if b.buf[slot] == nil {
				b.buf[slot] = append(make([]byte, 0, batchMax), batchVersion)
			}
			b.buf[slot] = append(b.buf[slot], rec...)
			b.count[slot]++
			if it.confirm != nil {
				b.conf[slot] = append(b.conf[slot], it.confirm)
			}
			b.full.add(slot)
		})
		if cap(rec) <= maxPooledRecord {
			recPool.Put(it.rec)
		}
		n.stats.out.Add(1)
	}
	if it.msg == nil {
		return
	}
	if it.publish {
		msg, seq := it.msg, uint64(0)
		if it.confirm != nil {
			// The message is shared with the retained stream's write:
			// the reply goes on a copy.
			if seq = n.registerShared(it.confirm); seq != 0 {
				msg = &nats.Msg{Subject: msg.Subject, Reply: n.sharedAck(seq), Header: msg.Header, Data: msg.Data}
			}
		}
		if err := n.nc.PublishMsg(msg); err != nil {
			n.refused(err, 1)
			if seq != 0 {
				cf := &n.confirms
				cf.mu.Lock()
				n.settleSharedLocked(seq, false)
				cf.mu.Unlock()
			}
		} else if it.rec == nil {
			n.stats.out.Add(1)
		}
	}
	if it.keep {
		n.keepRetainedMsg(it.msg)
	}
}

// flushAll sends every batch that holds a message.
func (n *Node) flushAll(b *batches) {
	if b.full.empty() {
		return
	}
	b.full.each(func(slot int) { n.flush(b, slot) })
}

// flush publishes slot's batch on its peer's subject; a peer dropped
// meanwhile loses it.
func (n *Node) flush(b *batches, slot int) {
	rt := &n.routes
	rt.mu.RLock()
	p := rt.slots[slot]
	subject, peer, dead := "", "", false
	if p != nil {
		subject, peer, dead = p.subject, p.name, p.dead
	}
	rt.mu.RUnlock()
	count := b.count[slot]
	conf := b.conf[slot]
	b.conf[slot] = nil // the confirmer keeps it
	switch {
	case dead && len(conf) > 0:
		// Nobody answers: its sends wait until its routes go, then fail
		// (confirm.go).
		n.registerConfirm(slot, peer, conf)
	case subject == "" || dead:
		for _, c := range conf {
			c.settle(false)
		}
	case len(conf) > 0:
		n.flushConfirmed(subject, peer, slot, b.buf[slot], conf)
	default:
		if err := n.nc.Publish(subject, b.buf[slot]); err != nil {
			n.refused(err, count)
		} else {
			n.stats.batchesOut.Add(1)
		}
	}
	b.buf[slot], b.count[slot] = b.buf[slot][:1], 0
	if cap(b.buf[slot]) > 2*batchMax {
		b.buf[slot] = nil // a large record's room is not kept
	}
	b.full.remove(slot)
}

// refused counts messages NATS refused.
func (n *Node) refused(err error, count int) {
	n.stats.droppedOut.Add(uint64(count))
	if n.warn.allow() {
		n.log.Warn().Err(err).Uint64("dropped_out", n.stats.droppedOut.Load()).
			Msg("cluster: NATS refused a message, not sent to other nodes")
	}
}

// Wants reports whether another node, or a share group, wants a message
// on topic now (the route table).
func (n *Node) Wants(topic string) bool {
	if !Crosses(topic) || n.closed.Load() {
		return false
	}
	var dst peerSet
	rt := &n.routes
	rt.mu.RLock()
	shared := rt.trie.match(topic, &dst)
	dst.union(&rt.everything)
	rt.mu.RUnlock()
	return shared || !dst.empty()
}
