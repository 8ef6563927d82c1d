package main

import (
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestPackageOf(t *testing.T) {
	for sym, want := range map[string]string{
		"net/http.(*Server).Serve": "net/http",
		"main.run":                 "main",
		"slices.pdqsortCmpFunc[go.shape.struct { a.b int }]": "slices",
		"type:*mqttd/packets.Properties":                     "mqttd/packets",
		"type:[]map[string]int":                              "type: (unnamed)",
		"type:.eq.mqttd/session.Message":                     "mqttd/session",
		"github.com/nats-io/nats%2ego.(*Conn).Publish":       "github.com/nats-io/nats.go",
		"github.com/nats-io/nats.go/jetstream.New":           "github.com/nats-io/nats.go/jetstream",
		"go:itab.*net/http.response,io.Writer":               "go:itab",
		"go:func.*":                                          "go:func",
		"runtime.mallocgc":                                   "runtime",
	} {
		if got := packageOf(sym); got != want {
			t.Errorf("packageOf(%q) = %q, want %q", sym, got, want)
		}
	}
}

// TestRun reads a binary built with its symbols (binsize itself; go test
// strips the test binary) and one without, which it refuses.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	exe, stripped := filepath.Join(dir, "binsize"), filepath.Join(dir, "stripped")
	for _, args := range [][]string{{"-o", exe}, {"-ldflags", "-s -w", "-o", stripped}} {
		if out, err := exec.Command("go", append(append([]string{"build"}, args...), ".")...).CombinedOutput(); err != nil {
			t.Fatalf("go build %v: %v\n%s", args, err, out)
		}
	}
	if err := run(io.Discard, stripped, 5); err == nil || !strings.Contains(err.Error(), "-s") {
		t.Errorf("a stripped binary: %v, want an error saying it has no symbols", err)
	}
	var out strings.Builder
	if err := run(&out, exe, 5); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{".text ", ".gopclntab ", "  runtime\n", "all "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in:\n%s", want, out.String())
		}
	}
	if lines := strings.Count(out.String(), "\n"); lines > 30 {
		t.Errorf("%d lines for 5 packages:\n%s", lines, out.String())
	}
}
