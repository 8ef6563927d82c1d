package main

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
)

func TestRunFailsWhenNoBroker(t *testing.T) {
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run([]string{"-scenario", "qos1", "-addr", "127.0.0.1:" + strconv.Itoa(port), "-timeout", "2s"}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "refused") {
		t.Fatalf("exit %d, stderr %q; want 1 and connection refused", code, stderr.String())
	}
	if stdout.Len() != 0 {
		t.Errorf("printed a result without a broker: %q", stdout.String())
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-window", "0"}, {"-qos", "3"}, {"-nosuchflag"}} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 2 {
			t.Errorf("run(%q) exited %d, want 2", args, code)
		}
	}
}
