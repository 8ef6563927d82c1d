package bolt

import (
	"os"
	"path/filepath"
	"testing"

	"mqttd/persistence"
)

// Ways a log could lose an acknowledged change or replay one that is not
// its file's, each found in review and each failing on the first version
// of wal.go.

// TestWALStaleLogBesideNewFile: a log left beside a removed file is
// ignored by the Open that makes the new file, but that Open writes a
// header of generation 1, the generation the old log's records have when
// their store never started the log over (a lightly used store that was
// restarted keeps generation 1). The old records right behind the header
// then read as the new log's records 1, 2, ...: the next Open replays the
// removed store's changes into the new one.
func TestWALStaleLogBesideNewFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	s := mustOpen(t, path, Options{})
	apply(t, s, func(b *persistence.Batch) { b.PutSession(persistence.Session{ID: "old"}) })
	if err := s.Close(); err != nil { // applied; the log is not started over
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil { // an operator removes the store, not its log
		t.Fatal(err)
	}
	openTwiceEmpty(t, path)
}

// TestWALFailedStartOver: a start-over whose header write (or its
// fdatasync) fails leaves the header on disk of either generation, so the
// log takes no more records: later Applies fail, none is acknowledged and
// lost, and what was acknowledged before comes back after a crash.
func TestWALFailedStartOver(t *testing.T) {
	t.Run("header not written", func(t *testing.T) { failedStartOver(t, false) })
	// The header write went through and its fdatasync failed: the page
	// cache holds the new header, which a kill -9 keeps.
	t.Run("header written, fdatasync failed", func(t *testing.T) { failedStartOver(t, true) })
}

func failedStartOver(t *testing.T, headerWritten bool) {
	path := filepath.Join(t.TempDir(), "store.db")
	s := mustOpen(t, path, Options{})
	apply(t, s, func(b *persistence.Batch) { b.PutSession(persistence.Session{ID: "c"}) })
	// A write error on the header: the log read-only for a moment.
	rw := s.wal.f
	ro, err := os.Open(path + walSuffix)
	if err != nil {
		t.Fatal(err)
	}
	s.wal.f = ro
	if err := startOverNow(s); err == nil {
		t.Fatal("starting a read-only log over succeeded")
	}
	s.wal.f = rw
	_ = ro.Close()
	if headerWritten {
		if _, err := rw.WriteAt(walHeader(s.wal.salt, s.wal.gen+1), 0); err != nil {
			t.Fatal(err)
		}
	}
	var b persistence.Batch
	b.PutSubscription("c", persistence.Subscription{Filter: "a"})
	if err := s.Apply(&b); err == nil {
		t.Fatal("Apply after a failed start-over succeeded")
	}
	crash(t, s)
	s = mustOpen(t, path, Options{})
	defer s.Close()
	snap := load(t, s)
	if len(snap.Sessions) != 1 || len(snap.Sessions[0].Subscriptions) != 0 {
		t.Fatalf("after a failed start-over and a crash: %+v", snap.Sessions)
	}
	apply(t, s, func(b *persistence.Batch) { b.PutSubscription("c", persistence.Subscription{Filter: "a"}) })
}

// TestWALLogIgnoredUnderInterval: only a Sync Open reads the log. A
// store reopened with another durability after a crash drops what only
// the log held, though every Apply of it had returned nil under Sync.
func TestWALLogIgnoredUnderInterval(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	s := mustOpen(t, path, Options{})
	apply(t, s, func(b *persistence.Batch) { b.PutSession(persistence.Session{ID: "c"}) })
	crash(t, s)
	s = mustOpen(t, path, Options{Durability: Interval})
	defer s.Close()
	if snap := load(t, s); len(snap.Sessions) != 1 {
		t.Fatalf("reopened under interval, the store lost what the log held: %+v", snap.Sessions)
	}
}

// TestWALStaleReplayAfterInterval: records left in the log by a crash
// under Sync, not replayed by an Open under Interval, are replayed by the
// next Open under Sync on top of what changed since. Here the session the
// record refers to was deleted meanwhile, and Open fails for good (the
// error is not ErrCorrupt, so move_aside_bad_store does not help either).
func TestWALStaleReplayAfterInterval(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	s := mustOpen(t, path, Options{})
	apply(t, s, func(b *persistence.Batch) { b.PutSession(persistence.Session{ID: "c"}) })
	if err := s.checkpoint(0); err != nil { // in the file; the log goes on
		t.Fatal(err)
	}
	apply(t, s, func(b *persistence.Batch) { b.PutSubscription("c", persistence.Subscription{Filter: "a"}) })
	crash(t, s)
	s = mustOpen(t, path, Options{Durability: Interval})
	load(t, s)
	apply(t, s, func(b *persistence.Batch) { b.DeleteSession("c") })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("Open under Sync after a run under Interval: %v", err)
	}
	defer s2.Close()
	if snap := load(t, s2); len(snap.Sessions) != 0 {
		t.Fatalf("a stale record was replayed over later changes: %+v", snap.Sessions)
	}
}
