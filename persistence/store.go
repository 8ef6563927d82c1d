// Package persistence keeps the broker's durable state: the sessions that
// outlive their connections (with their subscriptions, queued and
// in-flight messages, inbound QoS 2 packet ids awaiting PUBREL and delayed
// wills) and the retained messages. A Store takes changes in batches, each
// applied in one transaction, and gives everything back at start.
//
// The broker decides what must be kept and when; a Store only keeps it.
// A message shared by many sessions (and the retained store) is stored
// once and counted: the Store deletes it when nothing refers to it any
// more. Two implementations pass the same contract suite
// (persistence/storetest): Memory, for tests and for brokers that keep
// nothing, and the bbolt one (persistence/bolt).
//
// This package imports only mqttd/packets.
package persistence

import (
	"errors"

	"mqttd/packets"
)

// Message is a message the broker keeps for sessions or as retained.
type Message struct {
	// ID is unique among the messages the store holds; the broker chooses
	// it (increasing, so that a restart can go on from the largest).
	ID      uint64
	Topic   string
	Payload []byte
	QoS     byte
	Retain  bool
	// Properties are the 5.0 properties forwarded with the message.
	Properties packets.Properties
	// Expiry is when the message expires, in unix nanoseconds; 0 never.
	Expiry int64
	// Origin is the client id of the publisher (for No Local).
	Origin string
}

// Session is a session that outlives its connection.
type Session struct {
	ID       string
	Username string
	// Version is the protocol level of the client's last CONNECT.
	Version byte
	// Expiry is how long, in seconds, the session is kept offline.
	Expiry uint32
	// ExpireAt is when the offline session ends, in unix nanoseconds; 0
	// while its client is connected.
	ExpireAt int64
	// Listener names the listener its client last connected through,
	// whose rules (a per-listener ACL) apply to it while it is offline.
	Listener string
}

// Subscription is one subscription of a session.
type Subscription struct {
	// Filter is the topic filter as subscribed, $share prefix included.
	Filter  string
	Options packets.SubOptions
	// ID is the 5.0 subscription identifier; 0 none.
	ID uint32
}

// Outbound is a message on its way to a session's client: queued, or in
// flight once it has a packet id.
type Outbound struct {
	// Seq orders a session's outbound messages: the broker gives them
	// increasing values, and Load returns them in that order.
	Seq       uint64
	MessageID uint64
	// QoS and Retain are as delivered to this client.
	QoS    byte
	Retain bool
	// SubIDs are the subscription identifiers sent with it.
	SubIDs []uint32
	// PacketID is 0 while queued.
	PacketID uint16
	// Released is set once the client's PUBREC came: what is left to send
	// is the PUBREL.
	Released bool
}

// Stamp identifies an inbound QoS 2 message among a cluster's nodes: the
// node that took it (a number drawn at the node's start) and a counter
// there. A copy sent again between nodes keeps it, so that a session
// that stored the message once knows it the second time. The zero Stamp
// is none.
type Stamp struct{ Node, Seq uint64 }

// IsZero reports whether s is no stamp.
func (s Stamp) IsZero() bool { return s == Stamp{} }

// Forward is an inbound QoS 2 message whose copies to a cluster's other
// nodes are not yet known to be kept there: the node holding its
// publisher's session sends them again, under the same stamp, when the
// publisher sends the packet id again.
type Forward struct {
	PacketID uint16
	Stamp    Stamp
	Message  Message
}

// SeenStamp is the stamp of a message a session stored, kept until
// Expiry (unix nanoseconds) so that a copy sent again is not stored
// twice.
type SeenStamp struct {
	Stamp  Stamp
	Expiry int64
}

// Will is a will waiting for its Will Delay Interval.
type Will struct {
	Message Message
	// At is when it is to be published, in unix nanoseconds.
	At int64
}

// SessionState is a session with everything it holds, as Load gives it
// back.
type SessionState struct {
	Session       Session
	Subscriptions []Subscription
	// Outbound is in Seq order; each entry's message is in Messages.
	Outbound []Outbound
	// AwaitingRel are the inbound QoS 2 packet ids waiting for PUBREL.
	AwaitingRel []uint16
	// Forwards are those of AwaitingRel whose message is still to be
	// confirmed by other nodes, in any order.
	Forwards []Forward
	// Stamps are the unexpired stamps of the messages it stored, in any
	// order; expired ones are not given back.
	Stamps []SeenStamp
	// Will is nil when none waits.
	Will *Will
}

