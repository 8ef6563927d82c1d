package crash

import (
	"syscall"
	"testing"
	"time"
)

// TestCrashSIGKILL kills the broker with SIGKILL at random moments while
// QoS 1 and QoS 2 publishers run, restarts it on the same data directory
// each time, and checks that every acknowledged message reaches both
// persistent subscribers (one online, one offline until the end): at least
// once at QoS 1, exactly once at QoS 2, and that nothing is invented.
// CRASH_CYCLES sets the number of kills (default 3).
func TestCrashSIGKILL(t *testing.T) {
	runScenario(t, scenario{
		cycles:   envInt(t, "CRASH_CYCLES", 3),
		perCycle: 300,
		maxDelay: 150 * time.Millisecond,
		dataDir:  t.TempDir(),
		crash: func(t *testing.T, b *broker) {
			t.Helper()
			b.stop(t, syscall.SIGKILL)
		},
	})
}

// TestCrashSIGTERM stops the broker with SIGTERM while the publishers run:
// a graceful stop must leave every acknowledged message on disk, and the
// broker must exit 0.
func TestCrashSIGTERM(t *testing.T) {
	runScenario(t, scenario{
		cycles:   min(envInt(t, "CRASH_CYCLES", 2), 20),
		perCycle: 300,
		maxDelay: 150 * time.Millisecond,
		dataDir:  t.TempDir(),
		crash: func(t *testing.T, b *broker) {
			t.Helper()
			b.stop(t, syscall.SIGTERM)
		},
	})
}

// TestHarnessWithoutCrash is the control: the same clients and checks with
// a broker that is never stopped must find nothing lost, nothing
// duplicated and nothing invented. It shows that what the crash tests
// report comes from the crashes, not from the harness.
func TestHarnessWithoutCrash(t *testing.T) {
	runScenario(t, scenario{
		cycles:   3,
		perCycle: 300,
		maxDelay: 150 * time.Millisecond,
		dataDir:  t.TempDir(),
	})
}
