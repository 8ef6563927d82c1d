package bolt

import (
	"os"
	"syscall"
)

// fdatasync flushes f's data, and its metadata only where reading the
// data back needs it: the log's records overwrite blocks it already has.
func fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}