// Snapshot is everything a store holds, read back at start.
type Snapshot struct {
	Sessions []SessionState
	// Retained maps topics to the IDs of their retained messages.
	Retained map[string]uint64
	// Messages holds every message a session's outbound entry or the
	// retained store refers to, by ID.
	Messages map[uint64]*Message
}

// Store keeps the broker's durable state.
type Store interface {
	// Apply makes a batch's changes, in order, in one transaction: all of
	// them or, with an error, none. With synchronous durability it returns
	// once they are on stable storage.
	Apply(b *Batch) error
	// Load reads everything back.
	Load() (*Snapshot, error)
	// Close flushes and releases the store.
	Close() error
}

// OpKind says what a batch operation does.
type OpKind uint8

// Operations of a Batch.
const (
	// OpPutMessage stores Op.Message; a message already stored under its
	// ID is left as it is. It is kept while an outbound entry or a
	// retained topic refers to it: a message nothing refers to once the
	// batch is applied is not kept.
	OpPutMessage OpKind = iota + 1
	// OpPutSession stores Op.Session, keyed on Op.Session.ID, replacing
	// the record of that ID; what the session holds stays.
	OpPutSession
	// OpDeleteSession removes Op.SessionID with everything it holds.
	OpDeleteSession
	// OpPutSubscription adds or replaces Op.Subscription (by filter) in
	// Op.SessionID.
	OpPutSubscription
	// OpDeleteSubscription removes the subscription to Op.Filter.
	OpDeleteSubscription
	// OpPutOutbound adds or replaces Op.Outbound (by Seq) in Op.SessionID;
	// its message must be stored, in this batch or before.
	OpPutOutbound
	// OpDeleteOutbound removes the entry Op.Seq of Op.SessionID.
	OpDeleteOutbound
	// OpPutAwaitingRel records the inbound QoS 2 packet id Op.PacketID of
	// Op.SessionID; with Op.Message set, as a Forward of that message
	// under Op.Stamp.Stamp, replacing what the id had.
	OpPutAwaitingRel
	// OpDeleteAwaitingRel removes it.
	OpDeleteAwaitingRel
	// OpPutRetained makes the message Op.MessageID the retained message of
	// Op.Topic; its message must be stored.
	OpPutRetained
	// OpDeleteRetained clears the retained message of Op.Topic.
	OpDeleteRetained
	// OpPutWill stores Op.Will for Op.SessionID, replacing any.
	OpPutWill
	// OpDeleteWill removes the will of Op.SessionID.
	OpDeleteWill
	// OpPutStamp records that Op.SessionID stored the message of
	// Op.Stamp.Stamp, until Op.Stamp.Expiry (unix nanoseconds): Load
	// gives it back until then. A store that is not a ForwardKeeper
	// refuses it.
	OpPutStamp
)

// ForwardKeeper is a Store that keeps Forwards and stamps (OpPutStamp);
// another refuses them (ErrBadOp). Only a cluster's replicated store
// needs them: they matter where another node may send a message again.
type ForwardKeeper interface {
	KeepsForwards()
}

// Op is one change. Which fields count depends on Kind.
type Op struct {
	// Kind, PacketID and the flags come first, together: an Op is built
	// on readers' stacks, and padding after each would make it larger.
	Kind     OpKind
	PacketID uint16
	// Handed marks an OpDeleteOutbound of an entry handed to another
	// session rather than acknowledged: it never cancels the waiting put
	// it follows (Committer), so what acknowledged that put still waits
	// for it to be stored.
	Handed bool
	// AckDistant marks an OpPutOutbound whose acknowledgement is not
	// near: a bridge's remote broker's, a network round trip away, or an
	// offline session's, which none cancels before its client is back.
	// A commit does not wait for it (Committer.SetDelay), which would
	// only delay the publisher's.
	AckDistant   bool
	SessionID    string
	Session      Session
	Subscription Subscription
	Filter       string
	Outbound     Outbound
	Seq          uint64
	Topic        string
	MessageID    uint64
	Message      *Message
	Will         *Will
	// Stamp is OpPutStamp's, and a Forward's (its Expiry unused). A
	// pointer: every Op on a reader's stack would otherwise carry it.
	Stamp *SeenStamp
}

// Batch is a list of changes applied together. The zero Batch is empty
// and ready to use.
type Batch struct {
	Ops []Op
}

// Len is the number of operations.
func (b *Batch) Len() int { return len(b.Ops) }

// Reset empties the batch for reuse.
func (b *Batch) Reset() {
	clear(b.Ops)
	b.Ops = b.Ops[:0]
}

