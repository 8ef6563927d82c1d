package bolt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.etcd.io/bbolt"

	"mqttd/packets"
	"mqttd/persistence"
	"mqttd/persistence/storetest"
)

// opener runs the contract suite on files in the test's temporary
// directory.
type opener struct{ opts Options }

func (o opener) Open(t *testing.T) persistence.Store {
	t.Helper()
	return mustOpen(t, filepath.Join(t.TempDir(), "store.db"), o.opts)
}

func (o opener) Reopen(t *testing.T, old persistence.Store) persistence.Store {
	t.Helper()
	path := old.(*Store).path
	if err := old.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return mustOpen(t, path, o.opts)
}

func TestContract(t *testing.T) {
	storetest.Run(t, opener{})
}

func mustOpen(t *testing.T, path string, opts Options) *Store {
	t.Helper()
	s, err := Open(path, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

// openTemp opens a new store that the test closes at its end.
func openTemp(t *testing.T, opts Options) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "store.db")
	s := mustOpen(t, path, opts)
	t.Cleanup(func() { _ = s.Close() })
	return s, path
}

func apply(t *testing.T, s *Store, build func(b *persistence.Batch)) {
	t.Helper()
	var b persistence.Batch
	build(&b)
	if err := s.Apply(&b); err != nil {
		t.Fatalf("Apply: %v", err)
	}
}

func load(t *testing.T, s *Store) *persistence.Snapshot {
	t.Helper()
	snap, err := s.Load()
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return snap
}

func richProps() packets.Properties {
	var p packets.Properties
	for _, id := range []packets.PropID{packets.PropPayloadFormat, packets.PropMessageExpiry,
		packets.PropContentType, packets.PropResponseTopic, packets.PropCorrelationData} {
		p.Set(id)
	}
	p.PayloadFormat, p.MessageExpiry = 1, 3600
	p.ContentType, p.ResponseTopic = "text/plain", "re/ü"
	p.CorrelationData = []byte{0, 1, 2}
	p.User = []packets.UserProperty{{Key: "a", Value: "1"}, {Key: "a", Value: "2"}}
	p.SubscriptionIDs = []uint32{1, 268435455}
	return p
}

// willProps holds Will Delay Interval, which a PUBLISH may not carry: the
// codec must store these as Will Properties.
func willProps() packets.Properties {
	var p packets.Properties
	p.Set(packets.PropWillDelay)
	p.WillDelay = 30
	p.Set(packets.PropContentType)
	p.ContentType = "x"
	return p
}

func TestCodecRoundTrip(t *testing.T) {
	msgs := []*persistence.Message{
		{ID: 1, Topic: "a/b", Payload: []byte("hello"), QoS: 2, Retain: true, Properties: richProps(),
			Expiry: -5, Origin: "pub"},
		{ID: 2, Topic: "e", Payload: []byte{}},
		{ID: 3, Topic: "n", QoS: 1, Expiry: 1 << 62},
		{ID: ^uint64(0), Topic: "w", Payload: []byte{0}, Properties: willProps()},
	}
	for _, m := range msgs {
		v, err := encodeMessageRecord(m)
		if err != nil {
			t.Fatalf("encode %d: %v", m.ID, err)
		}
		got, err := decodeMessageRecord(m.ID, v)
		if err != nil || !reflect.DeepEqual(got, m) {
			t.Errorf("message %d:\n got  %+v, %v\n want %+v", m.ID, got, err, m)
		}
		w := &persistence.Will{Message: *m, At: 1234567}
		if v, err = encodeWill(w); err != nil {
			t.Fatalf("encode will %d: %v", m.ID, err)
		}
		if gw, err := decodeWill(v); err != nil || !reflect.DeepEqual(gw, w) {
			t.Errorf("will %d:\n got  %+v, %v\n want %+v", m.ID, gw, err, w)
		}
	}
	for _, s := range []persistence.Session{{ID: "x"}, {ID: "y", Username: "ü", Version: 5, Expiry: 0xFFFFFFFF, ExpireAt: -1,
		Listener: "tls:0.0.0.0:8883"}} {
		if got, err := decodeSession(s.ID, encodeSession(&s)); err != nil || got != s {
			t.Errorf("session: got %+v, %v; want %+v", got, err, s)
		}
	}
	// A session record of format 1 (no listener), as files written before
	// format 2 hold.
	v1 := appendString([]byte{recV1}, "bob")
	v1 = append(v1, 4)
	v1 = binary.AppendUvarint(v1, 60)
	v1 = binary.AppendVarint(v1, 7)
	if got, err := decodeSession("old", v1); err != nil ||
		got != (persistence.Session{ID: "old", Username: "bob", Version: 4, Expiry: 60, ExpireAt: 7}) {
		t.Errorf("format 1 session: got %+v, %v", got, err)
	}
	for qos := range byte(4) {
		for rh := range byte(4) {
			s := persistence.Subscription{Filter: "f/#", ID: uint32(qos) * 1000000,
				Options: packets.SubOptions{QoS: qos, NoLocal: rh%2 == 0, RetainAsPublished: qos%2 == 1, RetainHandling: rh}}
			v, err := encodeSubscription(&s)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := decodeSubscription(s.Filter, v); err != nil || got != s {
				t.Errorf("subscription: got %+v, %v; want %+v", got, err, s)
			}
		}
	}
	for _, o := range []persistence.Outbound{{Seq: 1, MessageID: 2}, {Seq: 9, MessageID: ^uint64(0), QoS: 2,
		Retain: true, SubIDs: []uint32{1, 268435455}, PacketID: 65535, Released: true}} {
		v, err := encodeOutbound(&o)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := decodeOutbound(o.Seq, v); err != nil || !reflect.DeepEqual(got, o) {
			t.Errorf("outbound: got %+v, %v; want %+v", got, err, o)
		}
	}
}

