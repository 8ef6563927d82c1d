//go:build !linux

package main

import (
	"errors"
	"net"
)

// canPoll says whether -poll is available: poll_linux.go's polling is
// Linux only.
const canPoll = false

func polling(net.Conn) (net.Conn, error) { return nil, errors.New("-poll: Linux only") }
