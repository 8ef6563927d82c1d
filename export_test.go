package mqttd

import (
	"sync"
	"time"

	"mqttd/persistence"
)

// WriterGoroutines returns the writers parked in s's pool and the pool's
// goroutines, running or parked.
func (s *Server) WriterGoroutines() (parked, goroutines int) {
	return s.writerGoroutines.counts()
}

// SetTopicCountTimes sets how often the busiest topics are sampled and
// how long counting runs after the last read; call it before the first
// TopicCounts.
func (s *Server) SetTopicCountTimes(tick, idle time.Duration) {
	s.busy.tick, s.busy.idle = tick, idle
}

// TopicCounting says whether topics are being counted.
func (s *Server) TopicCounting() bool { return s.busy.on.Load() }

// TakeDeadSessions runs s's takeover of node dead's replicated sessions,
// as when it finds the node dead.
func (s *Server) TakeDeadSessions(dead string) { s.takeDeadSessions(s.clusterNode(), dead) }

// HoldsSession reports whether s's registry has client id's session.
func (s *Server) HoldsSession(id string) bool { return s.hasClient(id) }

// FailCommits makes the commits to s's replicated store fail with err
// until the returned function is called.
func (s *Server) FailCommits(err error) (restore func()) {
	w := s.cluster.swap
	ref := w.cur.Load()
	w.cur.Store(&storeRef{failingStore{ref.Store, err}})
	return func() { w.cur.Store(ref) }
}

type failingStore struct {
	persistence.Store
	err error
}

func (f failingStore) Apply(*persistence.Batch) error { return f.err }

// HoldCommits stops s's commits until the returned function is first
// called.
func (s *Server) HoldCommits() (release func()) {
	g := s.dur.commit.Begin()
	var once sync.Once
	return func() { once.Do(func() { s.dur.commit.End(g) }) }
}

// SetClusterConfirmTimeout sets how long s waits for other nodes to
// confirm what its clients publish.
func (s *Server) SetClusterConfirmTimeout(d time.Duration) {
	s.clusterNode().SetConfirmTimeout(d)
}

// HeldAnswers returns how many acknowledgements the connection of
// client id holds back, waiting for the store or other nodes.
func (s *Server) HeldAnswers(id string) int {
	s.mu.Lock()
	cl := s.clients.Get(id)
	s.mu.Unlock()
	if cl == nil {
		return 0
	}
	cl.mu.Lock()
	c := cl.conn
	cl.mu.Unlock()
	if c == nil || c.held == nil {
		return 0
	}
	c.held.mu.Lock()
	defer c.held.mu.Unlock()
	return c.held.held()
}
