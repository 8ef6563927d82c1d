package listeners

import (
	"errors"
	"net"
	"net/netip"
	"sync"
)

// errPerAddress ends a handshake whose client, named by a PROXY header,
// has MaxHandshakesPerAddress under way already.
var errPerAddress = errors.New("too many handshakes under way from the client's address")

// takeHandshake takes a handshake slot for nc: first one of its client
// address's MaxHandshakesPerAddress, then one of the listener's
// MaxHandshakes, so that one address cannot take them all. It returns
// the address the slot is counted under (see boundedAddr); when no slot
// is free it closes nc, counts and logs why, and reports false.
func (l *Listener) takeHandshake(nc net.Conn) (netip.Addr, bool) {
	a := l.boundedAddr(nc.RemoteAddr())
	if !l.takeAddr(a) {
		l.refuseSlot(nc, RefusedPerAddress)
		return a, false
	}
	if l.pending.Add(1) > int64(l.cfg.MaxHandshakes) {
		l.pending.Add(-1)
		l.releaseAddr(a)
		l.refuseSlot(nc, RefusedPending)
		return a, false
	}
	return a, true
}

// releaseHandshake gives back a slot takeHandshake took.
func (l *Listener) releaseHandshake(a netip.Addr) {
	l.pending.Add(-1)
	l.releaseAddr(a)
}

// boundedAddr is the address a connection from remote is counted under
// for MaxHandshakesPerAddress: an IPv6 client's /64, which one home or
// one attacker holds whole as an IPv4 one holds its address. It is the
// zero Addr, not counted, for addresses that are not IP, loopback (a
// program on this machine, a reverse proxy on it, trusted as far as the
// operator, as the broker's own max_connections_per_address does) and
// ProxyTrusted peers, which speak for many clients.
func (l *Listener) boundedAddr(remote net.Addr) netip.Addr {
	ap, err := netip.ParseAddrPort(remote.String())
	if err != nil {
		return netip.Addr{}
	}
	a := ap.Addr().Unmap().WithZone("")
	if a.IsLoopback() || l.trusted(a) {
		return netip.Addr{}
	}
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.Addr()
	}
	return a
}

// takeAddr counts one more handshake from a, or reports false when a has
// MaxHandshakesPerAddress under way. The zero Addr is not counted.
func (l *Listener) takeAddr(a netip.Addr) bool {
	if !a.IsValid() {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.perAddr[a] >= l.cfg.MaxHandshakesPerAddress {
		return false
	}
	l.perAddr[a]++
	return true
}

// releaseAddr uncounts a handshake takeAddr counted.
func (l *Listener) releaseAddr(a netip.Addr) {
	if !a.IsValid() {
		return
	}
	l.mu.Lock()
	if n := l.perAddr[a]; n > 1 {
		l.perAddr[a] = n - 1
	} else {
		delete(l.perAddr, a)
	}
	l.mu.Unlock()
}

// refuseSlot closes nc, which found no handshake slot free (why is
// RefusedPerAddress or RefusedPending), counting it and logging at most
// every 10 s.
func (l *Listener) refuseSlot(nc net.Conn, why string) {
	// Counted before the close, which the client may see first.
	if why == RefusedPerAddress {
		l.refuse(why, &l.addrWarned).Str("remote", nc.RemoteAddr().String()).
			Int("max_handshakes_per_address", l.cfg.MaxHandshakesPerAddress).
			Msg("connection refused: its address has max_handshakes_per_address connections in their handshake (logged at most every 10 s)")
	} else {
		l.refuse(why, &l.fullWarned).Str("remote", nc.RemoteAddr().String()).Int("max_handshakes", l.cfg.MaxHandshakes).
			Msg("connection refused: the listener has max_handshakes connections in their handshake (logged at most every 10 s)")
	}
	nc.Close()
}

// pendingListener counts the connections it hands the WebSocket server
// as in their handshake until their upgrade, as the staged listener does
// for TLS handshakes.
type pendingListener struct {
	net.Listener
	l *Listener
}

func (p pendingListener) Accept() (net.Conn, error) {
	for {
		nc, err := p.Listener.Accept()
		if err != nil {
			return nil, err
		}
		// Behind a PROXY header, RemoteAddr is the client it named.
		if a, ok := p.l.takeHandshake(nc); ok {
			return &pendingConn{Conn: newWaitConn(nc), l: p.l, addr: a}, nil
		}
	}
}

// pendingConn is a connection counted as in its handshake until it is
// upgraded or closed.
type pendingConn struct {
	net.Conn
	l    *Listener
	addr netip.Addr // counted under, for MaxHandshakesPerAddress
	once sync.Once
}

// settled uncounts the connection, once.
func (c *pendingConn) settled() { c.once.Do(func() { c.l.releaseHandshake(c.addr) }) }

// Close closes the connection and uncounts it if it was still pending.
func (c *pendingConn) Close() error {
	c.settled()
	return c.Conn.Close()
}

// NetConn returns the connection under the count.
func (c *pendingConn) NetConn() net.Conn { return c.Conn }
