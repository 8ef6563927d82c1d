package mqttd

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"mqttd/persistence"
	"mqttd/persistence/bolt"
	"mqttd/session"
)

// Durable state: every change of a session that outlives its connection
// (client.stored) and of the retained store becomes a unit in the
// Committer's log, added under the lock that orders that change in memory
// (the session's, or retainMu), so that the store sees each session's
// changes in the order they were made. A reader's units are committed
// together at the end of its read, and the acknowledgements they cover
// (PUBACK, PUBREC, PUBREL, PUBCOMP, SUBACK, UNSUBACK) are held until then
// (heldAnswers); later acknowledgements of the same connection wait
// behind them, which keeps [MQTT-4.6.0-2] order, and everything else
// (PINGRESP, deliveries) passes. Nothing is written for clean sessions.

// StoreFile is the name of the bbolt file the broker keeps in DataDir.
const StoreFile = "mqttd.db"

// commitDelay is how long a commit that would store outbound entries
// waits for their subscribers to acknowledge them first: an entry put and
// acknowledged before its commit is never written, and its publisher's
// PUBACK needs no fsync (Committer.SetDelay). A loopback round trip to an
// online subscriber takes a small part of it.
const commitDelay = 300 * time.Microsecond

// replicatedCommitDelay is commitDelay for sessions kept in the cluster's
// replicated store, where a commit is an atomic batch through JetStream's
// leader to two more servers, each syncing it, and each entry stored is
// deleted later by a second write: with 300 µs, on a core shared with
// those servers, most of a durable flow's in-flight entries were written
// and deleted.
const replicatedCommitDelay = 3 * time.Millisecond

// durable is the broker's side of its store.
type durable struct {
	store  persistence.Store
	commit *persistence.Committer
	// own is set when the broker opened the store and closes it; file
	// is then that store, also when replicated sessions swap another in.
	own    bool
	file   *bolt.Store
	msgIDs atomic.Uint64 // the last message id given (session.Message.StoreID)
}

// openStore opens the store Options asks for: Options.Store, or the bbolt
// file in DataDir; neither means nothing is kept.
func openStore(o Options) (*durable, error) {
	if o.Store != nil {
		return &durable{store: o.Store}, nil
	}
	if o.DataDir == "" {
		return nil, nil
	}
	d, _ := parseDurability(o.Durability)
	path := filepath.Join(o.DataDir, StoreFile)
	st, err := bolt.Open(path, bolt.Options{Durability: d})
	if err != nil && o.MoveAsideBadStore && errors.Is(err, bolt.ErrCorrupt) {
		aside, merr := bolt.MoveAside(path)
		if merr != nil {
			return nil, fmt.Errorf("%w; and %w", err, merr)
		}
		o.Logger.Warn().Err(err).Str("moved_to", aside).Msg("the store could not be read: moved aside, starting empty")
		st, err = bolt.Open(path, bolt.Options{Durability: d})
	}
	if err != nil {
		return nil, err
	}
	return &durable{store: st, own: true, file: st}, nil
}

// parseDurability reads Options.Durability.
func parseDurability(s string) (bolt.Durability, bool) {
	switch s {
	case "", "sync":
		return bolt.Sync, true
	case "interval":
		return bolt.Interval, true
	case "none":
		return bolt.None, true
	}
	return 0, false
}

// checkedStore counts and logs what the store does, and its failures.
type checkedStore struct {
	persistence.Store
	s *Server
}

// Apply applies b, counting the commit and logging a failure.
func (cs checkedStore) Apply(b *persistence.Batch) error {
	start := time.Now()
	err := cs.Store.Apply(b)
	took := time.Since(start)
	cs.s.storeHealth.record(err)
	st := &cs.s.stats
	st.storeCommits.Add(1)
	st.storeOps.Add(uint64(b.Len()))
	st.storeCommitNanos.Add(uint64(took))
	st.storeCommitSeconds.observe(&storeCommitSecondsBounds, took.Seconds())
	st.storeCommitOps.observe(&storeCommitOpsBounds, float64(b.Len()))
	if err != nil {
		st.storeErrors.Add(1)
		if !cs.s.storeWarned.limited() {
			cs.s.log.Error().Err(err).Int("ops", b.Len()).
				Msg("store commit failed: what it held is not acknowledged (logged at most every 10 s; mqttd_store_errors_total counts them all)")
		}
	}
	return err
}

