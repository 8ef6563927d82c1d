package bolt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.etcd.io/bbolt"

	"mqttd/persistence"
)

// crash leaves s as a kill -9 would: what Apply logged is in the log, the
// file holds what the applier had applied, and nothing more is written.
func crash(t *testing.T, s *Store) {
	t.Helper()
	s.closeOnce.Do(func() {
		close(s.walStop)
		<-s.walStopped
		if err := s.wal.f.Close(); err != nil {
			t.Fatal(err)
		}
		// bbolt writes nothing at Close: its commits are already synced.
		if err := s.db.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// startOverNow applies the log and starts it over, as a checkpoint does
// once the log is half full or has no room for a record.
func startOverNow(s *Store) error {
	s.wmu.Lock()
	room := s.wal.size - s.wal.off
	s.wmu.Unlock()
	return s.checkpoint(int(room) + 1)
}

// records lists the offsets and sequence numbers of the log's records of
// its current generation.
func records(t *testing.T, path string) (offs []int64, seqs []uint64) {
	t.Helper()
	b, err := os.ReadFile(path + walSuffix)
	if err != nil {
		t.Fatal(err)
	}
	salt, gen, ok := readWALHeader(b)
	if !ok {
		t.Fatal("bad log header")
	}
	for off := int64(walHeaderSize); ; {
		seq, _, next := readRecord(b, off, salt, gen)
		if next == 0 {
			return offs, seqs
		}
		offs, seqs = append(offs, off), append(seqs, seq)
		off = next
	}
}

// TestWALReplay applies random batches to a Sync store and to
// persistence.Memory, crashing the store now and then with part of what
// it took only in the log and part applied to the file: reopened, it must
// Load what Memory holds, and refuse what Memory refuses throughout (the
// shadow's checks against the applier's).
func TestWALReplay(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	s := mustOpen(t, path, Options{})
	defer func() { _ = s.Close() }()
	mem := persistence.NewMemory()
	r := rand.New(rand.NewPCG(3, 4))
	crashes, logged := 0, 0
	for i := range 600 {
		applyBoth(t, r, i, s, mem)
		switch r.IntN(40) {
		case 0:
			if err := s.checkpoint(0); err != nil {
				t.Fatal(err)
			}
		case 2:
			if err := startOverNow(s); err != nil {
				t.Fatal(err)
			}
		case 1:
			_, seqs := records(t, path)
			logged += len(seqs)
			crash(t, s)
			crashes++
			s = mustOpen(t, path, Options{})
		}
	}
	_, seqs := records(t, path)
	logged += len(seqs)
	crash(t, s)
	s = mustOpen(t, path, Options{})
	got, want := normalise(load(t, s)), normalise(must(mem.Load()))
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("after replay:\n Store  %+v\n Memory %+v", got, want)
	}
	if crashes < 5 || logged < 50 {
		t.Fatalf("%d crashes with %d records replayed: the test did not test", crashes, logged)
	}
	t.Logf("%d crashes, %d records replayed", crashes+1, logged)
}

// TestWALTornRecord: a record cut short by a crash (its Apply had not
// returned) is dropped with nothing after it; the records before it are
// replayed.
func TestWALTornRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	s := mustOpen(t, path, Options{})
	apply(t, s, func(b *persistence.Batch) { b.PutSession(persistence.Session{ID: "c"}) })
	apply(t, s, func(b *persistence.Batch) { b.PutSubscription("c", persistence.Subscription{Filter: "a"}) })
	apply(t, s, func(b *persistence.Batch) { b.PutSubscription("c", persistence.Subscription{Filter: "b"}) })
	offs, _ := records(t, path)
	crash(t, s)
	if len(offs) != 3 {
		t.Fatalf("%d records in the log, want 3", len(offs))
	}
	f, err := os.OpenFile(path+walSuffix, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff}, offs[2]+walRecordHeader+2); err != nil {
		t.Fatal(err)
	}
	f.Close()
	s = mustOpen(t, path, Options{})
	defer s.Close()
	snap := load(t, s)
	if len(snap.Sessions) != 1 || len(snap.Sessions[0].Subscriptions) != 1 || snap.Sessions[0].Subscriptions[0].Filter != "a" {
		t.Fatalf("after a torn last record: %+v", snap.Sessions)
	}
}

// TestWALGap: a log whose records start after the file's last is missing
// acknowledged changes; Open says so, naming the log, rather than start
// from a state that never was.
func TestWALGap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	s := mustOpen(t, path, Options{})
	apply(t, s, func(b *persistence.Batch) { b.PutSession(persistence.Session{ID: "c"}) })
	if err := startOverNow(s); err != nil {
		t.Fatal(err)
	}
	apply(t, s, func(b *persistence.Batch) { b.PutSubscription("c", persistence.Subscription{Filter: "a"}) })
	apply(t, s, func(b *persistence.Batch) { b.PutSubscription("c", persistence.Subscription{Filter: "b"}) })
	_, seqs := records(t, path)
	crash(t, s)
	if len(seqs) != 2 || seqs[0] != 2 {
		t.Fatalf("records %v, want 2 and 3", seqs)
	}
	setMeta(t, path, func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keyWALSeq, binary.AppendUvarint(nil, 0))
	})
	_, err := Open(path, Options{})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path+walSuffix) {
		t.Fatalf("Open: %v, want ErrCorrupt naming the log", err)
	}
}

