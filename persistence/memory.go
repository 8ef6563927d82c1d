package persistence

import (
	"bytes"
	"cmp"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// Memory is a Store that keeps everything in memory: for tests, and for a
// broker that keeps nothing across restarts but still goes through the
// same code paths as one that does. It is safe for concurrent use.
//
// Close does nothing: the state lives as long as the Memory, so a test can
// "reopen" it by going on using it.
type Memory struct {
	mu       sync.Mutex
	sessions map[string]*memSession
	retained map[string]uint64
	messages map[uint64]*memMessage
}

type memSession struct {
	session  Session
	subs     map[string]Subscription
	outbound map[uint64]Outbound
	rel      map[uint16]*Forward // nil: no message to forward
	stamps   map[Stamp]int64     // to its expiry
	will     *Will
}

type memMessage struct {
	msg Message
	// refs counts the outbound entries and retained topics referring to
	// the message; it is dropped at the end of a batch that leaves it at 0.
	refs int
}

// NewMemory returns an empty Memory.
func NewMemory() *Memory {
	return &Memory{
		sessions: make(map[string]*memSession),
		retained: make(map[string]uint64),
		messages: make(map[uint64]*memMessage),
	}
}

// KeepsForwards makes Memory a ForwardKeeper, as the reference the
// contract suite holds the other stores to.
func (m *Memory) KeepsForwards() {}

// Close does nothing; the state is kept.
func (m *Memory) Close() error { return nil }

// Apply makes b's changes in order; on an error it undoes those already
// made, so that a failing batch leaves no trace.
func (m *Memory) Apply(b *Batch) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	tx := memTx{m: m}
	for i := range b.Ops {
		if err := tx.apply(&b.Ops[i]); err != nil {
			tx.Rollback()
			return err
		}
	}
	tx.collect()
	return nil
}

// Load returns a deep copy of the state, sessions sorted by ID and their
// subscriptions by filter, so that equal states read back alike.
func (m *Memory) Load() (*Snapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now().UnixNano()
	snap := &Snapshot{
		Sessions: make([]SessionState, 0, len(m.sessions)),
		Retained: maps.Clone(m.retained),
		Messages: make(map[uint64]*Message, len(m.messages)),
	}
	if snap.Retained == nil {
		snap.Retained = make(map[string]uint64)
	}
	for id, mm := range m.messages {
		c := cloneMessage(&mm.msg)
		snap.Messages[id] = &c
	}
	for _, ms := range m.sessions {
		snap.Sessions = append(snap.Sessions, ms.state(now))
	}
	slices.SortFunc(snap.Sessions, func(a, b SessionState) int {
		return strings.Compare(a.Session.ID, b.Session.ID)
	})
	return snap, nil
}

func (ms *memSession) state(now int64) SessionState {
	st := SessionState{Session: ms.session}
	for _, s := range ms.subs {
		st.Subscriptions = append(st.Subscriptions, s)
	}
	slices.SortFunc(st.Subscriptions, func(a, b Subscription) int {
		return strings.Compare(a.Filter, b.Filter)
	})
	for _, o := range ms.outbound {
		o.SubIDs = slices.Clone(o.SubIDs)
		st.Outbound = append(st.Outbound, o)
	}
	slices.SortFunc(st.Outbound, func(a, b Outbound) int { return cmp.Compare(a.Seq, b.Seq) })
	st.AwaitingRel = slices.Sorted(maps.Keys(ms.rel))
	for _, f := range ms.rel {
		if f != nil {
			st.Forwards = append(st.Forwards, Forward{PacketID: f.PacketID, Stamp: f.Stamp, Message: cloneMessage(&f.Message)})
		}
	}
	for stamp, expiry := range ms.stamps {
		if expiry > now {
			st.Stamps = append(st.Stamps, SeenStamp{stamp, expiry})
		}
	}
	if ms.will != nil {
		st.Will = cloneWill(ms.will)
	}
	return st
}

// memTx is one batch being applied (Undo reverts it).
type memTx struct {
	Undo
	m *Memory
	// released are the messages whose count went down, or that were put,
	// in this batch: those still at 0 at the end are dropped then and not
	// at once, so that a later op of the batch may still refer to them.
	released []uint64
}

func (tx *memTx) collect() {
	for _, id := range tx.released {
		if mm, ok := tx.m.messages[id]; ok && mm.refs == 0 {
			delete(tx.m.messages, id)
		}
	}
}

func (tx *memTx) apply(op *Op) error {
	if err := op.Valid(); err != nil {
		return err
	}
	switch op.Kind {
	case OpPutMessage:
		return tx.putMessage(op.Message)
	case OpPutSession:
		return tx.putSession(op.Session)
	case OpDeleteSession:
		tx.deleteSession(op.SessionID)
		return nil
	case OpPutRetained:
		return tx.putRetained(op.Topic, op.MessageID)
	case OpDeleteRetained:
		tx.deleteRetained(op.Topic)
		return nil
	case OpPutSubscription, OpDeleteSubscription, OpPutOutbound, OpDeleteOutbound,
		OpPutAwaitingRel, OpDeleteAwaitingRel, OpPutWill, OpDeleteWill, OpPutStamp:
		return tx.applyToSession(op)
	}
	return ErrBadOp
}