// TestCodecDamage feeds the decoders every prefix of valid records and
// random bytes: they may return an error, never panic or over-allocate.
func TestCodecDamage(t *testing.T) {
	m := &persistence.Message{ID: 1, Topic: "t", Payload: []byte("p"), Properties: richProps(), Origin: "o"}
	mv, _ := encodeMessageRecord(m)
	wv, _ := encodeWill(&persistence.Will{Message: *m, At: 5})
	ov, _ := encodeOutbound(&persistence.Outbound{Seq: 1, MessageID: 1, SubIDs: []uint32{1, 2, 3}})
	sv, _ := encodeSubscription(&persistence.Subscription{Filter: "f", ID: 7})
	sessv := encodeSession(&persistence.Session{ID: "s", Username: "u", ExpireAt: 99})
	decoders := []func([]byte) error{
		func(v []byte) error { _, err := decodeMessageRecord(1, v); return err },
		func(v []byte) error { _, err := decodeWill(v); return err },
		func(v []byte) error { _, err := decodeOutbound(1, v); return err },
		func(v []byte) error { _, err := decodeSubscription("f", v); return err },
		func(v []byte) error { _, err := decodeSession("s", v); return err },
	}
	records := [][]byte{mv, wv, ov, sv, sessv}
	for i, dec := range decoders {
		for n := range len(records[i]) {
			_ = dec(records[i][:n])
		}
		if err := dec(append([]byte{9}, records[i][1:]...)); err == nil {
			t.Errorf("decoder %d: format version 9 accepted", i)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		b := make([]byte, r.IntN(40))
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		b = append([]byte{recV1}, b...)
		for _, dec := range decoders {
			_ = dec(b)
		}
	}
}

// TestApplyRejects checks the errors of what the codec cannot keep, and
// that a failing batch leaves nothing behind.
func TestApplyRejects(t *testing.T) {
	s, _ := openTemp(t, Options{})
	apply(t, s, func(b *persistence.Batch) { b.PutSession(persistence.Session{ID: "a"}) })
	before := load(t, s)
	badAlias := &persistence.Message{ID: 5, Topic: "t"}
	badAlias.Properties.Set(packets.PropTopicAlias) // Topic Alias 0 does not decode
	cases := []struct {
		name string
		want error
		op   func(b *persistence.Batch)
	}{
		{"Properties", persistence.ErrBadOp, func(b *persistence.Batch) { b.PutMessage(badAlias) }},
		{"QoS", persistence.ErrBadOp, func(b *persistence.Batch) { b.PutMessage(&persistence.Message{ID: 6, QoS: 4}) }},
		{"SubOptions", persistence.ErrBadOp, func(b *persistence.Batch) {
			b.PutSubscription("a", persistence.Subscription{Filter: "f", Options: packets.SubOptions{RetainHandling: 4}})
		}},
		{"EmptySessionID", persistence.ErrBadOp, func(b *persistence.Batch) { b.PutSession(persistence.Session{}) }},
		{"EmptyTopic", persistence.ErrBadOp, func(b *persistence.Batch) {
			b.PutMessage(&persistence.Message{ID: 7, Topic: "t"})
			b.PutRetained("", 7)
		}},
		{"NoSessionDelete", persistence.ErrNoSession, func(b *persistence.Batch) { b.DeleteOutbound("ghost", 1) }},
	}
	for _, c := range cases {
		var b persistence.Batch
		b.PutSession(persistence.Session{ID: "b"})
		b.PutMessage(&persistence.Message{ID: 1, Topic: "x"})
		b.PutRetained("x", 1)
		c.op(&b)
		if err := s.Apply(&b); !errors.Is(err, c.want) {
			t.Errorf("%s: Apply = %v, want %v", c.name, err, c.want)
		}
		if after := load(t, s); !reflect.DeepEqual(after, before) {
			t.Errorf("%s: the failed batch left %+v", c.name, after)
		}
	}
}

// TestSessionKeys checks that session IDs which are prefixes of one
// another keep apart.
func TestSessionKeys(t *testing.T) {
	s, _ := openTemp(t, Options{Durability: None})
	ids := []string{"a", "ab", "a\x00", "\x01a", strings.Repeat("x", 200)}
	apply(t, s, func(b *persistence.Batch) {
		b.PutMessage(&persistence.Message{ID: 1, Topic: "t"})
		for i, id := range ids {
			b.PutSession(persistence.Session{ID: id})
			b.PutSubscription(id, persistence.Subscription{Filter: id + "/f"})
			b.PutOutbound(id, persistence.Outbound{Seq: uint64(i), MessageID: 1})
			b.PutAwaitingRel(id, uint16(i))
			b.PutWill(id, &persistence.Will{Message: persistence.Message{Topic: id}})
		}
	})
	apply(t, s, func(b *persistence.Batch) { b.DeleteSession("a") })
	snap := load(t, s)
	if len(snap.Sessions) != len(ids)-1 || len(snap.Messages) != 1 {
		t.Fatalf("after deleting a: %d sessions, %d messages", len(snap.Sessions), len(snap.Messages))
	}
	for _, st := range snap.Sessions {
		id := st.Session.ID
		if len(st.Subscriptions) != 1 || st.Subscriptions[0].Filter != id+"/f" || len(st.Outbound) != 1 ||
			len(st.AwaitingRel) != 1 || st.Will == nil || st.Will.Message.Topic != id {
			t.Errorf("session %q holds %+v", id, st)
		}
	}
}

func TestLocked(t *testing.T) {
	s, path := openTemp(t, Options{})
	start := time.Now()
	s2, err := Open(path, Options{Timeout: 100 * time.Millisecond})
	took := time.Since(start)
	if err == nil {
		s2.Close()
		t.Fatal("a second Open of the same file succeeded")
	}
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), path) {
		t.Errorf("second Open: %v; want ErrLocked naming %s", err, path)
	}
	if took > 2*time.Second {
		t.Errorf("second Open took %v", took)
	}
	t.Log(err)
	// The failed Open must not have left a lock or a file behind.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	mustOpen(t, path, Options{Timeout: 100 * time.Millisecond}).Close()
}

