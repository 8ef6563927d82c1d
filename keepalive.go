package mqttd

import (
	"net"
	"time"
)

// Keepalive [MQTT-3.1.2-24]: a client that sends nothing for 1.5 times
// its keepalive is closed. A connection read by a goroutine of its own
// has a read deadline (here); one served by the poller is filed with the
// idle wheel (keepalive_linux.go). A client without keepalive gets TCP's
// dead-peer probes instead.

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// refreshDeadline allows 1.5 x keepalive from the last packet
// [MQTT-3.1.2-24], plus a slack of at most a second so that the timer is
// reset at most once per slack rather than on every packet. Before CONNECT
// the connect timeout set by serve stands.
func (c *conn) refreshDeadline() {
	if c.keepAlive == 0 {
		return
	}
	now := time.Now()
	ka := c.keepAliveLimit()
	slack := min(ka/2, time.Second)
	if now.Sub(c.bl.deadlineSet) < slack {
		return
	}
	c.bl.deadlineSet = now
	c.nc.SetReadDeadline(now.Add(ka*3/2 + slack))
}

// startKeepAlive moves the connection from the connect timeout to its
// keepalive once CONNECT is accepted; 0 means none.
func (c *conn) startKeepAlive() {
	if c.keepAlive == 0 {
		c.probeDeadPeer()
	}
	if c.ev != nil {
		c.watchIdle(c.keepAliveLimit() * 3 / 2) // [MQTT-3.1.2-24]
		return
	}
	c.nc.SetReadDeadline(time.Time{})
}

// deadPeerProbe is the TCP keepalive of a client that asked for no MQTT
// keepalive: a device that lost power without closing its connection is
// found out after Idle plus Count probes Interval apart (7 minutes), and
// its session released, where nothing else would ever notice. Clients
// with a keepalive need none: the broker closes them after 1.5 x theirs.
var deadPeerProbe = net.KeepAliveConfig{Enable: true, Idle: 5 * time.Minute, Interval: 30 * time.Second, Count: 4}

// probeNetConn turns on deadPeerProbe where c.nc is TCP.
func (c *conn) probeNetConn() {
	if tc, ok := c.nc.(interface {
		SetKeepAliveConfig(net.KeepAliveConfig) error
	}); ok {
		tc.SetKeepAliveConfig(deadPeerProbe)
	}
}

// maxKeepAlive is the longest keepalive, in seconds, a 5.0 client is
// given: limits.max_keepalive, or DefaultMaxKeepAlive where it is 0.
func (s *Server) maxKeepAlive() int {
	if s.limits().MaxKeepAlive != 0 {
		return s.limits().MaxKeepAlive
	}
	return DefaultMaxKeepAlive
}
