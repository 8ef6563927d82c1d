package bolt

import (
	"bytes"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"mqttd/persistence"
)

// TestWALAppliesInChunks: a log of 12 records of 1 MiB and one of 5 MiB
// is applied in transactions of at most walApplyChunk (or the one longer
// record), the chunks cut between records, and the applier keeps no read
// buffer larger than walInitialSize: it read the whole log at once and
// kept up to 16 MiB of it, which stayed in the heap of an idle broker.
// Reopened, the store has every message.
func TestWALAppliesInChunks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	s := mustOpen(t, path, Options{})
	big := bytes.Repeat([]byte{7}, 1<<20)
	huge := bytes.Repeat([]byte{9}, int(walApplyChunk)+walInitialSize)
	const n = 12
	for i := range n + 1 {
		payload := big
		if i == n {
			payload = huge
		}
		topic := fmt.Sprintf("big/%02d", i)
		apply(t, s, func(b *persistence.Batch) {
			b.PutMessage(&persistence.Message{ID: uint64(i + 1), Topic: topic, Payload: payload, QoS: 1, Retain: true})
			b.PutRetained(topic, uint64(i+1))
		})
	}
	if err := s.checkpoint(0); err != nil {
		t.Fatal(err)
	}
	s.amu.Lock()
	kept, seq, applied := cap(s.wal.rbuf), s.wal.appliedSeq, s.wal.applied.Load()
	s.amu.Unlock()
	s.wmu.Lock()
	last, end := s.wal.seq, s.wal.off
	s.wmu.Unlock()
	if seq != last || applied != end {
		t.Errorf("applied up to record %d at %d, want %d at %d", seq, applied, last, end)
	}
	if kept > walInitialSize {
		t.Errorf("the applier kept a read buffer of %d bytes, over %d", kept, walInitialSize)
	}
	crash(t, s)
	s = mustOpen(t, path, Options{})
	defer s.Close()
	snap := load(t, s)
	for i := range n + 1 {
		want := big
		if i == n {
			want = huge
		}
		topic := fmt.Sprintf("big/%02d", i)
		if m := snap.Messages[snap.Retained[topic]]; m == nil || !bytes.Equal(m.Payload, want) {
			t.Fatalf("retained message %s did not come back", topic)
		}
	}
}

// TestCheckpointYieldPolls: a checkpoint long enough to yield calls the
// function SetYield gave it each time (the broker polls its sockets
// there), and none once SetYield(nil) took it back.
func TestCheckpointYieldPolls(t *testing.T) {
	s := mustOpen(t, filepath.Join(t.TempDir(), "store.db"), Options{})
	defer s.Close()
	var polls atomic.Int32
	payload := make([]byte, 64)
	fill := func(from int) { // 4,000 messages, 100 a record: about 500 KB of the log
		for r := from; r < from+4000; r += 100 {
			apply(t, s, func(b *persistence.Batch) {
				for i := r; i < r+100; i++ {
					topic := fmt.Sprintf("t/%d", i)
					b.PutMessage(&persistence.Message{ID: uint64(i + 1), Topic: topic, Payload: payload})
					b.PutRetained(topic, uint64(i+1))
				}
			})
		}
	}
	s.SetYield(func() { polls.Add(1) })
	fill(0)
	start := time.Now()
	if err := s.checkpoint(0); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); polls.Load() == 0 && took > 2*walYieldEvery {
		t.Fatalf("a checkpoint of %v never called the yield's poll", took)
	}
	s.SetYield(nil)
	before := polls.Load()
	fill(4000)
	if err := s.checkpoint(0); err != nil {
		t.Fatal(err)
	}
	if n := polls.Load() - before; n != 0 {
		t.Errorf("the poll was called %d times after SetYield(nil)", n)
	}
}