// filled makes a store file holding many sessions and messages, spread
// over many pages, and returns its path.
func filled(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "store.db")
	s := mustOpen(t, path, Options{Durability: None})
	for i := range 20 {
		apply(t, s, func(b *persistence.Batch) {
			for j := range 50 {
				id := fmt.Sprintf("client-%d-%d", i, j)
				m := &persistence.Message{ID: uint64(i*50 + j + 1), Topic: id, Payload: make([]byte, 300)}
				b.PutSession(persistence.Session{ID: id, Username: id})
				b.PutSubscription(id, persistence.Subscription{Filter: id + "/#"})
				b.PutMessage(m)
				b.PutOutbound(id, persistence.Outbound{Seq: 1, MessageID: m.ID})
			}
		})
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// openOrLoad opens path and loads it: damage shows in one or the other.
func openOrLoad(path string) error {
	s, err := Open(path, Options{Timeout: 100 * time.Millisecond})
	if err != nil {
		return err
	}
	defer s.Close()
	_, err = s.Load()
	return err
}

func TestCorrupt(t *testing.T) {
	junk := garbage(rand.New(rand.NewPCG(3, 4)), 64<<10)
	valid, err := os.ReadFile(filled(t))
	if err != nil {
		t.Fatal(err)
	}
	const page = 4096
	overwritten := bytes.Clone(valid)
	copy(overwritten[2*page:], junk) // everything but the meta pages
	cases := map[string][]byte{
		"Garbage":        junk,
		"Text":           []byte("this is not a database\n"),
		"TruncatedMeta":  valid[:100],
		"TruncatedPage":  valid[:page],
		"TruncatedHalf":  valid[:len(valid)/2],
		"TruncatedPage3": valid[:3*page],
		"DataPages":      overwritten,
	}
	for name, content := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bad.db")
			if err := os.WriteFile(path, content, 0o600); err != nil {
				t.Fatal(err)
			}
			err := openOrLoad(path)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
				t.Fatalf("got %v; want ErrCorrupt naming %s", err, path)
			}
			t.Log(err)
		})
	}
}