// add appends a unit. owner is the connection whose reader adds it, or
// nil: then the unit is committed at once. A reader's units are committed
// at the end of its read, and the next answer it sends waits for the
// units that it covers: those that are what the answer acknowledges (a
// message routed, a subscription made). Others (deletes of what its
// client acknowledged) need not hold anything back.
func (d *durable) add(b *persistence.Batch, owner *conn, covers bool) {
	if owner == nil {
		d.commit.Add(b, nil)
		d.commit.Flush()
		return
	}
	owner.holdAnswers()
	if !covers {
		d.track(owner, d.commit.Add(b, nil), false)
		return
	}
	d.track(owner, d.commit.Add(b, owner), true)
}

// track records a unit owner's reader added, for it to be committed at
// the end of the read and, if it covers the next answer, for that answer
// to wait for it, unless it is voided first.
func (d *durable) track(owner *conn, ticket uint64, covers bool) {
	h := owner.held
	h.added = ticket
	if covers {
		h.last = ticket
		h.mu.Lock()
		if i := slices.Index(h.early, ticket); i >= 0 {
			h.early = slices.Delete(h.early, i, i+1)
		} else {
			h.pending = append(h.pending, ticket)
		}
		h.mu.Unlock()
	}
}

// stored is the form a message is kept in.
func (d *durable) stored(m *session.Message) *persistence.Message {
	pm := &persistence.Message{
		ID:      m.StoreID(&d.msgIDs),
		Topic:   m.Topic,
		Payload: m.Payload,
		QoS:     m.QoS,
		Retain:  m.Retain,
		Origin:  m.Origin,
	}
	if m.Properties != nil {
		pm.Properties = *m.Properties
	}
	pm.Expiry = m.Expiry
	return pm
}

// outboundOf is the stored form of a session entry.
func outboundOf(o session.Outbound, msgID uint64) persistence.Outbound {
	po := persistence.Outbound{Seq: o.Seq, MessageID: msgID, QoS: o.QoS, Retain: o.Retain, SubIDs: o.SubIDs, Released: o.Released}
	if o.Released {
		po.PacketID = session.PacketIDOf(o.Seq)
	}
	return po
}

// deliveredLocked writes an entry a stored session took (sent or
// queued); pm is the message's stored form when the caller has it. then,
// if not nil, is called once it is stored: the entry is held unsent until
// then, and leaves the session if its unit fails (failedDelivery). The
// caller holds cl.mu.
func (d *durable) deliveredLocked(srv *Server, cl *client, o session.Outbound, pm *persistence.Message, owner *conn, then func()) {
	if pm == nil {
		pm = d.stored(o.Msg)
	}
	ops := [2]persistence.Op{
		persistence.PutMessage(pm), // kept once: a message already stored stays as it is
		persistence.PutOutbound(cl.id, outboundOf(o, pm.ID)),
	}
	ops[1].AckDistant = ackDistant(cl)
	if then == nil {
		d.add(&persistence.Batch{Ops: ops[:]}, owner, true)
		return
	}
	u := &failedDelivery{srv: srv, owner: owner, cl: cl, held: true, seq: o.Seq}
	d.addUnit(&persistence.Batch{Ops: ops[:]}, owner, u, then)
}

// stampedLocked is deliveredLocked for a stamped message (cluster_qos2.go):
// the stamp is stored with the entry, so that the session never holds
// one without the other. Apart, and not inlined, so that the third
// operation takes room on a reader's stack only for stamped messages.
//
//go:noinline
func (d *durable) stampedLocked(srv *Server, cl *client, o session.Outbound, pm *persistence.Message, owner *conn, then func(), stamp persistence.Stamp, expiry int64) {
	if pm == nil {
		pm = d.stored(o.Msg)
	}
	ops := [3]persistence.Op{
		persistence.PutMessage(pm),
		persistence.PutOutbound(cl.id, outboundOf(o, pm.ID)),
		persistence.PutStamp(cl.id, stamp, expiry),
	}
	ops[1].AckDistant = ackDistant(cl)
	u := &failedDelivery{srv: srv, owner: owner, cl: cl, stamp: session.Stamp(stamp), expiry: expiry, held: then != nil, seq: o.Seq}
	d.addUnit(&persistence.Batch{Ops: ops[:]}, owner, u, then)
}

// ackDistant reports whether no acknowledgement of cl's new entry is
// near: a bridge's (its remote broker's, across a network) or an offline
// session's. A commit does not wait for it to cancel the entry
// (commitDelay). The caller holds cl.mu.
func ackDistant(cl *client) bool { return cl.conn == nil || cl.bridge.Load() != nil }

// failedDelivery is the Owner of the unit of a held or stamped delivery:
// should the unit fail, what the session took with it goes, so that the
// copy its publisher sends again (the failure refuses the first) is
// taken, stored and delivered once. A held entry (a QoS 2 entry waits
// for its unit before it is sent) leaves the session; a stamp is
// forgotten, or the second copy would be passed over as one the session
// holds. Its unit is never voided (neither a QoS 2 entry nor a stamp's
// record is cancelled by an acknowledgement), so it need not be a Voider
// as its conn is.
type failedDelivery struct {
	srv    *Server
	owner  *conn // nil: none
	cl     *client
	stamp  session.Stamp // zero: none
	expiry int64
	held   bool
	seq    uint64
}

