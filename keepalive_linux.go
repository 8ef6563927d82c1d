//go:build linux

package mqttd

import (
	"sync"
	"time"

	"mqttd/packets"
)

// Keepalive of the connections the poller serves: they have no read
// deadline, so the idle wheel closes those that send nothing within their
// limit, and the reader moves a connection between limits (connect
// timeout, frame timeout, keepalive) as packets arrive.

// idleWheel closes event-served connections that send nothing within their
// idle limit: the connect timeout before CONNECT, 1.5 x keepalive after
// [MQTT-3.1.2-24]. It replaces a timer per connection (about 130 bytes
// each) with a timing wheel: a connection is filed under the tick its
// deadline falls in and looked at again only then, so traffic costs
// nothing but the atomic store of conn.lastRead.
//
// The wheel reads the time from its clock, now, and is swept by advance:
// its goroutine, once started, calls advance at every tick of a ticker,
// and a test calls it with the time it chooses.
type idleWheel struct {
	mu    sync.Mutex
	slots [idleSlots][]idleEntry
	spare []idleEntry

	now    func() int64 // the clock, in unix nanos
	expire func(*conn)  // closes a connection past its deadline: conn.idleTimeout
	swept  int64        // the last tick swept; only advance's caller touches it

	// started and stopped are guarded by mu; stop is closed by close and
	// done by the goroutine when it returns.
	started, stopped bool
	stop             chan struct{}
	done             chan struct{}
}

// idleEntry files a connection for one tick; an entry whose tick is no
// longer the connection's filedTick was superseded and is dropped.
type idleEntry struct {
	c    *conn
	tick int64
}

const (
	idleTick  = 250 * time.Millisecond
	idleSlots = 512 // a lap of 128 s: every entry is looked at least that often
)

func tickOf(unixNano int64) int64 { return unixNano / int64(idleTick) }

// wallClock is the wheel's clock outside tests.
func wallClock() int64 { return time.Now().UnixNano() }

// newIdleWheel returns the server's wheel, on the wall clock. It starts
// no goroutine: Serve calls start.
func newIdleWheel() *idleWheel {
	return makeIdleWheel(wallClock)
}

// makeIdleWheel returns a wheel reading the time from now that starts no
// goroutine until start: until then only advance sweeps it.
func makeIdleWheel(now func() int64) *idleWheel {
	return &idleWheel{
		now:    now,
		expire: (*conn).idleTimeout,
		swept:  tickOf(now()),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
}

// start launches the goroutine that sweeps the wheel every tick, counting
// from now. It does nothing when the wheel already runs or was closed.
func (w *idleWheel) start() {
	w.mu.Lock()
	launch := !w.started && !w.stopped
	if launch {
		w.started = true
		w.swept = tickOf(w.now())
	}
	w.mu.Unlock()
	if launch {
		go w.run()
	}
}

// watch files c for its current deadline, lastRead plus its idle limit,
// in place of the entry it had: a connection has one entry at most, so a
// closed one can be taken out at once (forget) instead of staying, with
// what it points to, until a sweep comes round to it (up to a lap).
func (w *idleWheel) watch(c *conn) {
	limit := c.idleLimit.Load()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.removeLocked(c)
	if limit <= 0 {
		c.filedTick.Store(0)
		return
	}
	tick := tickOf(c.lastRead.Load()+limit) + 1 // never look early
	c.filedTick.Store(tick)
	w.appendLocked(idleEntry{c, tick})
}

// forget takes a finished connection out of the wheel.
func (w *idleWheel) forget(c *conn) {
	w.mu.Lock()
	w.removeLocked(c)
	c.filedTick.Store(0)
	w.mu.Unlock()
}

// appendLocked files e in its slot, recording its place in e.c.idlePos.
func (w *idleWheel) appendLocked(e idleEntry) {
	i := e.tick % idleSlots
	e.c.idlePos = int32(len(w.slots[i]))
	w.slots[i] = append(w.slots[i], e)
}

// removeLocked takes c's current entry out of its slot, if it is there:
// a sweep may have taken the slot's entries out meanwhile, and then
// drops the entry itself as superseded.
func (w *idleWheel) removeLocked(c *conn) {
	tick := c.filedTick.Load()
	if tick == 0 {
		return
	}
	slot := &w.slots[tick%idleSlots]
	pos := int(c.idlePos)
	if pos >= len(*slot) || (*slot)[pos].c != c || (*slot)[pos].tick != tick {
		return
	}
	last := len(*slot) - 1
	moved := (*slot)[last]
	(*slot)[pos], (*slot)[last] = moved, idleEntry{}
	*slot = (*slot)[:last]
	if pos != last && moved.c.filedTick.Load() == moved.tick {
		moved.c.idlePos = int32(pos)
	}
}

func (w *idleWheel) run() {
	defer close(w.done)
	t := time.NewTicker(idleTick)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			w.advance(w.now())
		}
	}
}

