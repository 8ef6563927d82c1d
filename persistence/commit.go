package persistence

import "time"

// The committing goroutine: it takes the waiting units a round at a time,
// commits each round as one Apply, and tells the units' waiters.

// keptOps is the most operations a round's buffer keeps room for between
// runs (~250 KB); the units, waiters and referenced messages of a round
// are kept to as many.
const keptOps = 1024

// run commits rounds until nothing is left to commit.
func (c *Committer) run() {
	round := &c.round
	if c.refs == nil {
		c.refs = make(map[uint64]struct{})
	}
	waited, bigRefs := false, false
	for {
		c.mu.Lock()
		if c.delay > 0 && c.quick > 0 && !waited {
			select {
			case <-c.putsGone: // stale: from before these puts
			default:
			}
			c.mu.Unlock()
			if c.timer == nil {
				c.timer = time.NewTimer(c.delay)
			} else {
				c.timer.Reset(c.delay)
			}
			select {
			case <-c.putsGone:
				c.timer.Stop()
			case <-c.timer.C:
			}
			waited = true
			continue
		}
		waited = false
		n := c.cutLocked()
		if n == 0 {
			// A burst's scratch is not kept while idle, its units, waiters
			// and map of referenced messages no more than its operations.
			if cap(round.Ops) > keptOps {
				round.Ops = nil
			}
			if cap(c.taken) > keptOps {
				c.taken = nil
			}
			if cap(c.ready) > keptOps {
				c.ready = nil
			}
			if bigRefs {
				c.refs = nil // a cleared map keeps its room
			}
			c.running = false
			c.blocked = len(c.units) > 0
			c.mu.Unlock()
			return
		}
		c.taken = c.takeLocked(n, round, c.taken)
		units := c.taken
		c.mu.Unlock()
		dropped := dropVoid(round, units, c.refs)
		bigRefs = bigRefs || len(c.refs) > keptOps
		c.mu.Lock()
		c.stats.Cancelled += uint64(dropped)
		c.stats.Commits++
		c.stats.Ops += uint64(len(round.Ops))
		c.mu.Unlock()

		failed := c.commit(round, units)

		c.mu.Lock()
		c.stats.Failed += uint64(failed)
		c.applied = units[len(units)-1].ticket
		ready := c.ready[:0]
		kept := c.waiters[:0]
		for _, w := range c.waiters {
			if w.ticket <= c.applied {
				ready = append(ready, w)
			} else {
				kept = append(kept, w)
			}
		}
		clear(c.waiters[len(kept):])
		c.waiters = kept
		c.ready = ready
		c.mu.Unlock()
		for _, w := range ready {
			w.done()
		}
		clear(ready)
		clear(round.Ops) // let go of the messages
		clear(units)
	}
}

// commit applies one round, telling the owners of the units that failed,
// and returns how many did.
func (c *Committer) commit(round *Batch, units []unit) (failed int) {
	if round.Len() == 0 {
		return 0 // everything in it was cancelled
	}
	err := c.store.Apply(round)
	if err == nil {
		return 0
	}
	if len(units) == 1 || !Malformed(err) {
		c.lastFailed.Store(units[len(units)-1].ticket)
		for _, u := range units {
			if u.owner != nil {
				u.owner.StoreFailed(u.ticket, err)
			}
		}
		return len(units)
	}
	// One unit does not hold together: find it, without failing the rest.
	var one Batch
	start := 0
	for _, u := range units {
		one.Ops = round.Ops[start:u.end]
		start = u.end
		if err := c.store.Apply(&one); err != nil {
			failed++
			c.lastFailed.Store(u.ticket)
			if u.owner != nil {
				u.owner.StoreFailed(u.ticket, err)
			}
		}
	}
	return failed
}

// dropVoid takes the cancelled operations out of a round, moving the
// units' ends, and the messages no operation left in the round refers to:
// the store would drop them at the end of the round anyway (a message
// already stored stays as it is whether put again or not), and every
// unit that refers to a message puts it too. A round whose entries were
// all acknowledged in time is then empty, and costs no commit at all. It
// reports how many messages it dropped; refs is scratch.
func dropVoid(round *Batch, units []unit, refs map[uint64]struct{}) (dropped int) {
	clear(refs)
	for i := range round.Ops {
		switch op := &round.Ops[i]; op.Kind {
		case OpPutOutbound:
			refs[op.Outbound.MessageID] = struct{}{}
		case OpPutRetained:
			refs[op.MessageID] = struct{}{}
		}
	}
	n, start := 0, 0
	for i := range units {
		for j := start; j < units[i].end; j++ {
			op := &round.Ops[j]
			if op.Kind == opVoid {
				continue
			}
			if op.Kind == OpPutMessage {
				if _, ok := refs[op.Message.ID]; !ok {
					dropped++
					continue
				}
			}
			round.Ops[n] = *op
			n++
		}
		start = units[i].end
		units[i].end = n
	}
	clear(round.Ops[n:])
	round.Ops = round.Ops[:n]
	return dropped
}
