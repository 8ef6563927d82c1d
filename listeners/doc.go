// Package listeners opens the broker's network listeners: plain TCP, TLS
// (with mutual TLS), WebSocket and WebSocket over TLS, and unix sockets,
// optionally behind a PROXY protocol load balancer and with a per-listener
// connection limit. Each one is a net.Listener whose connections are
// ready for MQTT: handshakes, upgrades and PROXY headers are done, bounded
// by a timeout, before Accept returns them, so the broker's engine sees
// the same net.Conn on every transport and none of the work in front of
// it can hold an accept loop.
//
// A plain TCP or unix connection is returned as the socket itself (or a
// thin wrapper that still exposes its descriptor), so the engine can take
// its descriptor (Detach) and serve it from its epoll poller without Go's
// per-connection poller state; TLS and WebSocket connections expose none
// and get a reader goroutine. On Linux, without PROXY protocol, it is a
// bare socket accepted with accept4, not a *net.TCPConn or *net.UnixConn:
// it becomes one (net.FileConn) on first use as a net.Conn, and Detach
// takes its descriptor as it is.
//
// The package also dials, for bridges to remote brokers: Dial opens the
// client side of the same transports (TCP, TLS, WebSocket, WebSocket over
// TLS), bounded by a context, and ClientTLS builds its TLS configuration
// from the CA, client certificate and key files, server name (SNI) and
// ALPN protocols. A dialed TCP connection is a *net.TCPConn that Detach
// takes as an accepted one; a dialed WebSocket is the same net.Conn
// adapter as an accepted one.
//
// It imports nothing internal: the root package mqttd builds a Config from
// its own ListenerConfig and hands the Listener to Server.AddListener; the
// bridge's settings reach Dial and ClientTLS as plain arguments.
package listeners
