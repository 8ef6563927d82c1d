package mqttd

import (
	"sync"
	"time"
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
