package sysmem

import (
	"os"
	"path/filepath"
	"testing"
)

func write(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMemTotal(t *testing.T) {
	for _, tc := range []struct {
		content string
		want    int64
	}{
		{"MemFree:  100 kB\nMemTotal:       2048 kB\n", 2 << 20},
		{"MemTotal: lots\n", 0},
		{"MemFree: 100 kB\n", 0},
	} {
		if got := memTotal(write(t, tc.content)); got != tc.want {
			t.Errorf("memTotal(%q) = %d, want %d", tc.content, got, tc.want)
		}
	}
	if got := memTotal(filepath.Join(t.TempDir(), "missing")); got != 0 {
		t.Errorf("memTotal of a missing file = %d, want 0", got)
	}
}

func TestCgroupLimit(t *testing.T) {
	for _, tc := range []struct {
		content string
		want    int64
	}{
		{"268435456\n", 256 << 20},
		{"max\n", 0},                 // v2: no limit
		{"9223372036854771712\n", 0}, // v1: no limit
	} {
		if got := cgroupLimit(write(t, tc.content)); got != tc.want {
			t.Errorf("cgroupLimit(%q) = %d, want %d", tc.content, got, tc.want)
		}
	}
}

// TestAvailable: on Linux the machine's memory is readable, and no limit
// is above it.
func TestAvailable(t *testing.T) {
	total := memTotal("/proc/meminfo")
	if total == 0 {
		t.Skip("no /proc/meminfo here")
	}
	if got := Available(); got <= 0 || got > total {
		t.Errorf("Available() = %d, want between 1 and MemTotal %d", got, total)
	}
}