// TestOpenNotCorrupt checks that what cannot be opened for other reasons
// is not called corrupt, which could lead the broker to move it aside.
func TestOpenNotCorrupt(t *testing.T) {
	dir := t.TempDir()
	for _, path := range []string{dir, filepath.Join(dir, "missing", "store.db")} {
		_, err := Open(path, Options{})
		if err == nil || errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
			t.Errorf("Open(%s) = %v; want an error naming it, not ErrCorrupt", path, err)
		}
	}
}

// TestCorruptPages damages one page at a time, overwriting it whole or
// flipping a few bytes past its header: whatever bbolt makes of that,
// Open and Load give ErrCorrupt or a result, never a crash, and never a
// file left locked.
func TestCorruptPages(t *testing.T) { corruptPages(t, 5) }

func corruptPages(t *testing.T, seed uint64) {
	path := filled(t)
	valid, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const page = 4096
	m, err := readMeta(mustOpenFile(t, path), int64(len(valid)))
	if err != nil {
		t.Fatal(err)
	}
	// Every third page below the high water mark (those above are
	// unused), and the free list's.
	var pages []int
	for p := 2; p < int(m.pgid); p += 3 {
		pages = append(pages, p)
	}
	pages = append(pages, int(m.freelist))
	r := rand.New(rand.NewPCG(seed, 6))
	for _, flips := range []int{page, 8} {
		found := 0
		for _, p := range pages {
			b := bytes.Clone(valid)
			if flips == page {
				copy(b[p*page:], garbage(r, page))
			} else {
				for range flips {
					b[p*page+pageHeaderSize+r.IntN(page-pageHeaderSize)] = byte(r.Uint32())
				}
			}
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			err := openOrLoad(path)
			if err != nil {
				found++
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
					t.Fatalf("page %d: %v; want ErrCorrupt naming the file", p, err)
				}
			}
		}
		t.Logf("%d bytes changed in each of %d pages: %d found damaged", flips, len(pages), found)
	}
}

func garbage(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func mustOpenFile(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestMoveAside(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "store.db")
	if err := os.WriteFile(path, []byte("garbage garbage garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, Options{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open: %v, want ErrCorrupt", err)
	}
	moved, err := MoveAside(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(moved, path+".corrupt-") {
		t.Errorf("moved to %s", moved)
	}
	if b, err := os.ReadFile(moved); err != nil || string(b) != "garbage garbage garbage" {
		t.Errorf("moved file: %q, %v", b, err)
	}
	s := mustOpen(t, path, Options{})
	if snap := load(t, s); len(snap.Sessions)+len(snap.Messages)+len(snap.Retained) != 0 {
		t.Errorf("new store not empty: %+v", snap)
	}
	s.Close()
	// Again within the same second: a name of its own.
	moved2, err := MoveAside(path)
	if err != nil || moved2 == moved {
		t.Fatalf("second MoveAside: %s, %v (first %s)", moved2, err, moved)
	}
	if _, err := MoveAside(filepath.Join(dir, "missing.db")); err == nil {
		t.Error("MoveAside of a missing file succeeded")
	}
}

// setMeta rewrites the meta bucket of a closed store with bbolt itself.
func setMeta(t *testing.T, path string, fn func(tx *bbolt.Tx) error) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestSchema(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "store.db")
	mustOpen(t, path, Options{}).Close()
	setMeta(t, path, func(tx *bbolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyVersion, []byte{99}) })
	_, err := Open(path, Options{})
	if !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "99") {
		t.Errorf("Open of schema 99: %v", err)
	}
	t.Log(err)

	foreign := filepath.Join(dir, "foreign.db")
	setMeta(t, foreign, func(tx *bbolt.Tx) error { _, err := tx.CreateBucket([]byte("theirs")); return err })
	if _, err := Open(foreign, Options{}); !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), "theirs") {
		t.Errorf("Open of another program's file: %v", err)
	}

	missing := filepath.Join(dir, "missing.db")
	mustOpen(t, missing, Options{}).Close()
	setMeta(t, missing, func(tx *bbolt.Tx) error { return tx.DeleteBucket(bucketWills) })
	if _, err := Open(missing, Options{}); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "wills") {
		t.Errorf("Open without a bucket: %v", err)
	}
}

