//go:build !linux

package mqttd

import (
	"time"

	"mqttd/listeners"
)

// Without epoll every connection has a reader goroutine of its own.

type poller struct{}

type eventConn struct{}

func newPoller() (*poller, error) { return nil, nil }

func (*poller) Close() {}

func (*poller) Poll() {}

type idleWheel struct{}

type readerPool struct{}

func newReaderPool(*Server) *readerPool { return nil }

func (*readerPool) close() {}

func newIdleWheel() *idleWheel { return nil }

func (*idleWheel) start() {}

func (*idleWheel) close() {}

func (c *conn) startEvent(*poller) bool { return false }

func (c *conn) detachSocket(*poller) bool { return false }

func (c *conn) watchEvents(*poller) {}

func (c *conn) closeSocket() { c.nc.Close() }

func (c *conn) mayBlock(f func()) { f() }

func (c *conn) write(b []byte, timeout time.Duration) (int, error) { return c.writeNetConn(b, timeout) }

func (c *conn) probeDeadPeer() { c.probeNetConn() }

func (c *conn) watchIdle(time.Duration) {}

func (c *conn) peerClosed() bool { return listeners.PeerClosed(c.nc) }

func (c *conn) lingerInput() { c.lingerNetConn(time.Now().Add(lingerTime)) }
