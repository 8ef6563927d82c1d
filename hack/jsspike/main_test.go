package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
)

// TestSpikeCounts runs every phase in a tiny configuration and checks
// what each counted, not how fast: every write acknowledged is in its
// stream (measureQuorum compares), every load returns exactly its
// session's entries (measureLoads compares), every delete way leaves the
// stream with what it should hold (measureAcks waits for it), the put+ack
// cycles leave their stream empty, and every consumer made acknowledges
// its message.
func TestSpikeCounts(t *testing.T) {
	cfg := config{
		sessions: 50, queued: 4, size: 150, writes: 100, batches: []int{10}, fillBatch: 10,
		loads: 5, acks: 20, cycles: 100, consumers: 10, consumerReplicas: []int{3, 1},
		idle: 100 * time.Millisecond, timeout: 30 * time.Second,
		phaseTime: time.Minute, cycleTime: time.Minute, consumerTime: time.Minute,
		phases: map[int]bool{1: true, 2: true, 3: true, 4: true},
	}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	var res *results
	err := measure(cfg, io.Discard, func(r *results, _ error) { res = r })
	if err != nil || res == nil {
		t.Fatal(err)
	}
	commits := []int{100, 100, 100, 10}
	if len(res.Quorum) != len(commits) {
		t.Fatalf("%d quorum rows, want %d", len(res.Quorum), len(commits))
	}
	for i, r := range res.Quorum {
		if r.Msgs != cfg.writes || r.Commits != commits[i] {
			t.Errorf("%s: %d messages in %d commits, want %d in %d", r.Phase, r.Msgs, r.Commits, cfg.writes, commits[i])
		}
	}
	checkLayoutA(t, cfg, res)
	checkLayoutB(t, cfg, res)
	var out bytes.Buffer
	report(&out, cfg, res)
	t.Log("\n" + out.String())
	if !strings.Contains(out.String(), "1 atomic batch of 10") {
		t.Errorf("report lacks the batch row:\n%s", out.String())
	}
}

func checkLayoutA(t *testing.T, cfg config, res *results) {
	t.Helper()
	perSession := cfg.queued + 2
	if want := cfg.sessions * perSession; res.Fill.Msgs != want || res.Fill.Commits != want/cfg.fillBatch {
		t.Errorf("fill: %d messages in %d commits, want %d in %d", res.Fill.Msgs, res.Fill.Commits, want, want/cfg.fillBatch)
	}
	if len(res.Loads) != len(loadWays) {
		t.Fatalf("%d load rows, want %d", len(res.Loads), len(loadWays))
	}
	for _, r := range res.Loads {
		if r.Msgs != cfg.loads*perSession || r.Commits != cfg.loads {
			t.Errorf("%s: %d messages in %d loads, want %d in %d", r.Phase, r.Msgs, r.Commits, cfg.loads*perSession, cfg.loads)
		}
	}
	if len(res.Acks) != 5 {
		t.Fatalf("%d ack rows, want 5", len(res.Acks))
	}
	for _, r := range res.Acks[:4] {
		if r.Msgs != cfg.acks {
			t.Errorf("%s: %d acknowledged, want %d", r.Phase, r.Msgs, cfg.acks)
		}
	}
	if len(res.Cycles) != 2 {
		t.Fatalf("%d cycle rows, want 2", len(res.Cycles))
	}
	for _, r := range res.Cycles {
		if r.Msgs != cfg.cycles || !strings.Contains(r.Note, "last batch: 0 msgs, 0 B") {
			t.Errorf("%s: %d cycles (want %d), %s", r.Phase, r.Msgs, cfg.cycles, r.Note)
		}
	}
}

func checkLayoutB(t *testing.T, cfg config, res *results) {
	t.Helper()
	if len(res.Consumers) != 2 {
		t.Fatalf("%d consumer results, want 2", len(res.Consumers))
	}
	for _, c := range res.Consumers {
		if c.Created != cfg.consumers || c.Acks.Msgs != cfg.consumers {
			t.Errorf("R%d: %d consumers made, %d acknowledged through them, want %d", c.Replicas, c.Created, c.Acks.Msgs, cfg.consumers)
		}
	}
	checks := strings.Join(res.Checks, "\n")
	for _, want := range []string{"last=v2, messages on it=1", "too large", "entry in a batch: err=<nil>, messages on it=1", "2 messages on 2 subjects"} {
		if !strings.Contains(checks, want) {
			t.Errorf("batch checks lack %q:\n%s", want, checks)
		}
	}
}

// TestFlagsRefused checks that a value outside the servers' bounds is
// refused before any server starts.
func TestFlagsRefused(t *testing.T) {
	for _, args := range [][]string{{"-batches", "1001"}, {"-fill-batch", "1"}, {"-consumer-replicas", "2"}, {"-queued", "0"}, {"-idle", "0s"}, {"-phases", "5"}} {
		if err := run(args, &bytes.Buffer{}); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}
