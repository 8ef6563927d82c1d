//go:build linux

package mqttd

import (
	"bytes"
	"errors"
	"sync"
	"syscall"
	"time"

	"mqttd/packets"
)

// Reader states of a connection served by the poller.
const (
	readerIdle    int32 = iota // no reader goroutine
	readerRunning              // a reader is draining the socket
	readerAgain                // running, and bytes arrived since its last read
	readerDone                 // the connection is finished
)

// eventReadBufSize is the pooled buffer a reader reads into while it runs.
const eventReadBufSize = 16 << 10

// readScratch is what a running reader borrows from a pool: the buffer it
// reads into and a Publish it decodes every PUBLISH into, so that neither
// costs an idle connection anything nor a message an allocation.
type readScratch struct {
	buf []byte
	pub packets.Publish
}

var readPool = sync.Pool{New: func() any { return &readScratch{buf: make([]byte, eventReadBufSize)} }}

// eventConn is the state of a connection read on poller events instead
// of by a goroutine of its own.
type eventConn struct {
	raw     syscall.RawConn
	fd      int
	readFn  func(fd uintptr) bool // made once: no allocation per read
	rbuf    []byte
	rn      int
	rerr    error
	partial []byte // an incomplete frame carried to the next wakeup
	timer   *time.Timer
}

// startEvent serves c from the poller when the connection is a plain
// socket; it reports false when c must have a reader goroutine instead.
func (c *conn) startEvent(pl *poller) bool {
	if pl == nil {
		return false
	}
	sc, ok := c.nc.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	ev := &eventConn{raw: raw, fd: -1}
	raw.Control(func(fd uintptr) { ev.fd = int(fd) })
	if ev.fd < 0 {
		return false
	}
	ev.readFn = func(fd uintptr) bool {
		ev.rn, ev.rerr = syscall.Read(int(fd), ev.rbuf)
		return true
	}
	c.ev = ev
	c.touch()
	c.setIdleLimit(c.srv.opts.Limits.ConnectTimeout)
	ev.timer = time.AfterFunc(c.srv.opts.Limits.ConnectTimeout, c.onIdleTimer)
	if err := pl.add(ev.fd, c); err != nil {
		ev.timer.Stop()
		c.ev = nil
		return false
	}
	return true
}

// wakeReader is called by the poller when bytes arrive: it starts a reader
// goroutine, or tells the running one to read again before it stops.
func (c *conn) wakeReader() {
	for {
		switch s := c.rstate.Load(); s {
		case readerIdle:
			if c.rstate.CompareAndSwap(readerIdle, readerRunning) {
				go c.readEvents()
				return
			}
		case readerRunning:
			if c.rstate.CompareAndSwap(readerRunning, readerAgain) {
				return
			}
		default:
			return
		}
	}
}

// readEvents drains the socket without blocking, handles every whole
// frame and flushes the answers, then gives up the goroutine and the
// read buffer until the poller reports more bytes.
func (c *conn) readEvents() {
	rs := readPool.Get().(*readScratch)
	defer readPool.Put(rs)
	defer func() {
		if r := recover(); r != nil {
			c.finishEvent(c.panicked(r))
		}
	}()
	ev := c.ev
	for {
		ev.rbuf = rs.buf
		err := ev.raw.Read(ev.readFn)
		if err == nil {
			err = ev.rerr
		}
		n := ev.rn
		ev.rbuf = nil
		switch {
		case err == nil && n > 0:
			c.touch()
			if err := c.consume(rs.buf[:n], &rs.pub); err != nil {
				c.finishEvent(err)
				return
			}
			continue
		case err == nil: // a read of 0 bytes: the peer closed
			c.finishEvent(errClosedByPeer)
			return
		case errors.Is(err, syscall.EAGAIN):
		case errors.Is(err, syscall.EINTR):
			continue
		default:
			c.finishEvent(c.readError(err))
			return
		}
		c.flushDeferred()
		if c.rstate.CompareAndSwap(readerRunning, readerIdle) {
			return
		}
		if !c.rstate.CompareAndSwap(readerAgain, readerRunning) {
			return // finished meanwhile
		}
	}
}

// consume handles every whole frame in the bytes read, keeping an
// incomplete one for the next wakeup. Each frame's body is copied into a
// slice of its own, which the decoded packet owns.
func (c *conn) consume(b []byte, pub *packets.Publish) error {
	ev := c.ev
	if len(ev.partial) > 0 {
		ev.partial = append(ev.partial, b...)
		b = ev.partial
		ev.partial = nil
	}
	maxSize := c.srv.opts.Limits.MaxPacketSize
	for len(b) > 0 {
		fh, n, err := packets.ParseFixedHeader(b, c.version, maxSize)
		if err != nil {
			return c.readError(err)
		}
		if n == 0 || len(b) < n+fh.Remaining {
			// Kept in a slice that grows only as bytes arrive, so a
			// length that lies reserves nothing (CVE-2017-7651).
			ev.partial = append([]byte(nil), b...)
			return nil
		}
		// A copy that is not zeroed first, unlike make then copy.
		body := bytes.Clone(b[n : n+fh.Remaining])
		b = b[n+fh.Remaining:]
		if fh.Type == packets.TypePublish && c.cl != nil {
			err := packets.DecodePublish(fh, body, c.version, pub)
			if err == nil {
				err = c.handlePublish(pub)
			} else {
				err = c.readError(err)
			}
			*pub = packets.Publish{} // drop references to the body
			if err != nil {
				return err
			}
			continue
		}
		p, err := packets.Decode(fh, body, c.version)
		switch {
		case c.cl == nil:
			err = c.connectPacket(p, err)
			if err == nil && c.keepAlive > 0 {
				ev.timer.Reset(c.keepAlive * 3 / 2)
			}
		case err == nil:
			err = c.handle(p)
		default:
			err = c.readError(err)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// touch records that bytes arrived, for the keepalive timer.
func (c *conn) touch() { c.lastRead.Store(time.Now().UnixNano()) }

func (c *conn) setIdleLimit(d time.Duration) { c.idleLimit.Store(int64(d)) }

// onIdleTimer closes a connection that sent nothing for its idle limit:
// the connect timeout before CONNECT, 1.5 x keepalive after
// [MQTT-3.1.2-24]. Otherwise it sleeps until the limit could next pass,
// so the timer fires about once per keepalive rather than per packet.
func (c *conn) onIdleTimer() {
	limit := time.Duration(c.idleLimit.Load())
	if limit <= 0 || c.rstate.Load() == readerDone {
		return
	}
	idle := time.Since(time.Unix(0, c.lastRead.Load()))
	if idle < limit {
		c.ev.timer.Reset(limit - idle)
		return
	}
	if c.connected.Load() {
		c.sendDisconnectAsync(packets.KeepAliveTimeout)
		c.closeWith(errKeepAlive)
	} else {
		c.closeWith(errConnectTimeout)
	}
}

// finishEvent ends an event-served connection on its reader goroutine,
// where the cleanup may use the reader's state.
func (c *conn) finishEvent(reason error) {
	c.closeWith(reason)
	if c.rstate.Swap(readerDone) == readerDone {
		return
	}
	c.ev.timer.Stop()
	c.cleanup()
	c.srv.untrack(c)
}

// closeSocket closes the connection. An event-served descriptor is
// unregistered first, so a new connection given the same number is never
// mistaken for this one, and the reader is woken to finish the connection.
func (c *conn) closeSocket() {
	if c.ev == nil {
		c.nc.Close()
		return
	}
	c.srv.poller.remove(c.ev.fd, c)
	c.nc.Close()
	c.wakeReader()
}
