//go:build !linux

package bolt

import "os"

// fdatasync is fsync where the system has no fdatasync call in syscall.
func fdatasync(f *os.File) error { return f.Sync() }
