package main

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
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
	for _, args := range [][]string{{"-window", "0"}, {"-qos", "3"}, {"-nosuchflag"}, {"-scenario", "device", "-poll"}} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 2 {
			t.Errorf("run(%q) exited %d, want 2", args, code)
		}
	}
}

// TestProcessCPUCountsLessThanATick: a throughput run is over in a
// fraction of a second, so the broker's CPU is read to well under the
// 10 ms clock tick. The process works until its reading moves, and a move
// must be far smaller than a tick. The reading counts every thread of the
// test's process, so a move is taken only when it is small or the
// process's other threads (the collector, a test before this one winding
// down) could not account for it: a few tries pass as long as one move is
// fine-grained, where a reading by the tick only ever moves by ticks.
func TestProcessCPUCountsLessThanATick(t *testing.T) {
	if _, err := threadsCPU(os.Getpid()); err != nil {
		t.Skipf("this kernel keeps no per-thread run times: %v", err)
	}
	before, err := processCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	sum, moves := 0, []time.Duration{}
	for time.Now().Before(deadline) && len(moves) < 5 {
		for i := range 10000 {
			sum += i * i
		}
		after, err := processCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if d := after - before; d > 0 {
			if d < 5*time.Millisecond {
				return
			}
			moves = append(moves, d)
		}
		before = after
	}
	t.Fatalf("the reading moved only by %v (work %d): not finer than a tick", moves, sum)
}
