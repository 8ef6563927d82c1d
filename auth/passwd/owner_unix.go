//go:build unix

package passwd

import (
	"io/fs"
	"os"
	"syscall"
)

// keepOwner gives f the owner and group of the file it replaces, so a
// file edited by root stays readable by the broker's user. Failing that
// (not root) the new file keeps its creator's, like any file written.
func keepOwner(f *os.File, old fs.FileInfo) {
	if st, ok := old.Sys().(*syscall.Stat_t); ok {
		f.Chown(int(st.Uid), int(st.Gid))
	}
}
