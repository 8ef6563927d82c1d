//go:build !unix

package listeners

import (
	"errors"
	"net"
)

// peekByte needs MSG_PEEK, which this build does not use: a listener
// with trusted PROXY networks refuses its connections with the error.
func peekByte(net.Conn) (byte, error) {
	return 0, errors.ErrUnsupported
}
