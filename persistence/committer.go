package persistence

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Committer applies the batches many goroutines add to one log with as
// few transactions as it can (group commit): while one commit runs, what
// is added waits and goes into the next, so that one fsync covers every
// connection that had something to keep meanwhile.
//
// The broker adds a unit (one batch) under the lock of the session it
// changes, so each session's changes reach the store in the order they
// were made in memory, whichever goroutines made them; units are applied
// in the order added, and a crash leaves a prefix of them applied. A
// reader adds the units of the packets it handles, then at the end of the
// read waits for the last of them (Wait) and releases the
// acknowledgements they cover.
//
// A unit that does not hold together (ErrNoSession, ErrNoMessage,
// ErrBadOp) must not sink the others it was merged with: the round is
// then applied unit by unit, and only that unit fails.
//
// An outbound entry put and deleted while both wait for the same commit
// (a message its subscriber acknowledged while the previous commit ran)
// is never written at all: the commit that acknowledges its publisher
// then costs nothing for it.
type Committer struct {
	store Store

	mu   sync.Mutex
	next Batch // the operations of the units waiting for the next commit
	// waiting is len(next.Ops), as of the last unit added or taken.
	waiting atomic.Int64
	units   []unit // where each waiting unit ends in next.Ops
	// puts are the waiting OpPutOutbound operations by entry; quick
	// counts those marked quick.
	puts  map[outKey]pendingPut
	quick int
	// groups are the open groups (Begin) by the ticket their first unit
	// gets: no commit takes a unit of an open group, nor any after it.
	groups map[uint64]int
	// blocked is set when a commit was asked for and an open group held
	// it back: End starts it.
	blocked bool
	waiters []waiter
	added   uint64 // the ticket of the last unit added
	applied uint64 // every unit up to this ticket is applied or failed
	// lastFailed is the ticket of the latest unit that failed.
	lastFailed atomic.Uint64
	running    bool
	stats      CommitStats
	// voided are the units a cancellation emptied while c.mu was held,
	// for their owners to be told once it is released.
	voided []unit
	// building counts the live operations of the unit addLocked is adding.
	building int
	// delay is how long a commit that would store QoS 1 outbound entries
	// waits for them to be acknowledged first (SetDelay); putsGone is
	// signalled when no quick put is left waiting.
	delay    time.Duration
	putsGone chan struct{}

	// The committing goroutine's scratch, kept from one run to the next so
	// that each run does not grow its buffers again from nothing: only
	// the goroutine that set running touches them, and it is handed over
	// under c.mu.
	round Batch
	taken []unit
	ready []waiter
	refs  map[uint64]struct{}
	timer *time.Timer
}

// Owner is told when a unit it added failed, before any Wait covering
// that unit returns: the broker then refuses what the unit was to make
// durable.
type Owner interface {
	StoreFailed(ticket uint64, err error)
}

// Voider is an Owner that is also told when every operation of a unit it
// added was cancelled while waiting (an outbound entry its subscriber
// acknowledged before the commit took it): nothing of the unit is left to
// store, so what it covers need not wait for a commit. Voided is called
// from the goroutine whose Add cancelled the last operation, with no lock
// of the Committer held; it must not block.
type Voider interface {
	Owner
	Voided(ticket uint64)
}

type unit struct {
	end    int
	ticket uint64
	owner  Owner
	live   int // operations not cancelled
}

type waiter struct {
	ticket uint64
	done   func()
}

type outKey struct {
	session string
	seq     uint64
}

// pendingPut is the last waiting put of an entry; created is set when
// the entry's first put (its delivery) waits too, so that nothing of it
// is stored yet.
type pendingPut struct {
	at      int // in next.Ops
	created bool
	// quick marks a QoS 1 entry not yet released: its subscriber's
	// PUBACK deletes it, which SetDelay's wait is for.
	quick bool
}

// opVoid marks an operation cancelled while it waited: not applied.
const opVoid OpKind = 0

// CommitStats counts a Committer's work.
type CommitStats struct {
	Commits uint64 // transactions applied
	Batches uint64 // units added
	Ops     uint64 // operations applied
	Failed  uint64 // units that failed
	// Cancelled counts operations never applied: outbound entries put and
	// deleted while both waited for the same commit, and the puts of
	// messages nothing else in their commit referred to then.
	Cancelled uint64
}

// NewCommitter returns a Committer applying to s. It starts no goroutine
// until something is to be committed.
func NewCommitter(s Store) *Committer {
	return &Committer{store: s, putsGone: make(chan struct{}, 1)}
}

// SetDelay makes a commit that would store QoS 1 outbound entries wait up
// to d first, or until each of them was acknowledged and so cancelled
// (see Voider), whichever comes first: an online subscriber's PUBACK
// usually takes far less than a commit's fsync, and a commit left with
// nothing to store is not made at all. Entries for offline sessions are
// stored up to d later. QoS 2 entries are not waited for: a PUBREC
// replaces one rather than deleting it, and the PUBCOMP that would comes
// a round trip later (with the wait, durable2 ran at 48–50k msg/s; without
// it, 70–75k). Nor are entries marked AckDistant, whose acknowledgement
// is not near (across a network, or its session offline). Call it before
// the first Add.
func (c *Committer) SetDelay(d time.Duration) { c.delay = d }

