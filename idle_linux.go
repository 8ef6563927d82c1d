//go:build linux

package mqttd

import (
	"sync"
	"time"
)

// idleWheel closes event-served connections that send nothing within their
// idle limit: the connect timeout before CONNECT, 1.5 x keepalive after
// [MQTT-3.1.2-24]. It replaces a timer per connection (about 130 bytes
// each) with a timing wheel: a connection is filed under the tick its
// deadline falls in and looked at again only then, so traffic costs
// nothing but the atomic store of conn.lastRead.
type idleWheel struct {
	mu    sync.Mutex
	slots [idleSlots][]idleEntry
	spare []idleEntry
	stop  chan struct{}
	done  chan struct{}
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

func newIdleWheel() *idleWheel {
	w := &idleWheel{stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

// watch files c for its current deadline: lastRead plus its idle limit.
func (w *idleWheel) watch(c *conn) {
	limit := c.idleLimit.Load()
	if limit <= 0 {
		c.filedTick.Store(0)
		return
	}
	tick := tickOf(c.lastRead.Load()+limit) + 1 // never look early
	c.filedTick.Store(tick)
	w.mu.Lock()
	i := tick % idleSlots
	w.slots[i] = append(w.slots[i], idleEntry{c, tick})
	w.mu.Unlock()
}

func (w *idleWheel) run() {
	defer close(w.done)
	t := time.NewTicker(idleTick)
	defer t.Stop()
	swept := tickOf(time.Now().UnixNano())
	for {
		select {
		case <-w.stop:
			return
		case now := <-t.C:
			for tick := tickOf(now.UnixNano()); swept < tick; {
				swept++
				w.sweep(swept, now.UnixNano())
			}
		}
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
			w.slots[i] = append(w.slots[i], e)
			w.mu.Unlock()
		case now >= c.lastRead.Load()+c.idleLimit.Load():
			// Its own goroutine: telling a 5.0 client may wait for its
			// outbox to drain, which must not hold up the other entries.
			c.srv.writers.Add(1)
			go func() {
				defer c.srv.writers.Done()
				c.idleTimeout()
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

func (w *idleWheel) close() {
	close(w.stop)
	<-w.done
}
