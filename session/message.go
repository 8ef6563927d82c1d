package session

import (
	"sync/atomic"
	"time"

	"mqttd/packets"
)

// Message is an application message as routed. It is immutable once routed
// and shared by every session it is delivered to.
//
// It is allocated for every message a client publishes, so it is kept
// small (88 bytes): its expiry is in Unix nanoseconds rather than a
// time.Time, and the small fields share the last word.
type Message struct {
	Topic   string
	Payload []byte
	// Properties are the 5.0 properties to forward; nil when there are
	// none, which spares 3.x messages carrying a few hundred empty bytes.
	Properties *packets.Properties
	// Expiry is when the message expires, in Unix nanoseconds; 0: never.
	Expiry  int64
	Origin  string // client id of the publisher, for No Local
	storeID atomic.Uint64
	queued  atomic.Int32 // how many session queues hold it (QueueBudget)
	QoS     byte         // as published
	Retain  bool         // as published
}

// ExpiresAt returns when m expires, and false when it never does.
func (m *Message) ExpiresAt() (time.Time, bool) {
	if m.Expiry == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, m.Expiry), true
}

// SetExpiresAt makes m expire at t.
func (m *Message) SetExpiresAt(t time.Time) { m.Expiry = t.UnixNano() }

// StoreID returns the id under which the broker's store keeps m, giving
// it one from next on first use: a message delivered to many persistent
// sessions, or retained, is stored once.
func (m *Message) StoreID(next *atomic.Uint64) uint64 {
	if id := m.storeID.Load(); id != 0 {
		return id
	}
	id := next.Add(1)
	if m.storeID.CompareAndSwap(0, id) {
		return id
	}
	return m.storeID.Load()
}

// SetStoreID records the id a message read back from the store has.
func (m *Message) SetStoreID(id uint64) { m.storeID.Store(id) }

// QueueBudget bounds the bytes the queues of all sessions hold together.
// A message queued by many sessions is shared, so it counts once: from
// the first queue it enters until the last one lets it go; each entry
// that holds it counts its own cost (EntryCost, subscription identifiers).
type QueueBudget struct {
	// Max is the most bytes the queues may hold; 0 means no bound.
	Max   int64
	bytes atomic.Int64
}

// Bytes reports the Message.Size of the messages the queues hold, and
// the cost of their entries.
func (b *QueueBudget) Bytes() int64 { return b.bytes.Load() }

// hold counts one more queue holding m, whose Size is size, with an
// entry costing entry bytes: the message counts with the first queue, the
// entry with each. It is refused when the budget has no room for what it
// adds. A nil budget bounds and counts nothing.
func (b *QueueBudget) hold(m *Message, size, entry int64) bool {
	if b == nil {
		return true
	}
	for {
		n := m.queued.Load()
		add := entry
		if n == 0 {
			add += size
		}
		if b.Max > 0 && b.bytes.Load()+add > b.Max {
			return false
		}
		if m.queued.CompareAndSwap(n, n+1) {
			b.bytes.Add(add)
			return true
		}
	}
}

// release counts one queue fewer holding m, as hold counted it.
func (b *QueueBudget) release(m *Message, size, entry int64) {
	if b == nil {
		return
	}
	if m.queued.Add(-1) == 0 {
		entry += size
	}
	b.bytes.Add(-entry)
}

// Size is what m is counted as, queued or retained: its topic, payload
// and properties bytes.
func (m *Message) Size() int {
	n := len(m.Topic) + len(m.Payload)
	if m.Properties != nil {
		n += m.Properties.Size()
	}
	return n
}

// EntryCost is what a queued entry costs besides its message, in bytes,
// as the queue bounds count it: a message shared by a thousand offline
// sessions is held once, but each of them holds an Outbound for it in a
// ring that may have twice the room it uses (~120 bytes), and the store's
// index of a stored session's entries keeps about as much again.
// Counting only the message let 500 offline sessions hold 9 million
// entries of a one-byte message, 1.4 GB, within a 256 MiB bound.
const EntryCost = 160

// cost is what o costs in a queue besides its message: EntryCost and its
// subscription identifiers, one word each (a client with overlapping
// subscriptions can make every entry carry many).
func (o *Outbound) cost() int { return EntryCost + 4*cap(o.SubIDs) }

// Expired reports whether m has passed its expiry time at now.
func (m *Message) Expired(now time.Time) bool {
	return m.Expiry != 0 && now.UnixNano() >= m.Expiry
}
