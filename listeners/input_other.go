//go:build !linux

package listeners

import "net"

// inputProbe is Linux's (input_linux.go): elsewhere a TLS or WebSocket
// connection cannot tell whether input waits, and says none does.
type inputProbe struct{}

func newInputProbe(net.Conn) *inputProbe { return nil }

func (*inputProbe) waiting() bool { return false }
