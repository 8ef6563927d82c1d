//go:build linux

package mqttd

import (
	"sync/atomic"
	"syscall"
	"time"

	"mqttd/internal/netpoll"
	"mqttd/listeners"
)

// The event engine's socket on Linux: a plain TCP or unix connection is
// taken out of Go's hands (listeners.Detach), watched by the poller
// (internal/netpoll) and read by a reader from the pool only when bytes
// arrive. engine_other.go has the same names for systems without epoll.

// The bits of conn.evState.
const (
	// evHup: the poller saw a hang-up or error; the reader must read to
	// the end.
	evHup uint32 = 1 << iota
	// evFraming: a packet has started to arrive and is not complete; the
	// idle limit is then limits.frame_timeout.
	evFraming
)

// framing reports whether a packet has started to arrive and is not
// complete (evFraming).
func (c *conn) framing() bool { return c.evState.Load()&evFraming != 0 }

// eventConn is the socket of a connection read on poller events instead
// of by a goroutine of its own: a descriptor of the engine's own
// (listeners.Detach), and the incomplete frame carried between wakeups.
type eventConn struct {
	netpoll.FD
	// more is what few connections have, nil for the others: an idle
	// connection pays 8 bytes for it, which keeps eventConn at 24 bytes,
	// a size class, where the frame's pointer and the uncount took 32.
	// Atomic, as the reader sets it while another goroutine may close.
	more atomic.Pointer[eventMore]
}

// eventMore is an eventConn's rarer state.
type eventMore struct {
	// partial is an incomplete frame carried to the next wakeup (frame,
	// keepFrame); the reader's own.
	partial []byte
	// uncount takes the connection off its listener's count; nil when
	// it is not counted. Set before the socket is watched, not changed.
	uncount func()
}

// close closes the socket once the calls using it return, and takes the
// connection off its listener's count. It reports false when it was
// closed already.
func (e *eventConn) close() bool {
	if !e.FD.Close() {
		return false
	}
	if m := e.more.Load(); m != nil && m.uncount != nil {
		m.uncount()
	}
	return true
}

// frame is the incomplete frame carried, if any.
func (e *eventConn) frame() []byte {
	if m := e.more.Load(); m != nil {
		return m.partial
	}
	return nil
}

// keepFrame carries b, an incomplete frame, to the next wakeup; nil
// carries nothing. A connection not counted drops its eventMore with the
// frame, so that an idle one does not keep it.
func (e *eventConn) keepFrame(b []byte) {
	m := e.more.Load()
	switch {
	case m == nil && b == nil:
	case m == nil:
		e.more.Store(&eventMore{partial: b})
	case b == nil && m.uncount == nil:
		e.more.Store(nil)
	default:
		m.partial = b
	}
}

// poller is the engine's epoll instance.
type poller = netpoll.Poller[*conn]

func newPoller() (*poller, error) { return netpoll.New[*conn]() }

// PollReadable is the poller's word that bytes arrived (or the stream
// ended, hup): a reader must drain the socket.
func (c *conn) PollReadable(hup bool) {
	if hup {
		c.evState.Or(evHup)
	}
	c.wakeReader()
}

// PollWritable is the poller's word that the socket takes writes again.
func (c *conn) PollWritable() { c.ev.WakeWriter() }

// startEvent serves c from the poller when the connection is a plain
// socket; it reports false when c must have a reader goroutine instead.
// From here on c.nc is nil: the socket is c.ev's.
func (c *conn) startEvent(pl *poller) bool {
	if !c.detachSocket(pl) {
		return false
	}
	c.watchEvents(pl)
	return true
}

// detachSocket takes c's socket out of Go's hands for the poller, without
// watching it yet; it reports false when c must have a reader goroutine.
func (c *conn) detachSocket(pl *poller) bool {
	if pl == nil {
		return false
	}
	fd, uncount, err := listeners.Detach(c.nc)
	if err != nil {
		return false
	}
	c.ev = new(eventConn)
	if uncount != nil {
		c.ev.more.Store(&eventMore{uncount: uncount})
	}
	c.ev.Init(fd)
	c.nc = nil
	c.touch()
	c.setIdleLimit(c.srv.limits().ConnectTimeout)
	return true
}

// watchEvents has the poller watch c's detached socket: bytes already
// waiting are reported at once.
func (c *conn) watchEvents(pl *poller) {
	// A bridge's link writes before it is watched, so its socket may be
	// closed already: then the close woke a reader, which finishes it.
	// Held open, its number cannot be another connection's during Add.
	if !c.ev.Acquire() {
		return
	}
	err := pl.Add(c.ev.Num(), c)
	c.ev.Release()
	if err != nil {
		// Out of epoll watches or memory; with Go's descriptor closed the
		// connection cannot go back to a reader goroutine.
		c.fields(c.srv.log.Warn()).Err(err).Msg("cannot watch the connection; closing it")
		if c.rstate.CompareAndSwap(readerIdle, readerRunning) { // else a reader finishes it
			c.finishEvent(closing(CloseInternalError, err))
		}
		return
	}
	c.srv.idle.watch(c)
}

// write writes b to the socket within timeout: c's writer holds the
// outbox's writing role.
func (c *conn) write(b []byte, timeout time.Duration) (int, error) {
	if c.ev != nil {
		return c.ev.Write(b, timeout)
	}
	return c.writeNetConn(b, timeout)
}

// probeDeadPeer turns on deadPeerProbe where the connection is TCP.
func (c *conn) probeDeadPeer() {
	if c.ev != nil {
		c.ev.SetKeepAlive(deadPeerProbe)
		return
	}
	c.probeNetConn()
}

// closeSocket closes the connection. An event-served descriptor is
// unregistered first, so a new connection given the same number is never
// mistaken for this one, and the reader is woken to finish the connection.
func (c *conn) closeSocket() {
	if c.ev == nil {
		c.nc.Close()
		return
	}
	c.srv.poller.Remove(c.ev.Num(), c)
	c.ev.close()
	c.wakeReader()
}

// peerClosed reports whether the client closed its end of c's socket:
// what it sent before is all it will send.
func (c *conn) peerClosed() bool {
	if c.ev != nil {
		return c.ev.PeerClosed()
	}
	return listeners.PeerClosed(c.nc)
}

// lingerInput reads and drops what the client still sends after the
// server's DISCONNECT until the client closes its end (linger.go), on the
// reader, outside the bound on readers.
func (c *conn) lingerInput() {
	deadline := time.Now().Add(lingerTime)
	if c.ev == nil {
		c.lingerNetConn(deadline)
		return
	}
	c.ev.ShutdownWrite()
	c.mayBlock(func() {
		var buf [1024]byte // small: the reader goroutine keeps its stack when parked
		for read := 0; read < lingerBytes; {
			n, err := c.ev.Read(buf[:])
			read += n
			switch {
			case n > 0:
			case err == nil: // the client closed its end
				return
			case err != syscall.EAGAIN && err != syscall.EINTR:
				return
			default:
				wait := time.Until(deadline)
				if wait <= 0 {
					return
				}
				// In slices, so that a close from elsewhere (Shutdown)
				// is seen within one.
				c.ev.WaitReadable(min(wait, 100*time.Millisecond))
			}
		}
	})
}
