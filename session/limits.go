package session

import "sync/atomic"

// Config bounds a session.
type Config struct {
	// MaxInflight is the outbound window: QoS 1/2 messages sent and not yet
	// fully acknowledged. A 5.0 client's Receive Maximum lowers it.
	MaxInflight int
	// MaxQueued bounds the messages waiting for the window (or for the
	// client to come back).
	MaxQueued int
	// MaxQueuedBytes bounds their Message.Size and the cost of their
	// entries (EntryCost and subscription identifiers), together.
	MaxQueuedBytes int64
	// QueueQoS0 keeps QoS 0 messages for an offline client, as
	// Mosquitto's queue_qos0_messages does.
	QueueQoS0 bool
	// MaxAwaitingRel bounds inbound QoS 2 packet ids awaiting PUBREL.
	MaxAwaitingRel int
}

func (c Config) withDefaults() Config {
	if c.MaxInflight <= 0 {
		c.MaxInflight = DefaultMaxInflight
	}
	if c.MaxInflight > 65535 {
		c.MaxInflight = 65535
	}
	if c.MaxQueued <= 0 {
		c.MaxQueued = DefaultMaxQueued
	}
	if c.MaxQueuedBytes <= 0 {
		c.MaxQueuedBytes = DefaultMaxQueuedBytes
	}
	if c.MaxAwaitingRel <= 0 {
		c.MaxAwaitingRel = DefaultMaxAwaitingRel
	}
	return c
}

// limits is Config with defaults applied, in the width the session needs.
//
// Sessions made from one Config share it: a session holds a pointer, not
// a copy, since the broker keeps one session per client, idle or not.
type limits struct {
	maxInflight, maxQueued, maxAwaitingRel int32
	queueQoS0                              bool
	maxQueuedBytes                         int64
	// inflight counts the entries in the windows of every session sharing
	// these limits, for the broker's gauge: kept here because every change
	// of a window reaches it, with the session's lock held. On a cache
	// line of its own, since every delivery reads the limits above.
	_        [64]byte
	inflight atomic.Int64
	// subBytes counts the SubscriptionCost of every subscription the
	// sessions sharing these limits hold.
	subBytes atomic.Int64
}

// Limits are a Config with its defaults applied, for New. Make them once
// and share them between sessions.
type Limits struct{ l limits }

// Limits applies c's defaults.
func (c Config) Limits() *Limits {
	c = c.withDefaults()
	l := new(Limits)
	l.l.maxInflight = int32(c.MaxInflight)
	l.l.maxQueued = int32(min(c.MaxQueued, 1<<31-1))
	l.l.maxAwaitingRel = int32(min(c.MaxAwaitingRel, 1<<31-1))
	l.l.queueQoS0 = c.QueueQoS0
	l.l.maxQueuedBytes = c.MaxQueuedBytes
	return l
}

// Inflight reports how many QoS 1/2 messages are in the windows of the
// sessions made with l, online or not: sent (or to be sent again) and
// not completely acknowledged.
func (l *Limits) Inflight() int64 { return l.l.inflight.Load() }

// SubscriptionBytes reports the SubscriptionCost of the subscriptions
// the sessions made with l hold, together.
func (l *Limits) SubscriptionBytes() int64 { return l.l.subBytes.Load() }
