package bolt

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.etcd.io/bbolt"

	"mqttd/packets"
	"mqttd/persistence"
)

// schema1File copies testdata/schema1.db.gz, a store the build before
// hashed keys wrote (keys up to its limit of 16,000 bytes), into a
// temporary file.
func schema1File(t *testing.T) string {
	t.Helper()
	gz, err := os.ReadFile(filepath.Join("testdata", "schema1.db.gz"))
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	var raw bytes.Buffer
	if _, err := raw.ReadFrom(zr); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "store.db")
	if err := os.WriteFile(path, raw.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// metaVersion reads the schema version of a closed store file.
func metaVersion(t *testing.T, path string) uint64 {
	t.Helper()
	var v uint64
	setMeta(t, path, func(tx *bbolt.Tx) error {
		v, _ = uvarint(tx.Bucket(bucketMeta).Get(keyVersion))
		return nil
	})
	return v
}

// TestSchema1File checks that a store written before hashed keys opens
// and reads back whole, stays schema 1 until a key too long to be a key
// is stored, and is then marked schema 2 and reads back both.
func TestSchema1File(t *testing.T) {
	path := schema1File(t)
	edge := strings.Repeat("k", 15999) + "z"
	s := mustOpen(t, path, Options{})
	snap := load(t, s)
	if len(snap.Sessions) != 2 || !reflect.DeepEqual(snap.Retained, map[string]uint64{"a/b": 1, edge: 2}) ||
		len(snap.Messages) != 2 || snap.Messages[2].Topic != edge || snap.Messages[2].Origin != edge {
		t.Fatalf("schema 1 file: %d sessions, retained %d, %d messages", len(snap.Sessions), len(snap.Retained), len(snap.Messages))
	}
	for i, id := range []string{"dev-1", edge} {
		st := snap.Sessions[i]
		want := persistence.SessionState{
			Session: persistence.Session{ID: id, Username: "u", Version: 5, Expiry: 3600, Listener: "tcp"},
			Subscriptions: []persistence.Subscription{
				{Filter: "a/+", Options: packets.SubOptions{QoS: 1}, ID: 7},
				{Filter: edge, Options: packets.SubOptions{QoS: 2, NoLocal: true}},
			},
			Outbound:    []persistence.Outbound{{Seq: 1, MessageID: 1, QoS: 1}},
			AwaitingRel: []uint16{9},
			Will: &persistence.Will{At: 42, Message: persistence.Message{ID: 3, Topic: "will/" + id[:1],
				Payload: []byte("bye"), QoS: 1}},
		}
		if !reflect.DeepEqual(st, want) {
			t.Errorf("session %d of the schema 1 file:\n got %+v\nwant %+v", i, st, want)
		}
	}
	// Changes within the old limit leave the file readable by the build
	// that wrote it.
	apply(t, s, func(b *persistence.Batch) { b.DeleteSubscription(edge, edge) })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if v := metaVersion(t, path); v != schemaVersion {
		t.Fatalf("schema %d after short keys, want %d", v, schemaVersion)
	}

	long := edge + "+"
	s = mustOpen(t, path, Options{})
	apply(t, s, func(b *persistence.Batch) {
		b.PutSubscription("dev-1", persistence.Subscription{Filter: long})
	})
	// Marked before the batch is in the log, not once the log is applied:
	// an older build replaying the log would meet the hashed key.
	var marked uint64
	if err := s.db.View(func(tx *bbolt.Tx) error {
		marked, _ = uvarint(tx.Bucket(bucketMeta).Get(keyVersion))
		return nil
	}); err != nil || marked != schemaHashed {
		t.Errorf("schema %d, %v while the hashed key is in the log, want %d", marked, err, schemaHashed)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if v := metaVersion(t, path); v != schemaHashed {
		t.Fatalf("schema %d after a hashed key, want %d", v, schemaHashed)
	}
	s = mustOpen(t, path, Options{})
	defer s.Close()
	snap = load(t, s)
	if subs := snap.Sessions[0].Subscriptions; len(subs) != 3 || subs[2].Filter != long {
		t.Errorf("after a hashed key, dev-1 holds %+v", subs)
	}
	if subs := snap.Sessions[1].Subscriptions; len(subs) != 1 {
		t.Errorf("after a hashed key, the long session holds %+v", subs)
	}
}

// TestHashedKeysApart checks that a short filter or topic spelling the
// key a long one hashes to keeps apart from it.
func TestHashedKeysApart(t *testing.T) {
	for _, d := range []Durability{Sync, None} {
		t.Run(d.String(), func(t *testing.T) {
			s, path := openTemp(t, Options{Durability: d})
			long := strings.Repeat("x", 20000)
			h := sha256.Sum256([]byte(long))
			spoof := string(append([]byte{hashMark}, h[:]...))
			apply(t, s, func(b *persistence.Batch) {
				b.PutSession(persistence.Session{ID: "s"})
				b.PutSubscription("s", persistence.Subscription{Filter: long, ID: 1})
				b.PutSubscription("s", persistence.Subscription{Filter: spoof, ID: 2})
				b.PutMessage(&persistence.Message{ID: 1, Topic: long})
				b.PutMessage(&persistence.Message{ID: 2, Topic: spoof})
				b.PutRetained(long, 1)
				b.PutRetained(spoof, 2)
			})
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = mustOpen(t, path, Options{Durability: d})
			defer s.Close()
			snap := load(t, s)
			subs := snap.Sessions[0].Subscriptions
			if len(subs) != 2 || subs[0].Filter != long || subs[0].ID != 1 || subs[1].Filter != spoof || subs[1].ID != 2 {
				t.Errorf("subscriptions: %+v", subs)
			}
			if !reflect.DeepEqual(snap.Retained, map[string]uint64{long: 1, spoof: 2}) {
				t.Errorf("retained: %d topics", len(snap.Retained))
			}
		})
	}
}

// TestHashedKeyDamage checks that a hashed key whose record names another
// session, filter or topic is ErrCorrupt, not a record put in the wrong
// place.
func TestHashedKeyDamage(t *testing.T) {
	long := strings.Repeat("x", 20000)
	other := long + "y"
	cases := map[string]func(tx *bbolt.Tx) error{
		"session": func(tx *bbolt.Tx) error {
			return tx.Bucket(bucketSessions).Put(sessKey(long, 0), encodeSession(&persistence.Session{ID: other}))
		},
		"filter": func(tx *bbolt.Tx) error {
			v, err := encodeSubscription(&persistence.Subscription{Filter: other})
			if err == nil {
				err = tx.Bucket(bucketSubs).Put(subKey("s", long), v)
			}
			return err
		},
		"topic": func(tx *bbolt.Tx) error {
			return tx.Bucket(bucketRetained).Put(appendName(nil, long), encodeRetained(other, 1))
		},
	}
	for name, damage := range cases {
		t.Run(name, func(t *testing.T) {
			s, path := openTemp(t, Options{Durability: None})
			apply(t, s, func(b *persistence.Batch) {
				b.PutSession(persistence.Session{ID: "s"})
				b.PutMessage(&persistence.Message{ID: 1, Topic: "t"})
				b.PutRetained("t", 1)
			})
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			setMeta(t, path, damage)
			err := openOrLoad(path)
			t.Log(err)
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("Open and Load: %v, want ErrCorrupt", err)
			}
		})
	}
}
