//go:build !linux

package listeners

import (
	"net"
	"os"
	"syscall"
)

// acceptFile is Linux's (socket_linux.go): elsewhere connections are
// accepted through net.Listener.
func acceptFile(net.Listener) (*os.File, syscall.RawConn) { return nil, nil }

// acceptConn accepts the next socket of l through net.Listener: accepting
// with accept4 and handing the descriptor over is Linux's (socket_linux.go).
func (l *Listener) acceptConn(bool) (net.Conn, error) { return l.base.Accept() }
