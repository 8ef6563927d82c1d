package mqttd

import (
	"container/heap"
	"sync"
	"time"
)

// Session expiry: a session kept after its connection ends (3.1.1 clean
// session 0, 5.0 Session Expiry Interval above 0) is dropped, with its
// queue and subscriptions, once it has been offline for its expiry
// interval. Offline sessions are filed by the tick their deadline falls
// in; a goroutine sleeps until the earliest tick, so nothing runs while no
// session is offline or none is due. A session that comes back is taken
// out of its tick at once, so a client that reconnects often leaves
// nothing behind.

// expiryTick is the resolution of session expiry: a session expires within
// a tick after its deadline.
const expiryTick = 100 * time.Millisecond

// expiryWheel holds the offline sessions by the tick they expire at. Its
// lock is a leaf: nothing else is locked while it is held.
type expiryWheel struct {
	mu    sync.Mutex
	slots map[int64]*expirySlot // by tick
	ticks slotHeap              // the same slots, earliest first
	wake  chan struct{}         // an earlier tick was filed
	stop  chan struct{}
	done  chan struct{}
	run   bool // the goroutine was started
}

// expirySlot is the sessions expiring at one tick.
type expirySlot struct {
	tick    int64
	clients []*client
	index   int // in expiryWheel.ticks
}

func newExpiryWheel() *expiryWheel {
	return &expiryWheel{slots: make(map[int64]*expirySlot), wake: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
}

func expiryTickOf(unixNano int64) int64 { return unixNano/int64(expiryTick) + 1 } // never early

// schedule files cl to expire at the unix nano time at.
func (w *expiryWheel) schedule(cl *client, at int64) {
	tick := expiryTickOf(at)
	w.mu.Lock()
	slot := w.slots[tick]
	if slot == nil {
		slot = &expirySlot{tick: tick}
		w.slots[tick] = slot
		heap.Push(&w.ticks, slot)
	}
	cl.expiryPos = int32(len(slot.clients))
	slot.clients = append(slot.clients, cl)
	earliest := w.ticks[0] == slot
	w.mu.Unlock()
	if earliest {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// cancel takes cl out of the tick it was filed under for at, in constant
// time: 50,000 devices cut off in the same tick by a network outage come
// back one by one, and a scan of the slot for each was quadratic. A slot
// left empty leaves the wheel, so a client that comes back often leaves
// nothing behind.
func (w *expiryWheel) cancel(cl *client, at int64) {
	tick := expiryTickOf(at)
	w.mu.Lock()
	defer w.mu.Unlock()
	slot := w.slots[tick]
	i := int(cl.expiryPos)
	if slot == nil || i >= len(slot.clients) || slot.clients[i] != cl {
		return
	}
	last := len(slot.clients) - 1
	moved := slot.clients[last]
	slot.clients[i], slot.clients[last] = moved, nil
	moved.expiryPos = int32(i)
	slot.clients = slot.clients[:last]
	if len(slot.clients) == 0 {
		heap.Remove(&w.ticks, slot.index)
		delete(w.slots, tick)
	}
}

// due takes out the sessions filed at ticks up to now and returns them,
// with how long to wait for the next tick (0: none is filed).
func (w *expiryWheel) due(now int64) (expired []*client, wait time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	nowTick := now / int64(expiryTick)
	for len(w.ticks) > 0 && w.ticks[0].tick <= nowTick {
		slot := heap.Pop(&w.ticks).(*expirySlot)
		expired = append(expired, slot.clients...)
		delete(w.slots, slot.tick)
	}
	if len(w.ticks) > 0 {
		wait = time.Duration(w.ticks[0].tick*int64(expiryTick) - now)
	}
	return expired, wait
}

// start runs the goroutine that expires sessions through s.
func (w *expiryWheel) start(s *Server) {
	w.run = true
	go func() {
		defer close(w.done)
		t := time.NewTimer(time.Hour)
		defer t.Stop()
		for {
			expired, wait := w.due(time.Now().UnixNano())
			for _, cl := range expired {
				s.expireSession(cl)
			}
			if wait <= 0 {
				wait = time.Hour // nothing filed: sleep until woken
			}
			t.Reset(wait)
			select {
			case <-t.C:
			case <-w.wake:
			case <-w.stop:
				return
			}
		}
	}()
}

// close stops the goroutine, if it was started.
func (w *expiryWheel) close() {
	if !w.run {
		return
	}
	close(w.stop)
	<-w.done
}

// slotHeap is a min-heap of slots by tick that keeps each slot's index.
type slotHeap []*expirySlot

func (h slotHeap) Len() int           { return len(h) }
func (h slotHeap) Less(i, j int) bool { return h[i].tick < h[j].tick }
func (h slotHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *slotHeap) Push(x any) {
	slot := x.(*expirySlot)
	slot.index = len(*h)
	*h = append(*h, slot)
}
func (h *slotHeap) Pop() any {
	old := *h
	slot := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return slot
}

// expireSession drops cl's session if it is still offline and past its
// deadline: it may have come back, or been replaced, since it was filed.
func (s *Server) expireSession(cl *client) {
	now := time.Now().UnixNano()
	s.mu.Lock()
	if s.clients.Get(cl.id) != cl {
		s.mu.Unlock()
		return
	}
	cl.mu.Lock()
	at := cl.sess.ExpireAt()
	expired := cl.conn == nil && at != 0 && expiryTickOf(at) <= now/int64(expiryTick)
	cl.mu.Unlock()
	if !expired {
		s.mu.Unlock()
		return
	}
	s.clients.Remove(cl.id)
	will := s.takeWillLocked(cl) // the session ends before the will's delay
	dropped := s.dropSessionLocked(cl)
	s.mu.Unlock()
	s.stats.sessionsExpired.Add(1) // before the will, which a watcher may take as the sign
	s.unsubscribeAll(cl, dropped)
	s.publishWill(will)
	s.releaseClientID(cl.id, nil)
	s.log.Debug().Str("client_id", cl.id).Msg("session expired")
}
