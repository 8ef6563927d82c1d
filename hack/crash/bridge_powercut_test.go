//go:build linux && (amd64 || arm64)

package crash

import (
	"path/filepath"
	"syscall"
	"testing"
)

// TestBridgePowerCut is TestBridgeSurvivesSIGKILL with the gateway's data
// directory on the power-cut filesystem: after each SIGKILL every write
// the gateway had not made durable is thrown away before it starts again,
// as TestPowerCut does. It is skipped, saying why, where FUSE cannot be
// mounted.
func TestBridgePowerCut(t *testing.T) {
	mnt, cut := powerCutDir(t)
	runBridgeScenario(t, filepath.Join(mnt, "data"), func(t *testing.T, b *broker) {
		t.Helper()
		b.stop(t, syscall.SIGKILL)
		cut()
	})
}
