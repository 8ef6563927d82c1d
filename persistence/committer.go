package persistence

import (
	"errors"
	"sync"
)

// Committer applies the batches many goroutines hand it with as few
// transactions as it can (group commit): while one commit runs, the
// batches that arrive wait together and go into the next, so that one
// fsync covers every connection that had something to keep meanwhile. The
// broker's readers hand it their batch at the end of a read and release
// the acknowledgements it covers when done is called.
//
// A batch that does not hold together (ErrNoSession, ErrNoMessage,
// ErrBadOp) must not sink the others it was merged with: the round is
// then applied batch by batch, and only that batch's done gets the error.
type Committer struct {
	store Store

	mu      sync.Mutex
	next    Batch // the operations of the batches waiting for the next commit
	ends    []int // where each waiting batch ends in next.Ops
	waiters []func(error)
	running bool
	stats   CommitStats
}

// CommitStats counts a Committer's work.
type CommitStats struct {
	Commits uint64 // transactions applied
	Batches uint64 // batches handed in
	Ops     uint64 // operations applied
}

// NewCommitter returns a Committer applying to s. It starts no goroutine
// until a batch comes.
func NewCommitter(s Store) *Committer { return &Committer{store: s} }

// Submit hands in b's operations, copied (b may be reused at once), and
// calls done with the result once they are applied, from the committer's
// goroutine, which done must not block: the next commit waits for it. An
// empty batch is done at once. Batches one goroutine submits are applied
// in the order submitted.
func (c *Committer) Submit(b *Batch, done func(error)) {
	if b.Len() == 0 {
		done(nil)
		return
	}
	c.mu.Lock()
	c.next.Ops = append(c.next.Ops, b.Ops...)
	c.ends = append(c.ends, len(c.next.Ops))
	c.waiters = append(c.waiters, done)
	c.stats.Batches++
	start := !c.running
	c.running = true
	c.mu.Unlock()
	if start {
		go c.run()
	}
}

// Stats returns the counts so far.
func (c *Committer) Stats() CommitStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// run commits rounds until none waits.
func (c *Committer) run() {
	var round Batch
	for {
		c.mu.Lock()
		if len(c.waiters) == 0 {
			c.running = false
			c.mu.Unlock()
			return
		}
		round.Ops, c.next.Ops = c.next.Ops, round.Ops[:0]
		ends, waiters := c.ends, c.waiters
		c.ends, c.waiters = nil, nil
		c.stats.Commits++
		c.stats.Ops += uint64(len(round.Ops))
		c.mu.Unlock()
		c.commit(&round, ends, waiters)
		clear(round.Ops) // let go of the messages
	}
}

// commit applies one round and tells its waiters.
func (c *Committer) commit(round *Batch, ends []int, waiters []func(error)) {
	err := c.store.Apply(round)
	if len(waiters) == 1 || !malformed(err) {
		for _, done := range waiters {
			done(err)
		}
		return
	}
	// One batch does not hold together: find it, without failing the rest.
	var one Batch
	start := 0
	for i, done := range waiters {
		one.Ops = round.Ops[start:ends[i]]
		start = ends[i]
		done(c.store.Apply(&one))
	}
}

func malformed(err error) bool {
	return errors.Is(err, ErrNoSession) || errors.Is(err, ErrNoMessage) || errors.Is(err, ErrBadOp)
}
