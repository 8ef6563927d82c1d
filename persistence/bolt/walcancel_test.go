package bolt

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"mqttd/persistence"
)

// logRecords reads the payloads of the log's records of its current
// generation.
func logRecords(t *testing.T, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path + walSuffix)
	if err != nil {
		t.Fatal(err)
	}
	salt, gen, _ := readWALHeader(b)
	offs, _ := records(t, path)
	recs := make([][]byte, len(offs))
	for i, off := range offs {
		_, recs[i], _ = readRecord(b, off, salt, gen)
	}
	return recs
}

// twins are a store and persistence.Memory given the same batches.
type twins struct {
	t    *testing.T
	path string
	s    *Store
	mem  *persistence.Memory
}

func newTwins(t *testing.T) *twins {
	path := filepath.Join(t.TempDir(), "store.db")
	return &twins{t: t, path: path, s: mustOpen(t, path, Options{}), mem: persistence.NewMemory()}
}

// apply applies the batch fill makes to both.
func (w *twins) apply(fill func(b *persistence.Batch)) {
	w.t.Helper()
	var b persistence.Batch
	fill(&b)
	if err := w.s.Apply(&b); err != nil {
		w.t.Fatal(err)
	}
	if err := w.mem.Apply(&b); err != nil {
		w.t.Fatal(err)
	}
}

// checkpointMatches checkpoints the store, which must then Load what
// Memory holds.
func (w *twins) checkpointMatches() {
	w.t.Helper()
	if err := w.s.checkpoint(0); err != nil {
		w.t.Fatal(err)
	}
	if got, want := normalise(load(w.t, w.s)), normalise(must(w.mem.Load())); !reflect.DeepEqual(got, want) {
		w.t.Fatalf("after the checkpoint:\n Store  %+v\n Memory %+v", got, want)
	}
}

// replayMatches crashes the store and opens it again (a replay of its
// log): it must Load what Memory holds.
func (w *twins) replayMatches() {
	w.t.Helper()
	crash(w.t, w.s)
	w.s = mustOpen(w.t, w.path, Options{})
	defer w.s.Close()
	if got, want := normalise(load(w.t, w.s)), normalise(must(w.mem.Load())); !reflect.DeepEqual(got, want) {
		w.t.Fatalf("after a replay:\n Store  %+v\n Memory %+v", got, want)
	}
}

func msg(id uint64) *persistence.Message {
	return &persistence.Message{ID: id, Topic: "t", Payload: []byte{byte(id)}, QoS: 1}
}

func out(seq, id uint64) persistence.Outbound {
	return persistence.Outbound{Seq: seq, MessageID: id, QoS: 1}
}

// TestWALCancelsAckedEntries: a chunk of the log in which entries are put
// and deleted again is applied without those puts, nor their message when
// nothing else in the chunk refers to it; the file then holds what
// persistence.Memory does, after a checkpoint and after a replay.
func TestWALCancelsAckedEntries(t *testing.T) {
	w := newTwins(t)
	s, path, both := w.s, w.path, w.apply
	both(func(b *persistence.Batch) {
		b.PutSession(persistence.Session{ID: "a", Expiry: 60})
		b.PutSession(persistence.Session{ID: "b", Expiry: 60})
		b.PutMessage(msg(9))
		b.PutOutbound("a", out(9, 9)) // in the file before the chunk
	})
	if err := s.checkpoint(0); err != nil {
		t.Fatal(err)
	}
	both(func(b *persistence.Batch) { b.PutMessage(msg(1)); b.PutOutbound("a", out(1, 1)) }) // 1, 2: cancelled
	both(func(b *persistence.Batch) {
		b.PutMessage(msg(2)) // 3: kept, b keeps it
		b.PutOutbound("a", out(2, 2))
		b.PutOutbound("b", out(2, 2))
	})
	both(func(b *persistence.Batch) {
		b.DeleteOutbound("a", 1)
		b.DeleteOutbound("a", 2)
		b.DeleteOutbound("a", 9)
	})
	both(func(b *persistence.Batch) {
		b.PutMessage(msg(3)) // 9-11: kept, retained too
		b.PutOutbound("a", out(3, 3))
		b.PutRetained("r", 3)
	})
	both(func(b *persistence.Batch) { b.DeleteOutbound("a", 3) })
	both(func(b *persistence.Batch) { b.PutMessage(msg(4)); b.PutOutbound("a", out(4, 4)) }) // 13, 14: cancelled
	both(func(b *persistence.Batch) { b.PutOutbound("a", out(5, 4)) })                       // 15: kept, not deleted
	both(func(b *persistence.Batch) { b.DeleteOutbound("a", 4) })

	got := new(canceller).cancelled(logRecords(t, path)[1:], nil, nil) // the records the next checkpoint applies
	if want := []int32{1, 2}; !slices.Equal(got, want) {
		t.Errorf("cancelled ops %v, want %v (message 4 is referenced by an entry kept)", got, want)
	}
	w.checkpointMatches()
	if _, ok := load(t, s).Messages[1]; ok {
		t.Error("message 1, put and let go within the chunk, was stored")
	}
	w.replayMatches()
}