// advance sweeps, in order, every tick up to now's that was not swept
// yet. One caller at a time: the wheel's goroutine, or a test driving a
// wheel that was not started.
func (w *idleWheel) advance(now int64) {
	for tick := tickOf(now); w.swept < tick; {
		w.swept++
		w.sweep(w.swept, now)
	}
}

// sweep looks at the entries of one tick: superseded ones and finished
// connections are dropped, ones a lap ahead kept, expired connections
// closed and the others filed again for their new deadline.
func (w *idleWheel) sweep(tick, now int64) {
	i := tick % idleSlots
	w.mu.Lock()
	entries := w.slots[i]
	w.slots[i] = w.spare[:0]
	w.mu.Unlock()
	for _, e := range entries {
		c := e.c
		switch {
		case c.filedTick.Load() != e.tick || c.rstate.Load() == readerDone:
			// Superseded or finished: dropped, so a closed connection is
			// released within a lap even with a keepalive of hours.
		case e.tick > tick: // a later lap
			w.mu.Lock()
			w.appendLocked(e)
			w.mu.Unlock()
		case now >= c.lastRead.Load()+c.idleLimit.Load():
			// Its own goroutine: telling a 5.0 client may wait for its
			// outbox to drain, which must not hold up the other entries.
			c.srv.writers.Add(1)
			go func() {
				defer c.srv.writers.Done()
				w.expire(c)
			}()
		default:
			w.watch(c)
		}
	}
	clear(entries)
	w.mu.Lock()
	w.spare = entries[:0]
	w.mu.Unlock()
}

// close stops the wheel's goroutine, if it was started, and waits for it
// to return; a closed wheel is never started again.
func (w *idleWheel) close() {
	w.mu.Lock()
	started, stopped := w.started, w.stopped
	w.stopped = true
	w.mu.Unlock()
	if stopped {
		return
	}
	close(w.stop)
	if started {
		<-w.done
	}
}

// trackFrame sets the idle limit after a read: while a packet is partly
// arrived, limits.frame_timeout from its first byte (a client with no
// keepalive included); otherwise the keepalive's, from now when a packet
// completed.
func (c *conn) trackFrame(completed bool) {
	partial := len(c.ev.frame()) > 0
	if completed {
		c.touch()
	}
	if partial == c.framing() && !(partial && completed) {
		return
	}
	if partial {
		c.evState.Or(evFraming)
	} else {
		c.evState.And(^evFraming)
	}
	limit := c.keepAliveLimit() * 3 / 2
	if partial {
		if frame := c.srv.limits().FrameTimeout; limit == 0 || frame < limit {
			limit = frame
		}
	}
	c.watchIdle(limit)
}

// touch records that bytes arrived, for the keepalive timer.
func (c *conn) touch() { c.lastRead.Store(time.Now().UnixNano()) }

func (c *conn) setIdleLimit(d time.Duration) { c.idleLimit.Store(int64(d)) }

// watchIdle files the connection with the idle wheel for a new limit,
// counted from now.
func (c *conn) watchIdle(limit time.Duration) {
	c.setIdleLimit(limit)
	c.touch()
	c.srv.idle.watch(c)
}

// idleTimeout closes a connection that sent nothing for its idle limit,
// or took longer than limits.frame_timeout to send a packet.
func (c *conn) idleTimeout() {
	if c.framing() {
		c.sendDisconnectAsync(packets.KeepAliveTimeout)
		c.closeWith(errFrameTimeout)
	} else if c.connected.Load() {
		c.sendDisconnectAsync(packets.KeepAliveTimeout)
		c.closeWith(errKeepAlive)
	} else {
		c.closeWith(errConnectTimeout)
	}
}
