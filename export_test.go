package mqttd

// WriterGoroutines returns the writers parked in s's pool and the pool's
// goroutines, running or parked.
func (s *Server) WriterGoroutines() (parked, goroutines int) {
	return s.writerGoroutines.counts()
}