// TestScanOpsReadsAsEachOp: scanOps, which cancelled reads records with,
// finds the same operations as eachOp, the apply's decoder, in the records
// of a random run.
func TestScanOpsReadsAsEachOp(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	s := mustOpen(t, path, Options{})
	defer s.Close()
	mem := persistence.NewMemory()
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 300 {
		applyBoth(t, r, i, s, mem)
	}
	recs := logRecords(t, path)
	ops := 0
	for _, rec := range recs {
		var scanned []opScan
		scanOps(rec, func(o *opScan) { scanned = append(scanned, *o) })
		i := 0
		err := eachOp(rec, nil, func(w *walOp) error {
			if i >= len(scanned) {
				t.Fatalf("eachOp reads more operations than scanOps (%d)", len(scanned))
			}
			o, op := scanned[i], &w.op
			i++
			want := opScan{kind: op.Kind}
			switch op.Kind {
			case persistence.OpPutMessage:
				want.msg = w.id
			case persistence.OpPutRetained:
				want.msg = op.MessageID
			case persistence.OpPutOutbound:
				want.session, want.seq, want.msg = []byte(op.SessionID), op.Outbound.Seq, op.Outbound.MessageID
			case persistence.OpDeleteOutbound:
				want.session, want.seq = []byte(op.SessionID), op.Seq
			}
			if o.kind != want.kind || string(o.session) != string(want.session) || o.seq != want.seq || o.msg != want.msg {
				t.Fatalf("operation %d: scanOps read %+v, eachOp %+v", i, o, want)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if i != len(scanned) {
			t.Fatalf("scanOps read %d operations, eachOp %d", len(scanned), i)
		}
		ops += i
	}
	if ops < 300 {
		t.Fatalf("%d operations in %d records: the test did not test", ops, len(recs))
	}
}

// pendingCancelled is what the next checkpoint of s cancels: the places of
// the operations it skips in the records not yet applied, and how many of
// them are deletes.
func pendingCancelled(t *testing.T, s *Store, path string) (skip []int32, deletes int) {
	t.Helper()
	s.amu.Lock()
	first := s.wal.appliedSeq + 1
	s.amu.Unlock()
	_, seqs := records(t, path)
	var recs [][]byte
	for i, rec := range logRecords(t, path) {
		if seqs[i] >= first {
			recs = append(recs, rec)
		}
	}
	if len(recs) == 0 {
		return nil, 0
	}
	skip = slices.Clone(new(canceller).cancelled(recs, s.wal.overwrites(first, first+uint64(len(recs))-1), nil))
	n, left := int32(0), skip
	for _, rec := range recs {
		scanOps(rec, func(o *opScan) {
			n++
			if len(left) > 0 && left[0] == n {
				left = left[1:]
				if o.kind == persistence.OpDeleteOutbound {
					deletes++
				}
			}
		})
	}
	return skip, deletes
}

// TestWALCancelsDeletesOfEntriesItMade: a delete whose entry a put
// cancelled in the same chunk made (the store held none when Apply took
// the put) is cancelled too, as the file holds nothing for it to delete;
// a delete after a put over an entry the file holds, after a put kept, or
// after another delete still runs. The file then holds what
// persistence.Memory does, after the checkpoint and after a replay.
func TestWALCancelsDeletesOfEntriesItMade(t *testing.T) {
	w := newTwins(t)
	s, path, both := w.s, w.path, w.apply
	both(func(b *persistence.Batch) {
		b.PutSession(persistence.Session{ID: "a", Expiry: 60})
		b.PutMessage(msg(9))
		b.PutOutbound("a", out(9, 9)) // in the file before the chunk
	})
	if err := s.checkpoint(0); err != nil {
		t.Fatal(err)
	}
	both(func(b *persistence.Batch) { b.PutMessage(msg(1)); b.PutOutbound("a", out(1, 1)) }) // 1, 2: cancelled
	both(func(b *persistence.Batch) { b.DeleteOutbound("a", 1) })                            // 3: cancelled
	both(func(b *persistence.Batch) { b.PutMessage(msg(2)); b.PutOutbound("a", out(9, 2)) }) // 4, 5: cancelled, over 9
	both(func(b *persistence.Batch) { b.DeleteOutbound("a", 9) })                            // 6: runs
	both(func(b *persistence.Batch) {
		b.PutMessage(msg(3)) // 7, 8: cancelled
		b.PutOutbound("a", out(3, 3))
		b.DeleteOutbound("a", 3) // 9: cancelled
		b.DeleteOutbound("a", 3) // 10: runs, after a delete
	})
	both(func(b *persistence.Batch) {
		b.PutMessage(msg(4)) // 11-13: kept, 5 keeps the message
		b.PutOutbound("a", out(4, 4))
		b.PutOutbound("a", out(5, 4))
		b.DeleteOutbound("a", 4) // 14: runs, after a put kept
	})
	got, _ := pendingCancelled(t, s, path)
	if want := []int32{1, 2, 3, 4, 5, 7, 8, 9}; !slices.Equal(got, want) {
		t.Errorf("cancelled ops %v, want %v", got, want)
	}
	w.checkpointMatches()
	w.replayMatches()
}

// TestWALCancelledAgainstMemory applies random batches to a Sync store
// and to persistence.Memory and checkpoints every few of them, so that
// each chunk holds several records whose entries collide (put over,
// deleted, put again, their session deleted), and a queue's entries put
// and deleted a few messages later: after each checkpoint, and after
// crashes, the store must Load what Memory holds.
func TestWALCancelledAgainstMemory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	s := mustOpen(t, path, Options{})
	defer func() { _ = s.Close() }()
	mem := persistence.NewMemory()
	r := rand.New(rand.NewPCG(11, 12))
	deletes, crashes := 0, 0
	for i := 0; i < 1500; {
		for range 1 + r.IntN(12) {
			if r.IntN(2) == 0 {
				applyBoth(t, r, i, s, mem)
			} else {
				applyQueue(t, r, s, mem, uint64(i))
			}
			i++
		}
		if r.IntN(10) == 0 {
			crash(t, s)
			crashes++
			s = mustOpen(t, path, Options{})
		}
		_, n := pendingCancelled(t, s, path)
		deletes += n
		got, want := normalise(load(t, s)), normalise(must(mem.Load()))
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("after batch %d:\n Store  %+v\n Memory %+v", i, got, want)
		}
	}
	if deletes < 50 || crashes < 10 {
		t.Fatalf("%d deletes cancelled, %d crashes: the test did not test", deletes, crashes)
	}
	t.Logf("%d deletes cancelled, %d crashes", deletes, crashes)
}

// applyQueue applies to s and mem a batch of a queue's: messages put with
// their entries of session "q" (Seq n*4 on), entries of the last few
// batches deleted, now and then one put over.
func applyQueue(t *testing.T, r *rand.Rand, s *Store, mem *persistence.Memory, n uint64) {
	t.Helper()
	var b persistence.Batch
	b.PutSession(persistence.Session{ID: "q", Expiry: 60})
	for k := range uint64(1 + r.IntN(4)) {
		seq := n*4 + k
		b.PutMessage(&persistence.Message{ID: 1000 + seq, Topic: "q", QoS: 1})
		b.PutOutbound("q", persistence.Outbound{Seq: seq, MessageID: 1000 + seq, QoS: 1})
		back := uint64(r.IntN(24))
		switch {
		case back > seq:
		case r.IntN(8) == 0:
			b.PutOutbound("q", persistence.Outbound{Seq: seq - back, MessageID: 1000 + seq, QoS: 2})
		case r.IntN(2) == 0:
			b.DeleteOutbound("q", seq-back)
		}
	}
	if err := s.Apply(&b); err != nil {
		t.Fatal(err)
	}
	if err := mem.Apply(&b); err != nil {
		t.Fatal(err)
	}
}
