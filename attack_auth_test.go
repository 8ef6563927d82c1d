package mqttd_test

import (
	"os"
	"path/filepath"
	"testing"

	"mqttd"
	"mqttd/auth/passwd"
	"mqttd/packets"
)

// willsSettled waits until n wills were published or refused in all.
func willsSettled(t *testing.T, srv *mqttd.Server, n uint64) {
	t.Helper()
	waitFor(t, "the wills to be settled", func() bool {
		st := srv.Stats()
		return st.WillsPublished+st.WillsRefused >= n
	})
}

// TestRevokedUserLosesConnectionAndWill checks SIGHUP's reload against
// connected users: one the password file no longer has is disconnected
// (5.0 DISCONNECT 0x87, 3.1.1 closed), and its retained will is not
// published (a revoked credential publishes nothing), nor is the delayed
// will of a session already offline; a user who stays keeps its
// connection.
func TestRevokedUserLosesConnectionAndWill(t *testing.T) {
	pw := writePasswords(t, t.TempDir(), "alice", "bob", "carol", "watch")
	srv, addr := startServer(t, mqttd.Options{Auth: mqttd.Auth{AuthConfig: mqttd.AuthConfig{PasswordFile: pw}}})
	watch := connectAs(t, addr, packets.V311, as("watch", "watch", "pw-watch"))
	subscribe(watch, packets.Subscription{Filter: "will/#"})

	var alice [2]*rawConn
	for i, v := range versions {
		cp := as("alice-"+versionName(v), "alice", "pw-alice")
		setWill(cp, "will/alice")
		cp.WillRetain = true
		alice[i] = connectAs(t, addr, v, cp)
	}
	// carol is offline with a will waiting for its delay when she is
	// revoked.
	cp := as("carol", "carol", "pw-carol")
	setWill(cp, "will/carol")
	cp.CleanStart, cp.Properties.SessionExpiry = false, 60
	cp.Properties.Set(packets.PropSessionExpiry)
	cp.WillProperties.WillDelay = 1
	cp.WillProperties.Set(packets.PropWillDelay)
	carol := connectAs(t, addr, packets.V5, cp)
	carol.nc.Close()
	waitFor(t, "carol's will to wait for its delay", func() bool { return srv.Stats().WillsDelayed == 1 })
	bob := connectAs(t, addr, packets.V5, as("bob", "bob", "pw-bob"))

	for _, u := range []string{"alice", "carol"} {
		if err := passwd.Delete(pw, u); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.Reload(); err != nil {
		t.Fatal(err)
	}
	if d, ok := alice[1].read().(*packets.Disconnect); !ok || d.ReasonCode != packets.NotAuthorized {
		t.Errorf("revoked 5.0 client got %+v, want DISCONNECT 0x87", d)
	}
	for _, rc := range alice {
		rc.expectClosed()
	}
	willsSettled(t, srv, 3)
	expectNothing(watch)
	bob.ping()
	st := srv.Stats()
	if st.ClientsRevoked != 2 || st.WillsRefused != 3 || st.WillsPublished != 0 || st.Retained != 0 {
		t.Errorf("stats: %d revoked, %d wills refused, %d published, %d retained; want 2, 3, 0, 0",
			st.ClientsRevoked, st.WillsRefused, st.WillsPublished, st.Retained)
	}
	if n := st.Disconnects["auth_revoked"]; n != 2 {
		t.Errorf("%d connections closed as auth_revoked, want 2", n)
	}
	expectRefused(t, addr, packets.V5, as("alice-again", "alice", "pw-alice"), packets.BadUsernameOrPassword)
}

// TestWillReauthorized checks that a will is asked about again when it is
// published: a reload that takes away the user's right to write the
// will's topic keeps the will from being published, though the user may
// still connect.
func TestWillReauthorized(t *testing.T) {
	dir := t.TempDir()
	aclFile := writeFile(t, dir, "acl", "user alice\ntopic readwrite alice/#\n\nuser watch\ntopic read #\n")
	srv, addr := startServer(t, mqttd.Options{Auth: mqttd.Auth{AuthConfig: mqttd.AuthConfig{ACLFile: aclFile}}})
	watch := connectAs(t, addr, packets.V311, as("watch", "watch", ""))
	subscribe(watch, packets.Subscription{Filter: "alice/#"})
	cp := as("alice", "alice", "")
	setWill(cp, "alice/status")
	alice := connectAs(t, addr, packets.V311, cp)

	if err := os.WriteFile(filepath.Join(dir, "acl"), []byte("user alice\ntopic read alice/#\n\nuser watch\ntopic read #\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := srv.Reload(); err != nil {
		t.Fatal(err)
	}
	alice.ping() // still connected: only the will's topic was taken away
	alice.nc.Close()
	willsSettled(t, srv, 1)
	expectNothing(watch)
	if st := srv.Stats(); st.WillsRefused != 1 {
		t.Errorf("%d wills refused, want 1", st.WillsRefused)
	}
}
