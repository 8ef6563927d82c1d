//go:build linux && (amd64 || arm64)

package powercut

import "testing"

// MountOrSkip mounts p on dir for the rest of the test and unmounts it at
// the end. A machine where FUSE cannot be mounted (no /dev/fuse, not root
// and no CAP_SYS_ADMIN, a container without the device) skips the test and
// says why, rather than failing it: the power-cut tests need the kernel's
// help.
func MountOrSkip(t testing.TB, p *FS, dir string) {
	t.Helper()
	if err := p.Mount(dir); err != nil {
		t.Skipf("cannot mount the power-cut FUSE filesystem on this machine: %v (mount(2) is called directly, no fusermount: it needs /dev/fuse and root or CAP_SYS_ADMIN)", err)
	}
	t.Cleanup(func() {
		if err := p.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
}