// TestDurability opens a store in each mode, and checks that what it
// applied is there once it is reopened.
func TestDurability(t *testing.T) {
	for _, d := range []Durability{Sync, Interval, None} {
		t.Run(d.String(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "store.db")
			s := mustOpen(t, path, Options{Durability: d})
			m := &persistence.Message{ID: 1, Topic: "t", Payload: []byte("p"), Properties: richProps()}
			apply(t, s, func(b *persistence.Batch) {
				b.PutSession(persistence.Session{ID: "c", Version: 5})
				b.PutMessage(m)
				b.PutOutbound("c", persistence.Outbound{Seq: 1, MessageID: 1})
			})
			want := load(t, s)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			s = mustOpen(t, path, Options{Durability: d})
			defer s.Close()
			if got := load(t, s); !reflect.DeepEqual(got, want) || !reflect.DeepEqual(got.Messages[1], m) {
				t.Errorf("after reopen:\n got  %+v\n want %+v", got, want)
			}
		})
	}
	if _, err := Open(filepath.Join(t.TempDir(), "x.db"), Options{Durability: 7}); err == nil {
		t.Error("Open with durability 7 succeeded")
	}
}

// TestIntervalSyncs checks that Interval fsyncs once after commits, and
// not while idle. It runs in a synctest bubble: its sleeps are virtual
// time, and synctest.Wait returns once the background goroutine is
// blocked again, so an hour of idling costs nothing and proves it waits
// for a commit rather than ticking.
func TestIntervalSyncs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := openTemp(t, Options{Durability: Interval, syncEvery: 10 * time.Millisecond})
		syncsAfter := func(d time.Duration) int64 {
			time.Sleep(d)
			synctest.Wait()
			return s.syncs.Load()
		}
		for i := range 3 {
			apply(t, s, func(b *persistence.Batch) { b.PutSession(persistence.Session{ID: fmt.Sprint(i)}) })
		}
		if n := syncsAfter(20 * time.Millisecond); n != 1 {
			t.Fatalf("%d background fsyncs after three commits, want 1", n)
		}
		if n := syncsAfter(time.Hour); n != 1 {
			t.Fatalf("%d background fsyncs after an idle hour, want 1", n)
		}
		apply(t, s, func(b *persistence.Batch) { b.PutSession(persistence.Session{ID: "again"}) })
		if n := syncsAfter(20 * time.Millisecond); n != 2 {
			t.Fatalf("%d background fsyncs after another commit, want 2", n)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestIdleWritesNothing opens, loads and closes an existing store: the
// file must not change.
func TestIdleWritesNothing(t *testing.T) {
	for _, d := range []Durability{Sync, Interval, None} {
		path := filepath.Join(t.TempDir(), "store.db")
		s := mustOpen(t, path, Options{Durability: d})
		apply(t, s, func(b *persistence.Batch) { b.PutSession(persistence.Session{ID: "c"}) })
		s.Close()
		before, _ := os.ReadFile(path)
		logBefore, _ := os.ReadFile(path + walSuffix)
		s = mustOpen(t, path, Options{Durability: d, syncEvery: time.Millisecond})
		load(t, s)
		var empty persistence.Batch
		if err := s.Apply(&empty); err != nil {
			t.Fatal(err)
		}
		load(t, s)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
			t.Errorf("%s: opening, loading and closing changed the file", d)
		}
		if after, _ := os.ReadFile(path + walSuffix); !bytes.Equal(logBefore, after) {
			t.Errorf("%s: opening, loading and closing changed the log", d)
		}
	}
}

