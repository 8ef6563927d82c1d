package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"mqttd/persistence"
)

// SessionStore is a persistence.Store that keeps persistent sessions in
// a replicated JetStream stream (issue 39's layout A, ARCHITECTURE.md
// "Cluster"): a node that dies leaves its sessions, with their queued
// and unacknowledged messages, for whichever node its clients reconnect
// to (LoadSession). Apply returns once a quorum of the stream's replicas
// holds the batch: one atomic batch per committer round, one round trip
// for the units of many connections, as the local store's fdatasync.
//
// Retained messages are not the sessions' stream's: the operations on
// them, and the messages they need, go to local (the node's own store),
// and the cluster's retained stream (retained.go) carries them between
// nodes.
//
// The store keeps an index of the sessions it owns: their records and
// subscriptions, which entries and packet ids are stored, and each
// stored message's encoding while something refers to it, so that an
// entry is written whole without reading anything back.
type SessionStore struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	cfg     SessionStoreConfig
	local   persistence.Store
	prefix  string
	stream  string
	batchID string // this store's batch id prefix
	writes  storeWrites

	mu       sync.Mutex
	sessions map[string]*storedSession
	msgs     map[uint64]*storedMessage
	retained map[string]uint64
	closed   bool
}

// Writes returns what the store has written to the stream.
func (s *SessionStore) Writes() StoreWrites {
	return StoreWrites{Commits: s.writes.commits.Load(), RoundTrips: s.writes.roundTrips.Load(), Records: s.writes.records.Load()}
}

// SessionStoreConfig says which sessions a SessionStore keeps, where.
type SessionStoreConfig struct {
	// Cluster and Node name the cluster and this node: the stream is the
	// cluster's, and Load gives the sessions whose record names Node.
	Cluster, Node string
	// Replicas of the stream (0: DefaultReplicas, or 1 on a lone
	// server).
	Replicas int
	// Timeout bounds each write and read (0: storeTimeout).
	Timeout time.Duration
}

// storedSession is the index of one stored session.
type storedSession struct {
	subj    sessionSubjects
	rec     sessionRec
	entries map[uint64]persistence.Outbound
	rels    map[uint16]*persistence.Forward // nil: a plain id
	stamps  map[persistence.Stamp]int64     // to its expiry
}

// storedMessage is a message some entry or retained topic refers to.
type storedMessage struct {
	enc  []byte // persistence.AppendMessage's
	refs int
}

