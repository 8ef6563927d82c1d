//go:build unix

package listeners

import (
	"errors"
	"io"
	"net"
	"syscall"
)

// canPeek says whether peekByte works: Listen refuses the PROXY protocol
// where it does not.
const canPeek = true

// peekByte returns the first byte the client sent without taking it from
// the socket, waiting for it until the read deadline.
func peekByte(nc net.Conn) (byte, error) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return 0, errors.ErrUnsupported
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var b [1]byte
	var n int
	var rerr error
	err = raw.Read(func(fd uintptr) bool {
		n, _, rerr = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK)
		return rerr != syscall.EAGAIN
	})
	switch {
	case err != nil:
		return 0, err
	case rerr != nil:
		return 0, rerr
	case n == 0:
		return 0, io.EOF
	}
	return b[0], nil
}
