//go:build linux && (amd64 || arm64)

package crash

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"mqttd/hack/powercut"
)

// TestPowerCut is TestCrashSIGKILL with the broker's data directory on the
// power-cut filesystem: after each SIGKILL every write the broker had not
// made durable with fsync or fdatasync is thrown away, as losing power
// would, before the broker starts again. A kill alone keeps the page
// cache and so cannot catch a missing fsync; this can. CRASH_CYCLES sets
// the number of cuts (default 3). It is skipped, saying why, where FUSE
// cannot be mounted.
func TestPowerCut(t *testing.T) {
	mnt, cut := powerCutDir(t)
	runScenario(t, scenario{
		cycles:   envInt(t, "CRASH_CYCLES", 3),
		perCycle: 300,
		maxDelay: 150 * time.Millisecond,
		dataDir:  filepath.Join(mnt, "data"),
		crash: func(t *testing.T, b *broker) {
			t.Helper()
			b.stop(t, syscall.SIGKILL)
			cut()
		},
	})
}

// powerCutDir mounts the power-cut filesystem for the test, skipping it
// where FUSE cannot be mounted, and returns the mount and cut, which
// throws away every write not synced since the last cut (the processes
// that used the files must be gone); what the cuts threw away is logged
// at the end.
func powerCutDir(t *testing.T) (mnt string, cut func()) {
	t.Helper()
	backing, mnt := t.TempDir(), t.TempDir()
	p, err := powercut.New(backing)
	if err != nil {
		t.Fatal(err)
	}
	powercut.MountOrSkip(t, p, mnt)
	var dropped powercut.CutStats
	t.Cleanup(func() {
		t.Logf("the power cuts threw away %d bytes of unsynced writes in %d files", dropped.Bytes, dropped.Files)
	})
	return mnt, func() {
		t.Helper()
		cs, err := p.CutAt(mnt)
		if err != nil {
			t.Fatal(err)
		}
		dropped.Files += cs.Files
		dropped.Bytes += cs.Bytes
	}
}
