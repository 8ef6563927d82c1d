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

// TestWALCancelsAckedEntries: a chunk of the log in which entries are put
// and deleted again is applied without those puts, nor their message when
// nothing else in the chunk refers to it; the file then holds what
// persistence.Memory does, after a checkpoint and after a replay.
func TestWALCancelsAckedEntries(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	s := mustOpen(t, path, Options{})
	mem := persistence.NewMemory()
	both := func(fill func(b *persistence.Batch)) {
		t.Helper()
		var b persistence.Batch
		fill(&b)
		if err := s.Apply(&b); err != nil {
			t.Fatal(err)
		}
		if err := mem.Apply(&b); err != nil {
			t.Fatal(err)
		}
	}
	msg := func(id uint64) *persistence.Message {
		return &persistence.Message{ID: id, Topic: "t", Payload: []byte{byte(id)}, QoS: 1}
	}
	out := func(seq, id uint64) persistence.Outbound {
		return persistence.Outbound{Seq: seq, MessageID: id, QoS: 1}
	}
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

	got := new(canceller).cancelled(logRecords(t, path)[1:]) // the records the next checkpoint applies
	if want := []int32{1, 2}; !slices.Equal(got, want) {
		t.Errorf("cancelled ops %v, want %v (message 4 is referenced by an entry kept)", got, want)
	}
	if err := s.checkpoint(0); err != nil {
		t.Fatal(err)
	}
	want := normalise(must(mem.Load()))
	if got := normalise(load(t, s)); !reflect.DeepEqual(got, want) {
		t.Fatalf("after the checkpoint:\n Store  %+v\n Memory %+v", got, want)
	}
	if _, ok := load(t, s).Messages[1]; ok {
		t.Error("message 1, put and let go within the chunk, was stored")
	}
	crash(t, s)
	s = mustOpen(t, path, Options{})
	defer s.Close()
	if got := normalise(load(t, s)); !reflect.DeepEqual(got, want) {
		t.Fatalf("after a replay:\n Store  %+v\n Memory %+v", got, want)
	}
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