// The operations, one constructor each, so that the broker builds no Op
// by hand: it puts them in arrays on its stack (calling a Batch's builder
// methods, which append, on a batch over such an array moves the array to
// the heap), and the Batch methods append them.

// PutMessage stores m (see OpPutMessage).
func PutMessage(m *Message) Op { return Op{Kind: OpPutMessage, Message: m} }

// PutSession stores s.
func PutSession(s Session) Op { return Op{Kind: OpPutSession, SessionID: s.ID, Session: s} }

// DeleteSession removes a session and everything it holds.
func DeleteSession(id string) Op { return Op{Kind: OpDeleteSession, SessionID: id} }

// PutSubscription adds or replaces a subscription of a session.
func PutSubscription(session string, s Subscription) Op {
	return Op{Kind: OpPutSubscription, SessionID: session, Subscription: s}
}

// DeleteSubscription removes a session's subscription to filter.
func DeleteSubscription(session, filter string) Op {
	return Op{Kind: OpDeleteSubscription, SessionID: session, Filter: filter}
}

// PutOutbound adds or replaces an outbound entry of a session.
func PutOutbound(session string, o Outbound) Op {
	return Op{Kind: OpPutOutbound, SessionID: session, Outbound: o}
}

// DeleteOutbound removes the outbound entry seq of a session.
func DeleteOutbound(session string, seq uint64) Op {
	return Op{Kind: OpDeleteOutbound, SessionID: session, Seq: seq}
}

// DeleteHandedOutbound removes an entry handed to another session (see
// Op.Handed).
func DeleteHandedOutbound(session string, seq uint64) Op {
	return Op{Kind: OpDeleteOutbound, SessionID: session, Seq: seq, Handed: true}
}

// PutAwaitingRel records an inbound QoS 2 packet id awaiting PUBREL.
func PutAwaitingRel(session string, id uint16) Op {
	return Op{Kind: OpPutAwaitingRel, SessionID: session, PacketID: id}
}

// PutForward records an inbound QoS 2 packet id awaiting PUBREL whose
// message m is still to be confirmed by other nodes, under stamp.
func PutForward(session string, id uint16, stamp Stamp, m *Message) Op {
	return Op{Kind: OpPutAwaitingRel, SessionID: session, PacketID: id, Stamp: &SeenStamp{Stamp: stamp}, Message: m}
}

// PutStamp records that session stored the message of stamp, until
// expiry.
func PutStamp(session string, stamp Stamp, expiry int64) Op {
	return Op{Kind: OpPutStamp, SessionID: session, Stamp: &SeenStamp{Stamp: stamp, Expiry: expiry}}
}

// DeleteAwaitingRel removes it.
func DeleteAwaitingRel(session string, id uint16) Op {
	return Op{Kind: OpDeleteAwaitingRel, SessionID: session, PacketID: id}
}

// PutRetained makes message id the retained message of topic.
func PutRetained(topic string, id uint64) Op {
	return Op{Kind: OpPutRetained, Topic: topic, MessageID: id}
}

// DeleteRetained clears the retained message of topic.
func DeleteRetained(topic string) Op { return Op{Kind: OpDeleteRetained, Topic: topic} }

// PutWill stores a delayed will of a session.
func PutWill(session string, w *Will) Op { return Op{Kind: OpPutWill, SessionID: session, Will: w} }

// DeleteWill removes a session's delayed will.
func DeleteWill(session string) Op { return Op{Kind: OpDeleteWill, SessionID: session} }

// PutMessage appends PutMessage(m).
func (b *Batch) PutMessage(m *Message) { b.Ops = append(b.Ops, PutMessage(m)) }

// PutSession appends PutSession(s).
func (b *Batch) PutSession(s Session) { b.Ops = append(b.Ops, PutSession(s)) }

// DeleteSession appends DeleteSession(id).
func (b *Batch) DeleteSession(id string) { b.Ops = append(b.Ops, DeleteSession(id)) }

// PutSubscription appends PutSubscription(session, s).
func (b *Batch) PutSubscription(session string, s Subscription) {
	b.Ops = append(b.Ops, PutSubscription(session, s))
}

// DeleteSubscription appends DeleteSubscription(session, filter).
func (b *Batch) DeleteSubscription(session, filter string) {
	b.Ops = append(b.Ops, DeleteSubscription(session, filter))
}

// PutOutbound appends PutOutbound(session, o).
func (b *Batch) PutOutbound(session string, o Outbound) {
	b.Ops = append(b.Ops, PutOutbound(session, o))
}

