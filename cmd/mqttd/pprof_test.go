package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"mqttd"
)

// TestPProf checks the profiles under /debug/pprof/ as go tool pprof and
// go tool trace fetch them: the index lists the named profiles; each is
// the gzipped protobuf at debug=0 (go tool pprof reads the heap's and the
// CPU's) and text at debug=1 and 2; the trace is a Go execution trace;
// cmdline and symbol answer as net/http/pprof's do; an unknown profile,
// ?seconds= on a snapshot and a duration past the write timeout are
// refused.
func TestPProf(t *testing.T) {
	b := startBroker(t, mqttd.Options{}, "main")
	base := b.serve(t, httpOptions{pprof: true}) + "/debug/pprof/"

	code, body := get(t, base)
	for _, want := range []string{`href="heap?debug=1"`, `href="goroutine?debug=1"`, `href="profile"`, `href="trace?seconds=1"`} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("index: %d, no %s in:\n%s", code, want, body)
		}
	}
	for _, tc := range []struct{ path, want string }{
		{"heap?debug=1&gc=1", "heap profile:"},
		{"goroutine?debug=2", ".pprofNamed("},
		{"allocs?debug=1", "heap profile:"},
		{"threadcreate?debug=1", "threadcreate profile:"},
		{"cmdline", strings.Join(os.Args, "\x00")},
		{"symbol", "num_symbols: 1\n"},
	} {
		if code, body := get(t, base+tc.path); code != 200 || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d, want 200 with %q:\n%.500s", tc.path, code, tc.want, body)
		}
	}

	pc := reflect.ValueOf(pprofSymbol).Pointer()
	// Named mqttd/cmd/mqttd.pprofSymbol in a test binary, main.pprofSymbol in mqttd.
	want := fmt.Sprintf("%#x %s\n", pc, runtime.FuncForPC(pc).Name())
	if !strings.HasSuffix(want, ".pprofSymbol\n") {
		t.Fatalf("FuncForPC names pprofSymbol %q", want)
	}
	if code, body := get(t, fmt.Sprintf("%ssymbol?%#x+0x0+nonsense", base, pc)); code != 200 || body != "num_symbols: 1\n"+want {
		t.Errorf("GET symbol: %d %q, want %q", code, body, want)
	}
	if code, _, body := do(t, "POST", base+"symbol", fmt.Sprintf("%#x", pc)); code != 200 || !strings.HasSuffix(body, want) {
		t.Errorf("POST symbol: %d %q, want %q", code, body, want)
	}

	dir := t.TempDir()
	for _, tc := range []struct{ path, file string }{{"heap", "heap.pb.gz"}, {"profile?seconds=1", "cpu.pb.gz"}} {
		code, body := get(t, base+tc.path)
		zr, err := gzip.NewReader(strings.NewReader(body))
		if code != 200 || err != nil {
			t.Errorf("%s: %d, %v: not gzipped", tc.path, code, err)
			continue
		}
		if pb, err := io.ReadAll(zr); err != nil || len(pb) == 0 {
			t.Errorf("%s: %d bytes of protobuf, %v", tc.path, len(pb), err)
		}
		path := filepath.Join(dir, tc.file)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("go", "tool", "pprof", "-raw", path).CombinedOutput(); err != nil || !bytes.Contains(out, []byte("Samples:")) {
			t.Errorf("go tool pprof -raw %s: %v\n%.500s", tc.path, err, out)
		}
	}
	if code, body := get(t, base+"trace?seconds=0.1"); code != 200 || !strings.HasPrefix(body, "go 1.") {
		t.Errorf("trace: %d, %.20q, want an execution trace", code, body)
	}

	for _, tc := range []struct {
		path string
		code int
		says string
	}{
		{"nosuch", 404, "unknown profile nosuch"},
		{"heap?seconds=5", 400, "snapshot"},
		{"profile?seconds=120", 400, "write timeout"},
		{"trace?seconds=500", 400, "write timeout"},
	} {
		if code, body := get(t, base+tc.path); code != tc.code || !strings.Contains(body, tc.says) {
			t.Errorf("%s: %d %q, want %d saying %q", tc.path, code, body, tc.code, tc.says)
		}
	}
}