// OpenSessionStore binds the cluster's session stream, or makes it, and
// reads back the sessions of cfg.Node and local's retained messages.
func OpenSessionStore(nc *nats.Conn, cfg SessionStoreConfig, local persistence.Store) (*SessionStore, error) {
	if cfg.Timeout == 0 {
		cfg.Timeout = storeTimeout
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	var id [6]byte
	_, _ = rand.Read(id[:])
	s := &SessionStore{
		nc: nc, js: js, cfg: cfg, local: local,
		prefix:   sessionsPrefix(cfg.Cluster),
		stream:   sessionsStream(cfg.Cluster),
		batchID:  hex.EncodeToString(id[:]) + "-",
		sessions: make(map[string]*storedSession),
		msgs:     make(map[uint64]*storedMessage),
		retained: make(map[string]uint64),
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	if err := s.bind(ctx); err != nil {
		return nil, fmt.Errorf("cluster: session stream %s: %w", s.stream, err)
	}
	if err := s.reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// reload builds the index again from the stream and the local store.
// The caller holds s.mu, or has the store to itself.
func (s *SessionStore) reload() error {
	clear(s.sessions)
	clear(s.msgs)
	clear(s.retained)
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
	defer cancel()
	if err := s.readRetained(); err != nil {
		return err
	}
	if err := s.readOwn(ctx); err != nil {
		return fmt.Errorf("cluster: reading sessions back: %w", err)
	}
	return nil
}

func (s *SessionStore) bind(ctx context.Context) error {
	if _, err := s.js.Stream(ctx, s.stream); err == nil || !errors.Is(err, jetstream.ErrStreamNotFound) {
		return err
	}
	cfg := jetstream.StreamConfig{
		Name:               s.stream,
		Description:        "mqttd: persistent sessions, their queued messages and inbound QoS 2 ids",
		Subjects:           []string{s.prefix + ">"},
		Storage:            jetstream.FileStorage,
		MaxMsgsPerSubject:  1,
		AllowAtomicPublish: true,
		AllowMsgTTL:        true,
	}
	return withReplicas("replicas of "+s.stream, s.cfg.Replicas, func(r int) error {
		cfg.Replicas = r
		_, err := s.js.CreateStream(ctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return nil // another node made it meanwhile
		}
		return err
	})
}

// readOwn builds the index from the stream: the sessions whose record
// names this node.
func (s *SessionStore) readOwn(ctx context.Context) error {
	found := make(map[string]*readSession)
	err := readAll(ctx, s.js, s.stream, s.prefix+">", func(subject string, data []byte) error {
		return collect(found, s.prefix, subject, data)
	})
	if err != nil {
		return err
	}
	var own []*readSession
	var maxID uint64
	for id := range s.msgs {
		maxID = max(maxID, id)
	}
	for _, st := range found {
		if st.rec == nil || st.rec.node != s.cfg.Node {
			continue
		}
		own = append(own, st)
		for _, e := range st.entries {
			maxID = max(maxID, e.o.MessageID)
		}
	}
	// A message id is the node's that stored the message: a session
	// adopted from another node may hold ids this node gave messages of
	// its own. Such a message is given a new id, one per encoding.
	renamed := make(map[string]uint64)
	for _, st := range own {
		ss := &storedSession{subj: subjectsOf(s.cfg.Cluster, st.rec.session.ID), rec: *st.rec,
			entries: make(map[uint64]persistence.Outbound), rels: st.rels, stamps: st.stamps}
		for seq, e := range st.entries {
			if m := s.msgs[e.o.MessageID]; m != nil && !bytes.Equal(m.enc, e.msg) {
				id, ok := renamed[string(e.msg)]
				if !ok {
					maxID++
					id = maxID
					renamed[string(e.msg)] = id
				}
				e.o.MessageID = id
			}
			ss.entries[seq] = e.o
			s.ref(e.o.MessageID, e.msg)
		}
		s.sessions[st.rec.session.ID] = ss
	}
	return nil
}

// ref counts a reference to message id, keeping enc if it is new.
func (s *SessionStore) ref(id uint64, enc []byte) {
	if m := s.msgs[id]; m != nil {
		m.refs++
		return
	}
	s.msgs[id] = &storedMessage{enc: enc, refs: 1}
}

func (s *SessionStore) readRetained() error {
	snap, err := s.local.Load()
	if err != nil {
		return err
	}
	for topic, id := range snap.Retained {
		m := snap.Messages[id]
		if m == nil {
			continue
		}
		enc, err := persistence.AppendMessage(nil, m)
		if err != nil {
			return err
		}
		s.retained[topic] = id
		s.ref(id, enc)
	}
	return nil
}

// Load reads back the sessions this node owns, from the stream, and the
// retained messages, from the local store.
func (s *SessionStore) Load() (*persistence.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.reload(); err != nil {
		return nil, err
	}
	snap := &persistence.Snapshot{
		Retained: maps.Clone(s.retained),
		Messages: make(map[uint64]*persistence.Message),
	}
	for _, ss := range s.sessions {
		snap.Sessions = append(snap.Sessions, ss.state())
		for _, o := range ss.entries {
			if err := s.decodeInto(snap.Messages, o.MessageID); err != nil {
				return nil, err
			}
		}
	}
	for _, id := range s.retained {
		if err := s.decodeInto(snap.Messages, id); err != nil {
			return nil, err
		}
	}
	return snap, nil
}

func (s *SessionStore) decodeInto(into map[uint64]*persistence.Message, id uint64) error {
	if into[id] != nil {
		return nil
	}
	sm := s.msgs[id]
	if sm == nil {
		return fmt.Errorf("cluster: session store: no message %d", id)
	}
	m := &persistence.Message{ID: id}
	if err := persistence.DecodeMessage(slices.Clone(sm.enc), m); err != nil {
		return err
	}
	into[id] = m
	return nil
}

// state is a copy of the session as Load gives it.
func (ss *storedSession) state() persistence.SessionState {
	st := persistence.SessionState{Session: ss.rec.session}
	st.Subscriptions = slices.Collect(maps.Values(ss.rec.subs))
	for _, o := range ss.entries {
		o.SubIDs = slices.Clone(o.SubIDs)
		st.Outbound = append(st.Outbound, o)
	}
	slices.SortFunc(st.Outbound, func(a, b persistence.Outbound) int { return cmpU64(a.Seq, b.Seq) })
	st.AwaitingRel = slices.Sorted(maps.Keys(ss.rels))
	for _, f := range ss.rels {
		if f != nil {
			st.Forwards = append(st.Forwards, persistence.Forward{PacketID: f.PacketID, Stamp: f.Stamp, Message: cloneMessage(&f.Message)})
		}
	}
	now := time.Now().UnixNano()
	for stamp, expiry := range ss.stamps {
		if expiry > now {
			st.Stamps = append(st.Stamps, persistence.SeenStamp{Stamp: stamp, Expiry: expiry})
		}
	}
	if w := ss.rec.will; w != nil {
		cw := *w
		cw.Message = cloneMessage(&w.Message)
		st.Will = &cw
	}
	return st
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func cloneMessage(m *persistence.Message) persistence.Message {
	c := *m
	c.Topic = strings.Clone(m.Topic)
	c.Origin = strings.Clone(m.Origin)
	c.Payload = slices.Clone(m.Payload)
	c.Properties = m.Properties.Clone()
	return c
}

// KeepsForwards makes the store a persistence.ForwardKeeper: its
// sessions may be taken over by a node that sends their messages again.
func (s *SessionStore) KeepsForwards() {}

// Close closes the local store; the NATS connection is the caller's.
func (s *SessionStore) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return s.local.Close()
}

// Adopt reads client id's session from the stream, whichever node's
// record it was (a node that died, whose client reconnected here), and
// makes it this store's: in the index, so that later batches change
// and delete what the stream holds of it, and in the record, the next
// time a batch writes it (PutSession). It returns the session and the
// messages its entries refer to, or nil when the stream holds none.
func (s *SessionStore) Adopt(id string) (*persistence.SessionState, map[uint64]*persistence.Message, error) {
	subj := subjectsOf(s.cfg.Cluster, id)
	found := make(map[string]*readSession)
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
	defer cancel()
	err := readAll(ctx, s.js, s.stream, subj.all(), func(subject string, data []byte) error {
		return collect(found, s.prefix, subject, data)
	})
	if err != nil {
		return nil, nil, fmt.Errorf("cluster: reading the session of %q: %w", id, err)
	}
	st := found[ownerKey(id)]
	if st == nil || st.rec == nil || st.rec.session.ID != id {
		return nil, nil, nil
	}
	msgs := make(map[uint64]*persistence.Message)
	for _, e := range st.entries {
		m := &persistence.Message{ID: e.o.MessageID}
		if err := persistence.DecodeMessage(slices.Clone(e.msg), m); err != nil {
			return nil, nil, err
		}
		msgs[m.ID] = m
	}
	ss := &storedSession{subj: subj, rec: *st.rec, entries: make(map[uint64]persistence.Outbound), rels: st.rels, stamps: st.stamps}
	ss.rec.node = s.cfg.Node
	state := ss.state()
	for seq, e := range st.entries {
		state.Outbound = append(state.Outbound, e.o)
		// Another node's message ids are not this node's: the index
		// knows the entry (a later batch deletes or replaces it) but
		// not its message, which the broker stores again under an id of
		// its own.
		e.o.MessageID = 0
		ss.entries[seq] = e.o
	}
	slices.SortFunc(state.Outbound, func(a, b persistence.Outbound) int { return cmpU64(a.Seq, b.Seq) })
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.sessions[id]; old != nil {
		for _, o := range old.entries {
			s.unrefIndex(o.MessageID)
		}
	}
	s.sessions[id] = ss
	return &state, msgs, nil
}

// unrefIndex lets go of a reference outside a batch.
func (s *SessionStore) unrefIndex(id uint64) {
	if m := s.msgs[id]; m != nil {
		if m.refs--; m.refs <= 0 {
			delete(s.msgs, id)
		}
	}
}

// Forget drops client id's session from the index without writing
// anything: it went to another node (a handover), which writes it from
// now on, and a deletion from here could land after its writes.
func (s *SessionStore) Forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.sessions[id]
	if ss == nil {
		return
	}
	for _, o := range ss.entries {
		s.unrefIndex(o.MessageID)
	}
	delete(s.sessions, id)
}

// OpenSessions opens the cluster's replicated sessions for this node
// (Config.Sessions "replicated"), over the node's NATS connection, with
// local for the retained messages. Call it once the node's store is
// ready (StoreReady).
func (n *Node) OpenSessions(local persistence.Store) (*SessionStore, error) {
	return OpenSessionStore(n.nc, SessionStoreConfig{Cluster: n.cluster, Node: n.name, Replicas: n.replicas}, local)
}

// Renumber gives every message the sessions' entries refer to a new id
// from next: the ids the stream holds are another life's of this node
// (or another node's), which the broker may have given messages of its
// own since it started. Retained messages keep theirs (the local store's,
// which the broker restored). Call it before the broker stores anything
// here. It changes nothing, and returns an error, when an entry or a
// retained topic refers to a message the stream does not hold.
func (s *SessionStore) Renumber(next func() uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range s.retained {
		if s.msgs[id] == nil {
			return fmt.Errorf("cluster: session store: no message %d", id)
		}
	}
	for _, ss := range s.sessions {
		for _, o := range ss.entries {
			if s.msgs[o.MessageID] == nil {
				return fmt.Errorf("cluster: session store: no message %d", o.MessageID)
			}
		}
	}
	// The index is built anew: a new id may be an old one that entries
	// not renamed yet still refer to.
	msgs := make(map[uint64]*storedMessage, len(s.msgs))
	for _, id := range s.retained {
		if m := msgs[id]; m != nil {
			m.refs++
		} else {
			msgs[id] = &storedMessage{enc: s.msgs[id].enc, refs: 1}
		}
	}
	renamed := make(map[uint64]uint64)
	for _, ss := range s.sessions {
		for seq, o := range ss.entries {
			id, ok := renamed[o.MessageID]
			if !ok {
				id = next()
				renamed[o.MessageID] = id
				msgs[id] = &storedMessage{enc: s.msgs[o.MessageID].enc}
			}
			msgs[id].refs++
			o.MessageID = id
			ss.entries[seq] = o
		}
	}
	s.msgs = msgs
	return nil
}

// Sessions is Load's snapshot of the index as it is, without reading
// the stream again, of the sessions skip does not skip.
func (s *SessionStore) Sessions(skip func(id string) bool) (*persistence.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := &persistence.Snapshot{Messages: make(map[uint64]*persistence.Message)}
	for id, ss := range s.sessions {
		if skip(id) {
			continue
		}
		snap.Sessions = append(snap.Sessions, ss.state())
		for _, o := range ss.entries {
			if err := s.decodeInto(snap.Messages, o.MessageID); err != nil {
				return nil, err
			}
		}
	}
	return snap, nil
}

// Orphan is a session the stream holds as a dead node's.
type Orphan struct {
	ID, Username string
}

// Orphans lists the sessions the stream holds as node's: a dead node's,
// for the survivors to take over. A session is listed once.
func (s *SessionStore) Orphans(node string) ([]Orphan, error) {
	var found []Orphan
	seen := make(map[string]bool)
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
	defer cancel()
	err := readAll(ctx, s.js, s.stream, s.prefix+"*.rec", func(subject string, data []byte) error {
		if len(data) == 0 {
			return nil
		}
		r, err := decodeRec(data)
		if err != nil {
			return fmt.Errorf("%w: %s", err, subject)
		}
		if r.node == node && !seen[r.session.ID] {
			seen[r.session.ID] = true
			found = append(found, Orphan{ID: r.session.ID, Username: r.session.Username})
		}
		return nil
	})
	return found, err
}
