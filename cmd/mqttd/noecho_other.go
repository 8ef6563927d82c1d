//go:build !linux

package main

import (
	"errors"
	"os"
)

// noEcho is implemented for Linux only: elsewhere, give the password
// with -b rather than have it echoed.
func noEcho(*os.File) (func(), error) {
	return nil, errors.New("prompting without echo needs Linux; give the password with -b")
}
