//go:build linux && race

package netpoll

import (
	"runtime"
	"unsafe"
)

// The race detector does not see what the kernel reads and writes in a
// RawSyscall, as syscall.Read and syscall.Write tell it: these do.

func raceWrittenByKernel(b []byte) {
	if len(b) > 0 {
		runtime.RaceWriteRange(unsafe.Pointer(unsafe.SliceData(b)), len(b))
	}
}

func raceReadByKernel(b []byte) {
	if len(b) > 0 {
		runtime.RaceReadRange(unsafe.Pointer(unsafe.SliceData(b)), len(b))
	}
}
