//go:build !unix

package listeners

import (
	"errors"
	"net"
)

// canPeek says whether peekByte works: Listen refuses the PROXY protocol
// where it does not.
const canPeek = false

// peekByte needs MSG_PEEK, which this build does not use.
func peekByte(net.Conn) (byte, error) {
	return 0, errors.ErrUnsupported
}
