//go:build !linux

package listeners

import "net"

// newWaitConn is Linux's (readwait_linux.go): elsewhere TLS and WebSocket
// connections cannot tell the engine that a read is about to wait, and
// it answers before every read that may.
func newWaitConn(nc net.Conn) net.Conn { return nc }

func onReadWait(net.Conn, func()) bool { return false }

// ReadAheadBytes returns the bytes of the buffers TLS and WebSocket
// connections hold while they read ahead: none but on Linux.
func ReadAheadBytes() int64 { return 0 }
