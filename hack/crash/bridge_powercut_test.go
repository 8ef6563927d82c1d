//go:build linux && (amd64 || arm64)

package crash

import (
	"path/filepath"
	"syscall"
	"testing"

	"mqttd/hack/powercut"
)

// TestBridgePowerCut is TestBridgeSurvivesSIGKILL with the gateway's data
// directory on the power-cut filesystem: after each SIGKILL every write
// the gateway had not made durable is thrown away before it starts again,
// as TestPowerCut does. It is skipped, saying why, where FUSE cannot be
// mounted.
func TestBridgePowerCut(t *testing.T) {
	backing, mnt := t.TempDir(), t.TempDir()
	p, err := powercut.New(backing)
	if err != nil {
		t.Fatal(err)
	}
	powercut.MountOrSkip(t, p, mnt)
	var dropped powercut.CutStats
	runBridgeScenario(t, filepath.Join(mnt, "data"), func(t *testing.T, b *broker) {
		t.Helper()
		b.stop(t, syscall.SIGKILL)
		if err := p.Unmount(); err != nil {
			t.Fatal(err)
		}
		cs, err := p.Cut()
		if err != nil {
			t.Fatal(err)
		}
		dropped.Files += cs.Files
		dropped.Bytes += cs.Bytes
		if err := p.Mount(mnt); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("the power cuts threw away %d bytes of unsynced writes in %d files", dropped.Bytes, dropped.Files)
}