// DeleteOutbound appends DeleteOutbound(session, seq).
func (b *Batch) DeleteOutbound(session string, seq uint64) {
	b.Ops = append(b.Ops, DeleteOutbound(session, seq))
}

// DeleteHandedOutbound appends DeleteHandedOutbound(session, seq).
func (b *Batch) DeleteHandedOutbound(session string, seq uint64) {
	b.Ops = append(b.Ops, DeleteHandedOutbound(session, seq))
}

// PutAwaitingRel appends PutAwaitingRel(session, id).
func (b *Batch) PutAwaitingRel(session string, id uint16) {
	b.Ops = append(b.Ops, PutAwaitingRel(session, id))
}

// PutForward appends PutForward(session, id, stamp, m).
func (b *Batch) PutForward(session string, id uint16, stamp Stamp, m *Message) {
	b.Ops = append(b.Ops, PutForward(session, id, stamp, m))
}

// PutStamp appends PutStamp(session, stamp, expiry).
func (b *Batch) PutStamp(session string, stamp Stamp, expiry int64) {
	b.Ops = append(b.Ops, PutStamp(session, stamp, expiry))
}

// DeleteAwaitingRel appends DeleteAwaitingRel(session, id).
func (b *Batch) DeleteAwaitingRel(session string, id uint16) {
	b.Ops = append(b.Ops, DeleteAwaitingRel(session, id))
}

// PutRetained appends PutRetained(topic, id).
func (b *Batch) PutRetained(topic string, id uint64) { b.Ops = append(b.Ops, PutRetained(topic, id)) }

// DeleteRetained appends DeleteRetained(topic).
func (b *Batch) DeleteRetained(topic string) { b.Ops = append(b.Ops, DeleteRetained(topic)) }

// PutWill appends PutWill(session, w).
func (b *Batch) PutWill(session string, w *Will) { b.Ops = append(b.Ops, PutWill(session, w)) }

// DeleteWill appends DeleteWill(session).
func (b *Batch) DeleteWill(session string) { b.Ops = append(b.Ops, DeleteWill(session)) }

// Errors a Store returns for a batch that does not hold together; the
// batch is then not applied.
var (
	// ErrNoSession: an operation on a session that is not stored, deletes
	// included; only OpDeleteSession of a missing session is no error.
	ErrNoSession = errors.New("persistence: no such session")
	// ErrNoMessage: an outbound entry or retained topic referring to a
	// message that is not stored (earlier in the batch or before it). A
	// will holds its own copy of its message.
	ErrNoMessage = errors.New("persistence: no such message")
	// ErrBadOp: an operation that is not Valid, or properties that would
	// not read back (a store may decode them to check).
	ErrBadOp = errors.New("persistence: malformed operation")
)

// Malformed reports whether err says a batch does not hold together
// (ErrNoSession, ErrNoMessage, ErrBadOp), as opposed to a failure of the
// storage under it.
func Malformed(err error) bool {
	return errors.Is(err, ErrNoSession) || errors.Is(err, ErrNoMessage) || errors.Is(err, ErrBadOp)
}

// Valid reports ErrBadOp for an operation no store can apply: an unknown
// kind, a nil Message or Will, a Forward or stamp without a stamp, an
// empty session ID (OpPutSession keys on
// Session.ID) or retained topic (MQTT has no empty topic names). Keys of
// any length are valid: a store that cannot key a record by a long one
// keys it otherwise (persistence/bolt hashes it). Stores call it on each
// operation first.
func (op *Op) Valid() error {
	switch op.Kind {
	case OpPutMessage:
		if op.Message == nil {
			return ErrBadOp
		}
	case OpPutSession:
		if op.Session.ID == "" {
			return ErrBadOp
		}
	case OpPutRetained, OpDeleteRetained:
		if op.Topic == "" {
			return ErrBadOp
		}
	case OpPutWill:
		if op.Will == nil {
			return ErrBadOp
		}
	case OpPutStamp:
		if op.Stamp == nil || op.Stamp.Stamp.IsZero() {
			return ErrBadOp
		}
	case OpPutAwaitingRel:
		if op.Message != nil && (op.Stamp == nil || op.Stamp.Stamp.IsZero()) {
			return ErrBadOp
		}
	case OpDeleteSession, OpPutSubscription, OpDeleteSubscription, OpPutOutbound, OpDeleteOutbound,
		OpDeleteAwaitingRel, OpDeleteWill:
	default:
		return ErrBadOp
	}
	return nil
}