func (tx *memTx) applyToSession(op *Op) error {
	ms := tx.m.sessions[op.SessionID]
	if ms == nil {
		return ErrNoSession
	}
	switch op.Kind {
	case OpPutSubscription:
		s := op.Subscription
		s.Filter = strings.Clone(s.Filter)
		SetUndo(&tx.Undo, ms.subs, s.Filter, s, true)
	case OpDeleteSubscription:
		SetUndo(&tx.Undo, ms.subs, op.Filter, Subscription{}, false)
	case OpPutOutbound:
		return tx.putOutbound(ms, op.Outbound)
	case OpDeleteOutbound:
		tx.deleteOutbound(ms, op.Seq)
	case OpPutAwaitingRel:
		var f *Forward
		if op.Message != nil {
			f = &Forward{PacketID: op.PacketID, Stamp: op.Stamp.Stamp, Message: cloneMessage(op.Message)}
		}
		SetUndo(&tx.Undo, ms.rel, op.PacketID, f, true)
	case OpDeleteAwaitingRel:
		SetUndo(&tx.Undo, ms.rel, op.PacketID, nil, false)
	case OpPutStamp:
		tx.putStamp(ms, op.Stamp.Stamp, op.Stamp.Expiry)
	case OpPutWill:
		if op.Will == nil {
			return ErrBadOp
		}
		tx.setWill(ms, cloneWill(op.Will))
	case OpDeleteWill:
		tx.setWill(ms, nil)
	}
	return nil
}

func (tx *memTx) putMessage(msg *Message) error {
	if msg == nil {
		return ErrBadOp
	}
	if _, ok := tx.m.messages[msg.ID]; ok {
		return nil
	}
	SetUndo(&tx.Undo, tx.m.messages, msg.ID, &memMessage{msg: cloneMessage(msg)}, true)
	tx.released = append(tx.released, msg.ID)
	return nil
}

func (tx *memTx) putSession(s Session) error {
	if s.ID == "" {
		return ErrBadOp
	}
	s.ID = strings.Clone(s.ID)
	s.Username = strings.Clone(s.Username)
	if ms := tx.m.sessions[s.ID]; ms != nil {
		// Only the record is replaced: what the session holds stays.
		old := ms.session
		ms.session = s
		tx.Push(func() { ms.session = old })
		return nil
	}
	SetUndo(&tx.Undo, tx.m.sessions, s.ID, &memSession{
		session:  s,
		subs:     make(map[string]Subscription),
		outbound: make(map[uint64]Outbound),
		rel:      make(map[uint16]*Forward),
		stamps:   make(map[Stamp]int64),
	}, true)
	return nil
}

// deleteSession detaches the session whole, so that undoing it is putting
// it back; the ops after it that reuse the ID work on a new memSession.
func (tx *memTx) deleteSession(id string) {
	ms := tx.m.sessions[id]
	if ms == nil {
		return
	}
	SetUndo(&tx.Undo, tx.m.sessions, id, nil, false)
	for _, o := range ms.outbound {
		tx.unref(o.MessageID)
	}
}

func (tx *memTx) putOutbound(ms *memSession, o Outbound) error {
	if _, ok := tx.m.messages[o.MessageID]; !ok {
		return ErrNoMessage
	}
	o.SubIDs = slices.Clone(o.SubIDs)
	old, had := ms.outbound[o.Seq]
	SetUndo(&tx.Undo, ms.outbound, o.Seq, o, true)
	// Reference the new message before releasing the old one: they may be
	// the same.
	tx.ref(o.MessageID)
	if had {
		tx.unref(old.MessageID)
	}
	return nil
}

func (tx *memTx) deleteOutbound(ms *memSession, seq uint64) {
	old, had := ms.outbound[seq]
	if !had {
		return
	}
	SetUndo(&tx.Undo, ms.outbound, seq, Outbound{}, false)
	tx.unref(old.MessageID)
}

func (tx *memTx) putRetained(topic string, id uint64) error {
	if _, ok := tx.m.messages[id]; !ok {
		return ErrNoMessage
	}
	topic = strings.Clone(topic)
	old, had := tx.m.retained[topic]
	SetUndo(&tx.Undo, tx.m.retained, topic, id, true)
	tx.ref(id)
	if had {
		tx.unref(old)
	}
	return nil
}

func (tx *memTx) deleteRetained(topic string) {
	old, had := tx.m.retained[topic]
	if !had {
		return
	}
	SetUndo(&tx.Undo, tx.m.retained, topic, 0, false)
	tx.unref(old)
}

// putStamp keeps stamp until expiry; every 256th stamp a session takes
// has its expired ones swept first, so that they do not pile up.
func (tx *memTx) putStamp(ms *memSession, stamp Stamp, expiry int64) {
	if len(ms.stamps)%256 == 255 {
		now := time.Now().UnixNano()
		for s, e := range ms.stamps {
			if e <= now {
				SetUndo(&tx.Undo, ms.stamps, s, 0, false)
			}
		}
	}
	SetUndo(&tx.Undo, ms.stamps, stamp, expiry, true)
}

func (tx *memTx) setWill(ms *memSession, w *Will) {
	old := ms.will
	ms.will = w
	tx.Push(func() { ms.will = old })
}

// ref and unref are only called for messages present: the callers checked,
// or hold a reference that kept it.
func (tx *memTx) ref(id uint64) {
	mm := tx.m.messages[id]
	mm.refs++
	tx.Push(func() { mm.refs-- })
}

func (tx *memTx) unref(id uint64) {
	mm := tx.m.messages[id]
	mm.refs--
	tx.Push(func() { mm.refs++ })
	tx.released = append(tx.released, id)
}

// cloneMessage copies m so that the store shares no memory with its
// caller: decoded packets' strings and slices alias their frames, which a
// kept message must neither pin nor see change.
func cloneMessage(m *Message) Message {
	c := *m
	c.Topic = strings.Clone(m.Topic)
	c.Payload = bytes.Clone(m.Payload)
	c.Properties = m.Properties.Clone()
	c.Origin = strings.Clone(m.Origin)
	return c
}

func cloneWill(w *Will) *Will {
	return &Will{Message: cloneMessage(&w.Message), At: w.At}
}