// TestFileSizeBounded cycles messages through the store: bbolt must reuse
// the pages they free, so the file stops growing.
func TestFileSizeBounded(t *testing.T) {
	s, path := openTemp(t, Options{Durability: None})
	apply(t, s, func(b *persistence.Batch) {
		b.PutSession(persistence.Session{ID: "c"})
	})
	const cycles, per = 20000, 100
	payload := make([]byte, 512)
	var half int64
	for i := 0; i < cycles; i += per {
		apply(t, s, func(b *persistence.Batch) {
			for j := i; j < i+per; j++ {
				id := uint64(j + 1)
				b.PutMessage(&persistence.Message{ID: id, Topic: fmt.Sprintf("t/%d", j%1000), Payload: payload})
				b.PutOutbound("c", persistence.Outbound{Seq: id, MessageID: id})
				b.PutRetained(fmt.Sprintf("t/%d", j%1000), id)
				if j >= per {
					b.DeleteOutbound("c", id-per)
				}
			}
		})
		if i+per == cycles/2 {
			half = fileSize(t, path)
		}
	}
	snap := load(t, s)
	if len(snap.Sessions[0].Outbound) != per || len(snap.Messages) != 1000 {
		t.Fatalf("%d outbound, %d messages", len(snap.Sessions[0].Outbound), len(snap.Messages))
	}
	end := fileSize(t, path)
	t.Logf("file size after %d cycles: %d bytes; after %d: %d bytes", cycles/2, half, cycles, end)
	if end > 4<<20 || end > half {
		t.Errorf("the file grew to %d bytes (%d at half way)", end, half)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// TestAgainstMemory applies the same random batches to a Store and to
// persistence.Memory: they must fail alike and Load alike. Small ID
// spaces make the batches collide: sessions deleted and put back, entries
// replaced, messages released and taken again within a batch.
func TestAgainstMemory(t *testing.T) {
	for _, d := range []Durability{None, Sync} {
		t.Run(d.String(), func(t *testing.T) { againstMemory(t, d) })
	}
}

// againstMemory is TestAgainstMemory with durability d: under Sync, Apply
// answers from the shadow and the applier applies the log later.
func againstMemory(t *testing.T, d Durability) {
	s, _ := openTemp(t, Options{Durability: d})
	mem := persistence.NewMemory()
	r := rand.New(rand.NewPCG(7, 8))
	failed := 0
	for i := range 1000 {
		if !applyBoth(t, r, i, s, mem) {
			failed++
		}
		got, want := normalise(load(t, s)), normalise(must(mem.Load()))
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("after batch %d:\n Store  %+v\n Memory %+v", i, got, want)
		}
	}
	t.Logf("1000 batches, %d failed", failed)
}

// applyBoth applies batch i of random operations on a few sessions to s
// and to mem, which must both take it or both refuse it alike; it reports
// whether they took it.
func applyBoth(t *testing.T, r *rand.Rand, i int, s *Store, mem *persistence.Memory) bool {
	t.Helper()
	sessions := []string{"a", "ab", "b"}
	var b persistence.Batch
	if r.IntN(3) > 0 {
		// Or most batches would fail for want of a session.
		b.PutSession(persistence.Session{ID: sessions[r.IntN(len(sessions))]})
	}
	for range 1 + r.IntN(5) {
		randomOp(r, &b, sessions[r.IntN(len(sessions))])
	}
	errS, errM := s.Apply(&b), mem.Apply(&b)
	for _, e := range []error{persistence.ErrNoSession, persistence.ErrNoMessage, persistence.ErrBadOp} {
		if errors.Is(errS, e) != errors.Is(errM, e) {
			t.Fatalf("batch %d %+v: Store: %v, Memory: %v", i, b.Ops, errS, errM)
		}
	}
	if (errS == nil) != (errM == nil) {
		t.Fatalf("batch %d: Store: %v, Memory: %v", i, errS, errM)
	}
	return errS == nil
}

// normalise makes empty slices nil, which the contract holds alike.
func normalise(s *persistence.Snapshot) *persistence.Snapshot {
	if len(s.Sessions) == 0 {
		s.Sessions = nil
	}
	for i := range s.Sessions {
		st := &s.Sessions[i]
		if len(st.Subscriptions) == 0 {
			st.Subscriptions = nil
		}
		if len(st.AwaitingRel) == 0 {
			st.AwaitingRel = nil
		}
		if len(st.Outbound) == 0 {
			st.Outbound = nil
		}
		for j := range st.Outbound {
			if len(st.Outbound[j].SubIDs) == 0 {
				st.Outbound[j].SubIDs = nil
			}
		}
	}
	return s
}

func must(s *persistence.Snapshot, err error) *persistence.Snapshot {
	if err != nil {
		panic(err)
	}
	return s
}

func randomOp(r *rand.Rand, b *persistence.Batch, sid string) {
	msg := uint64(1 + r.IntN(6))
	topic := fmt.Sprintf("t/%d", r.IntN(3))
	put := func() {
		m := &persistence.Message{ID: msg, Topic: topic, Payload: []byte(topic), QoS: byte(r.IntN(3))}
		if r.IntN(2) == 0 {
			m.Properties = richProps()
		}
		b.PutMessage(m)
	}
	switch r.IntN(12) {
	case 0, 1:
		put()
	case 2:
		b.PutSession(persistence.Session{ID: sid, Username: topic, Version: 5, ExpireAt: r.Int64()})
	case 3:
		b.DeleteSession(sid)
	case 4:
		b.PutSubscription(sid, persistence.Subscription{Filter: topic, ID: uint32(msg)})
	case 5:
		b.DeleteSubscription(sid, topic)
	case 6, 7:
		if r.IntN(2) == 0 {
			put()
		}
		b.PutOutbound(sid, persistence.Outbound{Seq: uint64(r.IntN(4)), MessageID: msg, PacketID: uint16(msg)})
	case 8:
		b.DeleteOutbound(sid, uint64(r.IntN(4)))
	case 9:
		if r.IntN(2) == 0 {
			put()
		}
		b.PutRetained(topic, msg)
	case 10:
		b.DeleteRetained(topic)
	default:
		switch r.IntN(4) {
		case 0:
			b.PutAwaitingRel(sid, uint16(msg))
		case 1:
			b.DeleteAwaitingRel(sid, uint16(msg))
		case 2:
			b.PutWill(sid, &persistence.Will{Message: persistence.Message{ID: msg, Topic: topic}, At: 9})
		default:
			b.DeleteWill(sid)
		}
	}
}

// TestNoFreelist refuses a file without a stored free list, on which
// bbolt would walk the tree in a goroutine that panics on damage.
func TestNoFreelist(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{NoFreelistSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bbolt.Tx) error { _, err := tx.CreateBucket(bucketMeta); return err }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := Open(path, Options{}); !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), path) {
		t.Errorf("Open: %v; want ErrSchema", err)
	}
}