// StoreFailed implements persistence.Owner, on the committer's goroutine,
// before the unit's then lets held entries go.
func (u *failedDelivery) StoreFailed(ticket uint64, err error) {
	u.cl.mu.Lock()
	if !u.stamp.IsZero() {
		u.cl.sess.Forget(u.stamp, u.expiry)
	}
	if u.held {
		u.cl.sess.TakeIf(func(o *session.Outbound) bool { return o.Seq == u.seq }, &u.srv.queueBudget)
		u.srv.accountQueueLocked(u.cl)
	}
	u.cl.mu.Unlock()
	if u.owner != nil {
		u.owner.StoreFailed(ticket, err)
	}
}

// addUnit adds b, whose failure u is told of, covering owner's next
// answer (nil: none), with then to call once it is applied (nil: none).
func (d *durable) addUnit(b *persistence.Batch, owner *conn, u persistence.Owner, then func()) {
	if owner != nil {
		owner.holdAnswers()
	}
	var ticket uint64
	if then == nil {
		ticket = d.commit.Add(b, u)
	} else {
		ticket = d.commit.AddThen(b, u, then)
	}
	if owner == nil {
		d.commit.Flush()
		return
	}
	d.track(owner, ticket, true)
}

// stableThen is what lets a held QoS 2 entry of cl go once it is stored
// (session.Target.Hold): it runs on the committer's goroutine.
func (s *Server) stableThen(cl *client, seq uint64) func() {
	return func() {
		cl.mu.Lock()
		cl.sess.Stable(seq)
		tc := cl.conn
		cl.mu.Unlock()
		if tc != nil {
			tc.pumpFrom(nil, nil)
		}
	}
}

// removedLocked deletes entry seq of a stored session: acknowledged,
// expired, discarded or handed to another session. The caller holds cl.mu.
func (d *durable) removedLocked(cl *client, seq uint64, owner *conn) {
	ops := [1]persistence.Op{persistence.DeleteOutbound(cl.id, seq)}
	d.add(&persistence.Batch{Ops: ops[:]}, owner, false)
}

// handedLocked records that an entry of cl went to another member of its
// share group. Unlike an acknowledgement it cancels nothing waiting: the
// publisher's answer still waits for the entry to be stored here, until
// the other member's copy is. The caller holds cl.mu.
func (d *durable) handedLocked(cl *client, seq uint64) {
	ops := [1]persistence.Op{persistence.DeleteHandedOutbound(cl.id, seq)}
	d.add(&persistence.Batch{Ops: ops[:]}, nil, false)
}

// releasedLocked records that a stored session's QoS 2 entry got its
// PUBREC: after a restart its PUBREL is sent, not the PUBLISH, which the
// client would take for a new message. The caller holds cl.mu.
func (d *durable) releasedLocked(cl *client, o session.Outbound, owner *conn) {
	pm := d.stored(o.Msg)
	o.Released = true
	ops := [2]persistence.Op{
		persistence.PutMessage(pm), // again in case it is not stored: the store keeps the first
		persistence.PutOutbound(cl.id, outboundOf(o, pm.ID)),
	}
	d.add(&persistence.Batch{Ops: ops[:]}, owner, true)
}

// sessionLocked writes a stored session's record, as connection c (its
// latest) and expiry make it. The caller holds cl.mu.
func (d *durable) sessionLocked(cl *client, c *conn, expiry uint32, owner *conn) {
	d.oneLocked(persistence.PutSession(persistence.Session{
		ID: cl.id, Username: c.info.Username, Version: byte(c.version),
		Expiry: expiry, ExpireAt: cl.sess.ExpireAt(), Listener: c.info.Listener,
	}), owner)
}

// oneLocked adds a unit of one operation on a stored session. The caller
// holds cl.mu.
func (d *durable) oneLocked(op persistence.Op, owner *conn) {
	ops := [1]persistence.Op{op}
	d.add(&persistence.Batch{Ops: ops[:]}, owner, true)
}

// storeSessionLocked keeps a persistent session in the store as its
// client connects (the record says it is online: no expiry running), or
// takes out one that now ends with its connection. willDropped says a
// will that waited for its delay is dropped: the client is back in time.
// The caller holds cl.mu.
func (s *Server) storeSessionLocked(c *conn, cl *client, persistent, willDropped bool) {
	if s.dur == nil {
		return
	}
	if !persistent {
		if cl.stored {
			cl.stored = false
			s.dur.oneLocked(persistence.DeleteSession(cl.id), nil)
		}
		return
	}
	if willDropped && cl.stored {
		s.dur.oneLocked(persistence.DeleteWill(cl.id), nil)
	}
	cl.stored = true
	s.dur.sessionLocked(cl, c, c.expiry, nil)
}

