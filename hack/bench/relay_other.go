//go:build !linux

package main

import (
	"errors"
	"net"
)

// relay is relay_linux.go's; elsewhere there is none.
type relay struct{ addr net.Addr }

func newRelay(string) (*relay, error) { return nil, errors.New("relay: Linux only") }

func (*relay) serve() error { return nil }

func (*relay) shutdown() {}