// TestFileDoesNotGrow cycles a million messages through a session (each
// stored, then deleted as acknowledged, a thousand at a time, as a
// subscriber that keeps up makes the broker do) and checks that the file
// stays the size of what it holds at once: bbolt reuses the pages freed.
func TestFileDoesNotGrow(t *testing.T) {
	total := 1_000_000
	if testing.Short() || raceEnabled {
		total = 100_000 // the million runs in hack/test -full's 32-bit pass
	}
	const perBatch = 1000
	s, path := openTemp(t, Options{})
	var b persistence.Batch
	b.PutSession(persistence.Session{ID: "device", Expiry: 3600})
	if err := s.Apply(&b); err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 64)
	var size1 int64
	for n := 0; n < total; n += perBatch {
		b.Reset()
		for i := n; i < n+perBatch; i++ {
			b.PutMessage(&persistence.Message{ID: uint64(i + 1), Topic: "sensors/device/temp", Payload: payload, QoS: 1})
			b.PutOutbound("device", persistence.Outbound{Seq: uint64(i), MessageID: uint64(i + 1), QoS: 1})
			if i >= perBatch {
				b.DeleteOutbound("device", uint64(i-perBatch))
			}
		}
		if err := s.Apply(&b); err != nil {
			t.Fatal(err)
		}
		if n == 10*perBatch {
			size1 = fileSize(t, path)
		}
	}
	size := fileSize(t, path)
	t.Logf("file after %d messages: %d KiB (%d KiB after %d)", total, size>>10, size1>>10, 10*perBatch)
	if size > 2*size1 {
		t.Errorf("the file grew from %d to %d bytes while holding the same %d messages", size1, size, perBatch)
	}
	if log := fileSize(t, path+walSuffix); log > walMaxSize {
		t.Errorf("the log grew to %d bytes, past its bound of %d", log, walMaxSize)
	}
}