// TestWALBesideNewFile: a log left beside a file that was removed belongs
// to that file, not to the new one.
func TestWALBesideNewFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	s := mustOpen(t, path, Options{})
	apply(t, s, func(b *persistence.Batch) { b.PutSession(persistence.Session{ID: "c"}) })
	crash(t, s)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	openTwiceEmpty(t, path)
}

// openTwiceEmpty opens the store at path, closes it and opens it again,
// and wants it empty both times: a log left beside a removed file must
// not come back through the new one.
func openTwiceEmpty(t *testing.T, path string) {
	t.Helper()
	for i := range 2 {
		s := mustOpen(t, path, Options{})
		snap := load(t, s)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if len(snap.Sessions) != 0 {
			t.Fatalf("Open %d of the new file took the old log: %+v", i+1, snap.Sessions)
		}
	}
}

// TestWALGrows: a batch larger than the log grows it, and comes back
// after a crash.
func TestWALGrows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	s := mustOpen(t, path, Options{})
	payload := bytes.Repeat([]byte{7}, 3*walInitialSize)
	apply(t, s, func(b *persistence.Batch) {
		b.PutSession(persistence.Session{ID: "c"})
		b.PutMessage(&persistence.Message{ID: 1, Topic: "big", Payload: payload, QoS: 1})
		b.PutOutbound("c", persistence.Outbound{Seq: 1, MessageID: 1, QoS: 1})
	})
	crash(t, s)
	if st, err := os.Stat(path + walSuffix); err != nil || st.Size() < int64(len(payload)) {
		t.Fatalf("log: %v, %v", st, err)
	}
	s = mustOpen(t, path, Options{})
	defer s.Close()
	snap := load(t, s)
	if m := snap.Messages[1]; m == nil || !bytes.Equal(m.Payload, payload) {
		t.Fatal("the large message did not come back")
	}
}

// TestWALMovedAside: MoveAside takes the log along, so that the empty
// store that follows does not replay it.
func TestWALMovedAside(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	s := mustOpen(t, path, Options{})
	apply(t, s, func(b *persistence.Batch) { b.PutSession(persistence.Session{ID: "c"}) })
	crash(t, s)
	moved, err := MoveAside(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + walSuffix + strings.TrimPrefix(moved, path)); err != nil {
		t.Errorf("log not moved along: %v", err)
	}
	s = mustOpen(t, path, Options{})
	defer s.Close()
	if snap := load(t, s); len(snap.Sessions) != 0 {
		t.Fatalf("the new store replayed the old log: %+v", snap.Sessions)
	}
}

// TestWALAppliedInChunks: the applier and a replay apply the log in
// transactions of at most walApplyChunk of records (a longer record on
// its own), so that a transaction, which holds what it changes in memory
// until it commits, is bounded whatever the log holds; what they apply is
// all there after a crash.
func TestWALAppliedInChunks(t *testing.T) {
	defer func(n int64) { walApplyChunk = n }(walApplyChunk)
	walApplyChunk = 32 << 10
	path := filepath.Join(t.TempDir(), "store.db")
	s := mustOpen(t, path, Options{})
	const records = 100
	put := func(s *Store, from int) {
		for i := range records {
			id := uint64(from + i + 1)
			size := 5000
			if i == records/2 {
				size = 3 * int(walApplyChunk) // one longer than a chunk
			}
			apply(t, s, func(b *persistence.Batch) {
				if id == 1 {
					b.PutSession(persistence.Session{ID: "c"})
				}
				b.PutMessage(&persistence.Message{ID: id, Topic: "t", Payload: bytes.Repeat([]byte{1}, size), QoS: 1})
				b.PutOutbound("c", persistence.Outbound{Seq: id, MessageID: id, QoS: 1})
			})
		}
	}
	txID := func(s *Store) (id int) {
		if err := s.db.View(func(tx *bbolt.Tx) error { id = tx.ID(); return nil }); err != nil {
			t.Fatal(err)
		}
		return id
	}
	// chunks is how many transactions what the log holds unapplied
	// needs at the least.
	chunks := func(s *Store) int {
		s.wmu.Lock()
		pending := s.wal.off - s.wal.applied.Load()
		s.wmu.Unlock()
		return int(pending / (walApplyChunk + 4<<10))
	}
	check := func(s *Store, n int) {
		t.Helper()
		snap := load(t, s)
		if len(snap.Messages) != n || len(snap.Sessions) != 1 {
			t.Fatalf("%d messages and %d sessions after the log was applied, want %d and 1", len(snap.Messages), len(snap.Sessions), n)
		}
	}

	put(s, 0)
	before, want := txID(s), chunks(s)
	if err := s.checkpoint(0); err != nil {
		t.Fatal(err)
	}
	if got := txID(s) - before; got < want || want < 3 {
		t.Errorf("the applier committed %d transactions, want at least %d: one per chunk of at most %d bytes", got, want, walApplyChunk)
	}
	crash(t, s)
	s = mustOpen(t, path, Options{})
	check(s, records)

	put(s, records) // some only in the log at the crash
	want = chunks(s)
	crash(t, s)
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	var before2 int
	if err := db.View(func(tx *bbolt.Tx) error { before2 = tx.ID(); return nil }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s = mustOpen(t, path, Options{})
	defer s.Close()
	if got := txID(s) - before2; got < want || want < 3 {
		t.Errorf("the replay committed %d transactions, want at least %d: one per chunk", got, want)
	}
	check(s, 2*records)
}