// Ready returns nil when the broker serves as it should: Serve runs,
// every listener accepts connections, the store takes writes (no commit
// has failed since the last one that succeeded) and, in a cluster, the
// node is connected to it. Otherwise it
// returns what is not ready, one error per problem (errors.Join).
//
// While commits fail it also starts, at most every probeInterval, a
// probe: a commit that writes and deletes a record no client can have.
// A broker taken out of service as not ready gets no traffic to commit,
// so without the probe it would never find out that the disk has room
// again.
func (s *Server) Ready() error {
	var errs []error
	s.mu.Lock()
	switch {
	case s.closing.Load():
		errs = append(errs, errors.New("shutting down"))
	case !s.serving:
		errs = append(errs, errors.New("not serving yet"))
	case len(s.listeners) == 0:
		errs = append(errs, errors.New("no listener"))
	}
	for _, ln := range s.listeners {
		if ln.stopped != nil {
			errs = append(errs, fmt.Errorf("listener %s stopped: %w", ln.name, ln.stopped))
		}
	}
	serving := s.serving && !s.closing.Load()
	s.mu.Unlock()
	if f := s.storeHealth.failed.Load(); f != nil && s.dur != nil {
		if !s.closing.Load() {
			s.probeStore()
		}
		errs = append(errs, fmt.Errorf("store: commits have failed for %s: %w", time.Since(f.since).Round(time.Second), f.err))
	}
	if s.cluster != nil && serving {
		if node := s.clusterNode(); node == nil || !node.Stats().Connected {
			errs = append(errs, fmt.Errorf("cluster %s: not connected to NATS", s.cluster.cfg.Name))
		} else if !node.StoreReady() || node.CutOff() || !s.cluster.accepting.Load() {
			errs = append(errs, fmt.Errorf("cluster %s: replicated store (JetStream) not reachable: clients are refused", s.cluster.cfg.Name))
		}
	}
	return errors.Join(errs...)
}

// storeHealth is what Ready knows of the store.
type storeHealth struct {
	// failed is set while commits fail: from the first failure after a
	// success, with the last error. Only the committer's goroutine, one
	// at a time, stores it.
	failed  atomic.Pointer[storeFailing]
	probing atomic.Bool  // a probe waits for its commit
	probed  atomic.Int64 // unix nanos the last probe started
}

type storeFailing struct {
	err   error
	since time.Time
}

// record notes a commit's outcome. A unit that does not hold together
// (a bug, which the committer finds and fails alone) says nothing of
// whether the store takes writes.
func (h *storeHealth) record(err error) {
	switch {
	case err == nil:
		if h.failed.Load() != nil {
			h.failed.Store(nil)
		}
	case errors.Is(err, persistence.ErrNoSession), errors.Is(err, persistence.ErrNoMessage), errors.Is(err, persistence.ErrBadOp):
	default:
		since := time.Now()
		if f := h.failed.Load(); f != nil {
			since = f.since
		}
		h.failed.Store(&storeFailing{err: err, since: since})
	}
}

// probeInterval bounds how often Ready probes a failing store: each probe
// is a commit, an fsync with durability sync.
const probeInterval = time.Second

// probeSession is the session a probe stores and deletes in one
// transaction, so that none is ever kept. No client can have it: MQTT
// strings never hold U+0000 [MQTT-1.5.4-2].
const probeSession = "\x00mqttd readiness probe"

// probeStore starts a probe unless one waits or one started within
// probeInterval. Its outcome reaches storeHealth through checkedStore,
// as every commit's does.
func (s *Server) probeStore() {
	h := &s.storeHealth
	now := time.Now().UnixNano()
	if now-h.probed.Load() < int64(probeInterval) || !h.probing.CompareAndSwap(false, true) {
		return
	}
	h.probed.Store(now)
	var b persistence.Batch
	b.PutSession(persistence.Session{ID: probeSession})
	b.DeleteSession(probeSession)
	s.dur.commit.Submit(&b, func(error) { h.probing.Store(false) })
}

// storeForYield returns the bbolt store the broker opened, whose
// checkpoint polls the engine's sockets when it yields
// (bolt.Store.SetYield); a store an embedding program passed is its own.
func (s *Server) storeForYield() (*bolt.Store, bool) {
	if s.dur == nil || s.dur.file == nil {
		return nil, false
	}
	return s.dur.file, true
}