// Add appends b's operations, copied (b may be reused at once), as one
// unit, and returns its ticket: tickets increase in the order units are
// added. Nothing is committed until a Wait or Flush asks for it. owner,
// if not nil, is told if the unit fails.
func (c *Committer) Add(b *Batch, owner Owner) (ticket uint64) {
	c.mu.Lock()
	ticket = c.addLocked(b, owner)
	voided := c.takeVoidedLocked()
	c.mu.Unlock()
	tellVoided(voided)
	return ticket
}

// addLocked is Add. The caller holds c.mu and then tells the owners of
// the units it emptied (takeVoidedLocked).
func (c *Committer) addLocked(b *Batch, owner Owner) (ticket uint64) {
	c.building = 0
	for i := range b.Ops {
		c.addOpLocked(&b.Ops[i])
	}
	c.added++
	c.units = append(c.units, unit{end: len(c.next.Ops), ticket: c.added, owner: owner, live: c.building})
	c.waiting.Store(int64(len(c.next.Ops)))
	c.stats.Batches++
	return c.added
}

// voidLocked cancels the waiting operation at next.Ops[at], and notes its
// unit for its owner to be told once no live operation is left in it. The
// caller holds c.mu.
func (c *Committer) voidLocked(at int) {
	c.next.Ops[at] = Op{Kind: opVoid}
	c.stats.Cancelled++
	i := sort.Search(len(c.units), func(i int) bool { return c.units[i].end > at })
	if i == len(c.units) {
		c.building-- // in the unit being added
		return
	}
	u := &c.units[i]
	if u.live--; u.live == 0 && u.owner != nil {
		if _, ok := u.owner.(Voider); ok {
			c.voided = append(c.voided, *u)
		}
	}
}

// takeVoidedLocked returns the units emptied since it was last called.
// The caller holds c.mu.
func (c *Committer) takeVoidedLocked() []unit {
	if len(c.voided) == 0 {
		return nil
	}
	v := c.voided
	c.voided = nil
	return v
}

// tellVoided tells the owners of emptied units; no lock is held.
func tellVoided(units []unit) {
	for _, u := range units {
		u.owner.(Voider).Voided(u.ticket)
	}
}

// AddThen is Add that calls then, from the committer's goroutine, once
// the unit is applied (or failed). then must not block.
func (c *Committer) AddThen(b *Batch, owner Owner, then func()) (ticket uint64) {
	c.mu.Lock()
	ticket = c.addLocked(b, owner)
	c.waiters = append(c.waiters, waiter{ticket, then})
	voided := c.takeVoidedLocked()
	c.mu.Unlock()
	tellVoided(voided)
	return ticket
}

// Begin opens a group: the units added from now until End are applied
// in one transaction, all or none, whatever other goroutines add
// meanwhile (those wait with them). The broker groups what one message
// changes in many sessions.
//
// A group opened while others are open starts where the earliest of them
// does: its units and theirs interleave, and a commit cut at its own
// start once they closed would split their last units from their first.
func (c *Committer) Begin() (group uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.groups == nil {
		c.groups = make(map[uint64]int)
	}
	group = c.added + 1
	for g := range c.groups {
		group = min(group, g)
	}
	c.groups[group]++
	return group
}

// Hold opens a group and returns once every unit added before it is
// applied: until release, nothing added meanwhile is committed, so the
// caller can change what commits write to (or stop them reaching it).
func (c *Committer) Hold() (release func()) {
	g := c.Begin()
	held := make(chan struct{})
	c.Wait(g-1, func() { close(held) })
	<-held
	return func() { c.End(g) }
}

// End closes a group Begin opened.
func (c *Committer) End(group uint64) {
	c.mu.Lock()
	if c.groups[group]--; c.groups[group] <= 0 {
		delete(c.groups, group)
	}
	start := c.blocked && c.startLocked()
	if start {
		c.blocked = false
	}
	c.mu.Unlock()
	if start {
		go c.run()
	}
}

// cutLocked is how many of the waiting units the next commit may take:
// those before the first unit of an open group. The caller holds c.mu.
func (c *Committer) cutLocked() int {
	first := uint64(0)
	for g := range c.groups {
		if first == 0 || g < first {
			first = g
		}
	}
	if first == 0 {
		return len(c.units)
	}
	n := 0
	for n < len(c.units) && c.units[n].ticket < first {
		n++
	}
	return n
}

// takeLocked moves the first n waiting units and their operations into
// round and units. The caller holds c.mu.
func (c *Committer) takeLocked(n int, round *Batch, units []unit) []unit {
	defer func() { c.waiting.Store(int64(len(c.next.Ops))) }()
	if n == len(c.units) {
		round.Ops, c.next.Ops = c.next.Ops, round.Ops[:0]
		units, c.units = c.units, units[:0]
		clear(c.puts)
		c.quick = 0
		return units
	}
	cut := c.units[n-1].end
	round.Ops = append(round.Ops[:0], c.next.Ops[:cut]...)
	rest := copy(c.next.Ops, c.next.Ops[cut:])
	clear(c.next.Ops[rest:])
	c.next.Ops = c.next.Ops[:rest]
	units = append(units[:0], c.units[:n]...)
	left := copy(c.units, c.units[n:])
	clear(c.units[left:])
	c.units = c.units[:left]
	for i := range c.units {
		c.units[i].end -= cut
	}
	for k, p := range c.puts {
		if p.at < cut {
			c.forgetPutLocked(k, p)
		} else {
			p.at -= cut
			c.puts[k] = p
		}
	}
	return units
}

