package mqttd

import (
	"net"
	"net/netip"

	"mqttd/listeners"
)

// Admission: a connection is accepted only while the broker holds fewer
// than limits.max_connections, and fewer than
// limits.max_connections_per_address from its source address, so that
// neither a flood of clients nor one hostile device can take every
// descriptor. A refused connection is closed at once, before anything is
// read from it: that costs the least under attack.

// rejectReason says why a connection was refused at accept.
type rejectReason uint8

const (
	rejectMaxConnections rejectReason = iota // limits.max_connections reached
	rejectMaxPerAddress                      // limits.max_connections_per_address reached
	rejectMemoryPressure                     // the live heap is past 7/8 of limits.max_memory
	// Refused by a listener before the connection reached the engine
	// (listeners.Config.Refused).
	rejectListenerFull // the listener's max_connections reached
	rejectPending      // the listener's max_handshakes connections in their handshake
	rejectPerAddress   // the listener's max_handshakes_per_address from the client's address
	rejectOrigin       // a WebSocket page from an origin not allowed
	rejectHandshake    // the TLS handshake, PROXY header or WebSocket upgrade failed
	numRejectReasons
)

var rejectReasonNames = [numRejectReasons]string{
	rejectMaxConnections: "max_connections",
	rejectMaxPerAddress:  "max_connections_per_address",
	rejectMemoryPressure: "memory_pressure",
	rejectListenerFull:   listeners.RefusedFull,
	rejectPending:        listeners.RefusedPending,
	rejectPerAddress:     listeners.RefusedPerAddress,
	rejectOrigin:         listeners.RefusedOrigin,
	rejectHandshake:      listeners.RefusedHandshake,
}

// listenerRefused counts a connection a listener closed before handing
// it on (the listener logs it).
func (s *Server) listenerRefused(reason string) {
	for r, name := range rejectReasonNames {
		if name == reason {
			s.stats.rejected[r].Add(1)
			return
		}
	}
}

func (r rejectReason) String() string { return rejectReasonNames[r] }

// sourceAddr is the address a connection is counted under: an IPv4
// address, or the first address of an IPv6 /64, which one holder fills
// with addresses at will; the zero Addr for addresses that are not IP (a
// pipe, a unix socket) and for loopback, which the per-address limit
// leaves alone: a program on the broker's own machine is trusted as far
// as its operator (the global limit still counts it).
func sourceAddr(a net.Addr) netip.Addr {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.Addr{}
	}
	ip, ok := netip.AddrFromSlice(ta.IP)
	if ip = ip.Unmap(); !ok || ip.IsLoopback() {
		return netip.Addr{}
	}
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.Addr()
	}
	return ip
}

// admitLocked counts a new connection from src, or says why it is
// refused. The caller holds s.mu.
func (s *Server) admitLocked(src netip.Addr) (rejectReason, bool) {
	lim := s.limits()
	if s.stats.memoryPressure.Load() {
		return rejectMemoryPressure, false
	}
	if len(s.conns) >= lim.MaxConnections {
		return rejectMaxConnections, false
	}
	if src.IsValid() {
		if s.perAddr[src] >= lim.MaxConnectionsPerAddress {
			return rejectMaxPerAddress, false
		}
		s.perAddr[src]++
	}
	return 0, true
}

// releaseLocked uncounts a connection from src. The caller holds s.mu.
func (s *Server) releaseLocked(src netip.Addr) {
	if !src.IsValid() {
		return
	}
	if n := s.perAddr[src]; n > 1 {
		s.perAddr[src] = n - 1
	} else {
		delete(s.perAddr, src)
	}
}

// reject closes a connection refused at accept, counting it and saying
// so at most once every warnInterval.
func (s *Server) reject(nc net.Conn, r rejectReason, listener string) {
	s.stats.rejected[r].Add(1) // before the close, which the client sees
	nc.Close()
	if s.rejectWarned.limited() {
		return
	}
	s.log.Warn().Stringer("reason", r).Str("remote", nc.RemoteAddr().String()).Str("listener", listener).
		Int("max_connections", s.limits().MaxConnections).
		Int("max_connections_per_address", s.limits().MaxConnectionsPerAddress).
		Int64("max_memory", s.opts.Limits.MaxMemory).
		Msg("connection refused: limit reached (logged at most every 10 s; mqttd_connections_rejected_total counts them all)")
}
