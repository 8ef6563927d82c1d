package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// noEcho turns off echo on f if it is a terminal, and returns what turns
// it back on. A file that is not a terminal (a pipe, say) is left alone.
func noEcho(f *os.File) (restore func(), err error) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return func() {}, nil
	}
	t := *old
	t.Lflag &^= unix.ECHO
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &t); err != nil {
		return nil, err
	}
	return func() { unix.IoctlSetTermios(fd, unix.TCSETS, old) }, nil
}