// addOpLocked appends one operation, cancelling a waiting put of an
// outbound entry that this one replaces or deletes. The caller holds c.mu.
func (c *Committer) addOpLocked(op *Op) {
	switch op.Kind {
	case OpPutOutbound:
		if c.puts == nil {
			c.puts = make(map[outKey]pendingPut)
		}
		k := outKey{op.SessionID, op.Outbound.Seq}
		p, replaced := c.puts[k]
		np := pendingPut{
			at:      len(c.next.Ops),
			created: p.created || !replaced && !op.Outbound.Released,
			quick:   op.Outbound.QoS == 1 && !op.Outbound.Released && !op.AckDistant,
		}
		// Counted before the put it replaces is forgotten, so that the
		// wait is not told that no QoS 1 put is left when this is one.
		if np.quick {
			c.quick++
		}
		if replaced {
			c.forgetPutLocked(k, p)
			c.voidLocked(p.at)
		}
		c.puts[k] = np
	case OpDeleteOutbound:
		k := outKey{op.SessionID, op.Seq}
		if p, ok := c.puts[k]; ok && op.Handed {
			c.forgetPutLocked(k, p) // stored, then deleted: never cancelled
		} else if ok {
			c.forgetPutLocked(k, p)
			c.voidLocked(p.at)
			if p.created {
				c.stats.Cancelled++
				return // nothing of the entry was stored
			}
		}
	case OpDeleteSession:
		// A new session of the same ID starts its Seqs again; what waits
		// of the old one is deleted with it.
		for k, p := range c.puts {
			if k.session == op.SessionID {
				c.forgetPutLocked(k, p)
			}
		}
	}
	c.next.Ops = append(c.next.Ops, *op)
	if op.Kind != OpPutMessage {
		// A message is stored only for the entries and retained messages
		// that refer to it: alone it is nothing a unit must wait for.
		c.building++
	}
}

// forgetPutLocked drops the waiting put p of entry k, telling SetDelay's
// wait when no quick put is left. The caller holds c.mu.
func (c *Committer) forgetPutLocked(k outKey, p pendingPut) {
	delete(c.puts, k)
	if !p.quick {
		return
	}
	if c.quick--; c.quick == 0 {
		select {
		case c.putsGone <- struct{}{}:
		default:
		}
	}
}

// Wait calls done once every unit up to ticket is applied (or failed, and
// its owner told), from the committer's goroutine, which done must not
// block, or at once from the caller's when they already are.
func (c *Committer) Wait(ticket uint64, done func()) {
	c.mu.Lock()
	if ticket <= c.applied {
		c.mu.Unlock()
		done()
		return
	}
	c.waiters = append(c.waiters, waiter{ticket, done})
	start := c.startLocked()
	c.mu.Unlock()
	if start {
		go c.run()
	}
}

// Applied returns the ticket up to which every unit is applied or
// failed.
func (c *Committer) Applied() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.applied
}

// FailedAfter reports whether a unit with a ticket after ticket failed.
// Asked once the units of interest are applied (Wait), it tells whether
// any of them failed; units failing later may also make it true.
func (c *Committer) FailedAfter(ticket uint64) bool { return c.lastFailed.Load() > ticket }

// Flush starts committing what was added, without waiting for it.
func (c *Committer) Flush() {
	c.mu.Lock()
	start := c.startLocked()
	c.mu.Unlock()
	if start {
		go c.run()
	}
}

// Sync waits until everything added so far is applied.
func (c *Committer) Sync() {
	c.mu.Lock()
	t := c.added
	c.mu.Unlock()
	ch := make(chan struct{})
	c.Wait(t, func() { close(ch) })
	<-ch
}

// Submit adds b as one unit and calls done with its result once it is
// applied (see Wait).
func (c *Committer) Submit(b *Batch, done func(error)) {
	r := new(result)
	t := c.Add(b, r)
	c.Wait(t, func() { done(r.err) })
}

// result is the Owner of a submitted unit.
type result struct{ err error }

func (r *result) StoreFailed(_ uint64, err error) { r.err = err }

// startLocked reports whether the caller is to start the committing
// goroutine: something waits and none runs. The caller holds c.mu.
func (c *Committer) startLocked() bool {
	if c.running || len(c.units) == 0 {
		return false
	}
	c.running = true
	return true
}

// Waiting reports how many operations wait for a commit. It takes no
// lock: a reader asks after every acknowledgement it holds.
func (c *Committer) Waiting() int { return int(c.waiting.Load()) }

// Stats returns the counts so far.
func (c *Committer) Stats() CommitStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}
