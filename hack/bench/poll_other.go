//go:build !linux

package main

import (
	"errors"
	"net"
)

// polling is poll_linux.go's; elsewhere clients only sleep in their reads.
func polling(net.Conn) (net.Conn, error) { return nil, errors.New("-poll: Linux only") }
