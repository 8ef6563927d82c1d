package passwd

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"mqttd/auth"
)

// newAuth returns an Authenticator over a file holding alice/secret.
func newAuth(t *testing.T, opts Options) *Authenticator {
	t.Helper()
	path := filepath.Join(t.TempDir(), "passwd")
	if err := Set(path, "alice", []byte("secret"), true); err != nil {
		t.Fatal(err)
	}
	a, err := New(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func alice(remote string) auth.ClientInfo {
	return auth.ClientInfo{Username: "alice", Remote: &net.TCPAddr{IP: net.ParseIP(remote), Port: 1}}
}

func TestFullQueueRefusesAtOnce(t *testing.T) {
	a := newAuth(t, Options{Workers: 1, MaxQueue: 1})
	// Hold the only worker, as a long check would.
	a.workers <- struct{}{}
	queued := make(chan error, 1)
	go func() { queued <- a.Authenticate(alice("10.0.0.1"), []byte("secret")) }()
	deadline := time.Now().Add(5 * time.Second)
	for a.waiting.Load() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the first login never queued")
		}
		<-time.After(time.Millisecond)
	}
	// Workers+MaxQueue = 2 logins may be in the pool (running or
	// waiting): a second fills it, a third is refused.
	go func() { queued <- a.Authenticate(alice("10.0.0.2"), []byte("secret")) }()
	for a.waiting.Load() != 2 {
		if time.Now().After(deadline) {
			t.Fatal("the second login never queued")
		}
		<-time.After(time.Millisecond)
	}
	if err := a.Authenticate(alice("10.0.0.3"), []byte("secret")); !errors.Is(err, ErrBusy) || !errors.Is(err, auth.ErrNotAuthorized) {
		t.Fatalf("login past the queue: %v, want ErrBusy", err)
	}
	<-a.workers
	for range 2 {
		if err := <-queued; err != nil {
			t.Fatalf("queued login: %v", err)
		}
	}
	if s := a.Stats(); s.Busy != 1 || s.Accepted != 2 {
		t.Fatalf("stats %+v", s)
	}
}

func TestFailureMemoryIsBounded(t *testing.T) {
	a := newAuth(t, Options{MaxAddresses: 50, FailureDelay: time.Nanosecond})
	for i := range 1000 {
		a.remember("10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256))
		if n := len(a.failures); n > 50 {
			t.Fatalf("%d addresses remembered, limit 50", n)
		}
	}
	// An address seen again keeps counting while the map is full.
	a.remember("192.0.2.1")
	a.remember("192.0.2.1")
	if f := a.failures["192.0.2.1"]; f.count != 2 {
		t.Fatalf("count %d, want 2", f.count)
	}
}

func TestUnknownUserChecksADummyOfTheSameCost(t *testing.T) {
	a := newAuth(t, Options{})
	d := a.table.Load().dummy
	if !d.pbkdf2 || d.iterations != DefaultIterations || len(d.salt) != saltLen {
		t.Fatalf("dummy %v does not cost what a default entry costs", d)
	}
	// A dearer entry raises the dummy's cost to its own.
	h := Hash{pbkdf2: true, iterations: 1000, salt: make([]byte, saltLen)}
	sum, err := h.compute([]byte("pw"))
	if err != nil {
		t.Fatal(err)
	}
	h.sum = sum
	if err := os.WriteFile(a.path, []byte("bob:"+h.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if d := a.table.Load().dummy; d.iterations != 1000 {
		t.Fatalf("dummy has %d iterations, want the file's 1000", d.iterations)
	}
}

// Entries of each kind and cost, for the dummy's tests: a $6$ one, a $7$
// one as mosquitto_passwd writes it, and a dearer $7$ one with a 64-byte
// salt.
const (
	legacyEntry = "$6$6cJdP4XOnU5ANGbe$7HJP/Nj6SQU/uM5mIhGGuoq80Sco+Nzbi/WbY0EgAxHPR2T1F1fyuLzj4FlHaebZvWQxYIqX+B09CrS2mbM4Mg=="
	modernEntry = "$7$101$6cJdP4XOnU5ANGbe$7HJP/Nj6SQU/uM5mIhGGuoq80Sco+Nzbi/WbY0EgAxHPR2T1F1fyuLzj4FlHaebZvWQxYIqX+B09CrS2mbM4Mg=="
	dearEntry   = "$7$2000$7HJP/Nj6SQU/uM5mIhGGuoq80Sco+Nzbi/WbY0EgAxHPR2T1F1fyuLzj4FlHaebZvWQxYIqX+B09CrS2mbM4Mg==$7HJP/Nj6SQU/uM5mIhGGuoq80Sco+Nzbi/WbY0EgAxHPR2T1F1fyuLzj4FlHaebZvWQxYIqX+B09CrS2mbM4Mg=="
)

// TestUnknownUserChecksTheDearestEntry checks that a login as an unknown
// user is checked against a hash of the same kind, iteration count and
// salt length as the dearest entry of the file, so it does the same
// hashing work as the slowest known user: PBKDF2 with the most
// iterations where there is one, a single SHA-512 in a file of $6$
// entries only. It checks the work, not the time.
func TestUnknownUserChecksTheDearestEntry(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []string
		want    string // the entry whose cost the dummy must have
		legacy  string // the user with the $6$ entry
	}{
		{"legacy only", []string{legacyEntry}, legacyEntry, "user0"},
		{"mixed", []string{legacyEntry, modernEntry}, modernEntry, "user0"},
		{"dear", []string{modernEntry, dearEntry, legacyEntry}, dearEntry, "user2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "passwd")
			var lines string
			for i, e := range tc.entries {
				lines += "user" + strconv.Itoa(i) + ":" + e + "\n"
			}
			if err := os.WriteFile(path, []byte(lines), 0o600); err != nil {
				t.Fatal(err)
			}
			a, err := New(path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			want, _ := ParseHash(tc.want)
			got, known := a.table.Load().entry("nobody")
			if known || got.pbkdf2 != want.pbkdf2 || got.iterations != want.iterations || len(got.salt) != len(want.salt) {
				t.Errorf("unknown user checked against pbkdf2=%v iterations=%d salt=%d bytes; want %v, %d, %d (%s)",
					got.pbkdf2, got.iterations, len(got.salt), want.pbkdf2, want.iterations, len(want.salt), tc.want[:8])
			}
			if legacy := a.Legacy(); len(legacy) != 1 || legacy[0] != tc.legacy {
				t.Errorf("Legacy() = %v, want [%s]", legacy, tc.legacy)
			}
		})
	}
}
