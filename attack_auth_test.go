package mqttd_test

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"mqttd"
	"mqttd/auth"
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

// TestRefusedLoginLinesLimited checks that a client refused as fast as it
// connects cannot flood the log: of 60 refused anonymous CONNECTs (from
// loopback, which no bucket slows) at most 20 "connection closed" and 20
// "login refused" lines reach the info level, while
// mqttd_disconnects_total counts every one.
func TestRefusedLoginLinesLimited(t *testing.T) {
	logs := &logLines{}
	pw := writePasswords(t, t.TempDir(), "alice")
	srv, addr := startServer(t, mqttd.Options{Logger: zerolog.New(logs).Level(zerolog.InfoLevel),
		Auth: mqttd.Auth{AuthConfig: mqttd.AuthConfig{PasswordFile: pw}}})
	const n = 60
	for i := range n {
		expectRefused(t, addr, packets.V311, as(fmt.Sprint("anon-", i), "", ""), packets.ConnRefusedNotAuthorized)
	}
	waitFor(t, "every refused connection to close", func() bool { return srv.Stats().Disconnects["auth_failed"] == n })
	closed := 0
	for _, l := range logs.find("connection closed") {
		if l["reason"] == "auth_failed" {
			closed++
		}
	}
	if closed == 0 || closed > 20 {
		t.Errorf("%d auth_failed close lines at info for %d refusals, want 1 to 20", closed, n)
	}
	if got := len(logs.find("login refused (at most 20 lines every 10 s; mqttd_auth_failures_total counts them all)")); got > 20 {
		t.Errorf("%d login refused lines, want at most 20", got)
	}
}

// fromEach makes startServer's listener report each accepted connection
// as coming from the next address sent on the returned channel.
func fromEach(t *testing.T, opts mqttd.Options, size int) (*mqttd.Server, string, chan net.Addr) {
	t.Helper()
	from := make(chan net.Addr, size)
	srv, addr := startServer(t, opts, fromChan(from))
	return srv, addr, from
}

// TestLoginBucketPerSource checks the login bucket at its defaults (10
// refused logins, then one per 10 s): refused logins from an IPv4 address
// or from anywhere in an IPv6 /64 spend one bucket, and the next login
// from there, even with the right password, is refused unchecked (5.0
// 0x9F, 3.1.1 3) after a wait; a success gives back only its own
// attempt; another /64 has a bucket of its own.
func TestLoginBucketPerSource(t *testing.T) {
	reg := prometheus.NewRegistry()
	pw := writePasswords(t, t.TempDir(), "alice")
	srv, addr, from := fromEach(t, mqttd.Options{Registerer: reg,
		Auth: mqttd.Auth{AuthConfig: mqttd.AuthConfig{PasswordFile: pw}}}, 1)
	try := func(src string, v packets.Version, cp *packets.Connect, want packets.ReasonCode) {
		t.Helper()
		from <- &net.TCPAddr{IP: net.ParseIP(src), Port: 40000}
		if want == 0 {
			connectAs(t, addr, v, cp).nc.Close()
			return
		}
		expectRefused(t, addr, v, cp, want)
	}
	anon := as("anon", "", "")
	for i := range mqttd.DefaultLoginBurst {
		try("192.0.2.1", packets.V5, as("alice", "alice", "pw-alice"), 0) // gives its attempt back
		try("192.0.2.1", packets.V5, anon, packets.NotAuthorized)
		try(fmt.Sprintf("2001:db8::%d", i+1), packets.V311, anon, packets.ConnRefusedNotAuthorized)
	}
	try("192.0.2.1", packets.V5, as("alice", "alice", "pw-alice"), packets.ConnectionRateExceeded)
	try("2001:db8::ff", packets.V311, anon, packets.ConnRefusedServerUnavailable)
	try("2001:db8:0:1::1", packets.V5, as("alice", "alice", "pw-alice"), 0)
	try("192.0.2.2", packets.V5, anon, packets.NotAuthorized)
	if got := srv.Stats().LoginsRateLimited; got != 2 {
		t.Errorf("%d logins rate-limited, want 2", got)
	}
	if got := metricValue(t, reg, "mqttd_logins_rate_limited_total"); got != 2 {
		t.Errorf("mqttd_logins_rate_limited_total %v, want 2", got)
	}
	if got := metricValue(t, reg, "mqttd_login_sources"); got != 4 {
		t.Errorf("mqttd_login_sources %v, want 4", got)
	}
}

// connectAllFrom opens n 5.0 connections from ip (through fromEach's
// listener), sends each a CONNECT as alice with password before reading
// any answer, and counts the CONNACKs' codes.
func connectAllFrom(t *testing.T, addr string, from chan<- net.Addr, ip string, n int, password string) map[packets.ReasonCode]int {
	t.Helper()
	rcs := make([]*rawConn, n)
	for i := range rcs {
		from <- &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000 + i}
		rcs[i] = dialRaw(t, addr)
		rcs[i].v = packets.V5
	}
	for i, rc := range rcs {
		rc.send(&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V5, ClientID: fmt.Sprint("device-", i), CleanStart: true,
			UsernameFlag: true, Username: "alice", PasswordFlag: true, Password: []byte(password)})
	}
	codes := map[packets.ReasonCode]int{}
	for _, rc := range rcs {
		if ack, ok := rc.read().(*packets.Connack); ok {
			codes[ack.ReasonCode]++
		}
	}
	return codes
}

// TestLoginBucketParallel checks that parallel connections from one
// address get no more password checks than the bucket holds: of 40
// wrong passwords sent at once, at most 10 are checked (0x86); the others
// are refused unchecked (0x9F).
func TestLoginBucketParallel(t *testing.T) {
	const n = 40
	pw := writePasswords(t, t.TempDir(), "alice")
	srv, addr, from := fromEach(t, mqttd.Options{Auth: mqttd.Auth{AuthConfig: mqttd.AuthConfig{PasswordFile: pw}}}, n)
	codes := connectAllFrom(t, addr, from, "192.0.2.7", n, "wrong")
	checked, limited := codes[packets.BadUsernameOrPassword], codes[packets.ConnectionRateExceeded]
	if checked > mqttd.DefaultLoginBurst || checked+limited != n {
		t.Errorf("CONNACKs %v: %d checked, %d rate-limited; want at most %d checked, the rest rate-limited",
			codes, checked, limited, mqttd.DefaultLoginBurst)
	}
	if got := srv.Stats().LoginsRateLimited; got != uint64(limited) {
		t.Errorf("%d logins rate-limited counted, %d seen", got, limited)
	}
}

// gatedAuthenticator holds the logins it checks until release is closed,
// as a login backend across a network would for a while, and closes full
// once it holds a bucket's worth of them.
type gatedAuthenticator struct {
	held          atomic.Int32
	full, release chan struct{}
}

func (a *gatedAuthenticator) Authenticate(auth.ClientInfo, []byte) error {
	if a.held.Add(1) == mqttd.DefaultLoginBurst {
		close(a.full)
	}
	<-a.release
	return nil
}

// TestLoginBucketParallelGood checks that good logins are not refused
// for their number: 40 devices behind one address (a NAT) logging in at
// once, with a backend that holds the first ten until they are all under
// way, hold the bucket's tokens only while they are checked, and the
// others get them as those succeed.
func TestLoginBucketParallelGood(t *testing.T) {
	const n = 40
	backend := &gatedAuthenticator{full: make(chan struct{}), release: make(chan struct{})}
	srv, addr, from := fromEach(t, mqttd.Options{Authenticator: backend}, n)
	// Released once it holds ten and the broker has read every CONNECT,
	// so that the others find the bucket empty; the test's goroutine is
	// reading the CONNACKs meanwhile.
	connects := uint64(0)
	for i := range n {
		b, _ := (&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V5, ClientID: fmt.Sprint("device-", i), CleanStart: true,
			UsernameFlag: true, Username: "alice", PasswordFlag: true, Password: []byte("pw")}).Append(nil, packets.V5)
		connects += uint64(len(b))
	}
	base := srv.Stats().BytesReceived
	go func() {
		defer close(backend.release)
		deadline := time.After(10 * time.Second)
		select {
		case <-backend.full:
		case <-deadline:
			return
		}
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for srv.Stats().BytesReceived-base < connects {
			select {
			case <-tick.C:
			case <-deadline:
				return
			}
		}
	}()
	codes := connectAllFrom(t, addr, from, "192.0.2.8", n, "pw")
	if codes[packets.Success] != n {
		t.Errorf("CONNACKs %v for %d good logins from one address, want all accepted", codes, n)
	}
	if got := srv.Stats().LoginsRateLimited; got != 0 {
		t.Errorf("%d logins rate-limited, want none", got)
	}
}

// TestSCRAMFailuresAreLoginFailures checks that a refused SCRAM-SHA-256
// exchange counts as a refused login (mqttd_auth_failures_total, the
// "login refused" line) and draws on the source's bucket like a wrong
// password: after the burst, even the right password is refused
// unchecked (0x9F) before any challenge.
func TestSCRAMFailuresAreLoginFailures(t *testing.T) {
	logs := &logLines{}
	cred, err := auth.NewSCRAMCredentials("wonderland", nil, 4096)
	if err != nil {
		t.Fatal(err)
	}
	lookup := func(u string) (auth.SCRAMCredentials, bool) { return cred, u == "alice" }
	srv, addr, from := fromEach(t, mqttd.Options{Logger: zerolog.New(logs).Level(zerolog.InfoLevel),
		AuthMethods: []auth.Method{&auth.SCRAM{Lookup: lookup}}}, 1)
	src := &net.TCPAddr{IP: net.ParseIP("192.0.2.9"), Port: 40000}
	from <- src
	rc, ack := scramConnect(t, addr, &scramClient{user: "alice", password: "wonderland", nonce: "ok"})
	if ack.ReasonCode != 0 {
		t.Fatalf("right password: CONNACK %#x", ack.ReasonCode)
	}
	rc.nc.Close()
	for i := range mqttd.DefaultLoginBurst {
		from <- src
		rc, ack := scramConnect(t, addr, &scramClient{user: "alice", password: "wrong", nonce: fmt.Sprint("n", i)})
		if ack.ReasonCode != packets.BadUsernameOrPassword {
			t.Fatalf("wrong password: CONNACK %#x, want 0x86", ack.ReasonCode)
		}
		rc.expectClosed()
	}
	if st := srv.Stats(); st.AuthFailures != mqttd.DefaultLoginBurst {
		t.Errorf("%d auth failures, want %d", st.AuthFailures, mqttd.DefaultLoginBurst)
	}
	if got := logs.find("login refused (at most 20 lines every 10 s; mqttd_auth_failures_total counts them all)"); len(got) != mqttd.DefaultLoginBurst {
		t.Errorf("%d login refused lines, want %d", len(got), mqttd.DefaultLoginBurst)
	}
	from <- src
	cp := &packets.Connect{ClientID: "scram-alice", CleanStart: true}
	cp.Properties.AuthMethod, cp.Properties.AuthData = auth.SCRAMName, (&scramClient{user: "alice", nonce: "late"}).clientFirst()
	cp.Properties.Set(packets.PropAuthMethod)
	cp.Properties.Set(packets.PropAuthData)
	expectRefused(t, addr, packets.V5, cp, packets.ConnectionRateExceeded)
}

// TestLegacyEntriesWarned checks that a password file with $6$ entries
// (from an old Mosquitto) is warned about at start, naming the users.
func TestLegacyEntriesWarned(t *testing.T) {
	logs := &logLines{}
	pw := writePasswords(t, t.TempDir(), "modern")
	f, err := os.OpenFile(pw, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("old:$6$6cJdP4XOnU5ANGbe$7HJP/Nj6SQU/uM5mIhGGuoq80Sco+Nzbi/WbY0EgAxHPR2T1F1fyuLzj4FlHaebZvWQxYIqX+B09CrS2mbM4Mg==\n")
	f.Close()
	startServer(t, mqttd.Options{Logger: zerolog.New(logs).Level(zerolog.InfoLevel),
		Auth: mqttd.Auth{AuthConfig: mqttd.AuthConfig{PasswordFile: pw}}})
	var found bool
	for _, l := range allLines(logs) {
		if l["level"] == "warn" && strings.Contains(fmt.Sprint(l["message"]), "$6$ entries") {
			found = fmt.Sprint(l["users"]) == "[old]" && l["count"] == float64(1)
		}
	}
	if !found {
		t.Errorf("no warning naming the $6$ user")
	}
}

// allLines returns every JSON line logged.
func allLines(l *logLines) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(l.buf.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// TestClientIDPrefix checks auth.client_id_prefix "%u:": a user cannot
// create a session under another user's device id (3.1.1 CONNACK 2, 5.0
// 0x85), so the owner is not locked out of it; the owner may use it; an
// id the broker assigns gets the user's prefix.
func TestClientIDPrefix(t *testing.T) {
	pw := writePasswords(t, t.TempDir(), "alice", "bob")
	_, addr := startServer(t, mqttd.Options{Auth: mqttd.Auth{ClientIDPrefix: "%u:",
		AuthConfig: mqttd.AuthConfig{PasswordFile: pw}}})
	squat := as("alice:meter", "bob", "pw-bob")
	squat.CleanStart = false
	expectRefused(t, addr, packets.V311, squat, packets.ConnRefusedIdentifier)
	expectRefused(t, addr, packets.V5, squat, packets.ClientIDNotValid)
	expectRefused(t, addr, packets.V5, as("meter", "alice", "pw-alice"), packets.ClientIDNotValid)

	owner := as("alice:meter", "alice", "pw-alice")
	owner.CleanStart = false
	connectAs(t, addr, packets.V311, owner).ping()

	rc, ack := connectReply(t, addr, packets.V5, as("", "bob", "pw-bob"))
	if ack.ReasonCode != 0 || !strings.HasPrefix(ack.Properties.AssignedClientID, "bob:") {
		t.Errorf("CONNACK %#x with assigned id %q, want one starting bob:", ack.ReasonCode, ack.Properties.AssignedClientID)
	}
	rc.ping()
}

// TestCRLFileSettings checks the validation of listeners' crl_file: only
// for tls and wss listeners, and only with the client CAs that signed it.
func TestCRLFileSettings(t *testing.T) {
	for _, tc := range []struct {
		lc   mqttd.ListenerConfig
		want string
	}{
		{mqttd.ListenerConfig{Type: "tcp", Address: "127.0.0.1:0", CRLFile: "x.crl"}, "crl_file: only for tls and wss listeners"},
		{mqttd.ListenerConfig{Type: "tls", Address: "127.0.0.1:0", CertFile: "c", KeyFile: "k", CRLFile: "x.crl"},
			"client_ca_file: missing: crl_file needs the CA that signed it"},
	} {
		err := mqttd.Options{Listeners: []mqttd.ListenerConfig{tc.lc}}.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.lc, err, tc.want)
		}
	}
}

// TestChangedPasswordRevokes checks that a reload after a user's password
// was changed ends the connections made with the old one (5.0 DISCONNECT
// 0x87) and refuses their wills, while a reload that leaves the entry as
// it was ends nothing; the new password then logs in.
func TestChangedPasswordRevokes(t *testing.T) {
	pw := writePasswords(t, t.TempDir(), "alice", "bob")
	srv, addr := startServer(t, mqttd.Options{Auth: mqttd.Auth{AuthConfig: mqttd.AuthConfig{PasswordFile: pw}}})
	cp := as("alice", "alice", "pw-alice")
	setWill(cp, "will/alice")
	alice := connectAs(t, addr, packets.V5, cp)
	bob := connectAs(t, addr, packets.V5, as("bob", "bob", "pw-bob"))
	if err := srv.Reload(); err != nil {
		t.Fatal(err)
	}
	alice.ping() // the same file: nothing ended

	if err := passwd.Set(pw, "alice", []byte("new secret"), false); err != nil {
		t.Fatal(err)
	}
	if err := srv.Reload(); err != nil {
		t.Fatal(err)
	}
	if d, ok := alice.read().(*packets.Disconnect); !ok || d.ReasonCode != packets.NotAuthorized {
		t.Errorf("client of the old password got %+v, want DISCONNECT 0x87", d)
	}
	alice.expectClosed()
	willsSettled(t, srv, 1)
	bob.ping()
	if st := srv.Stats(); st.ClientsRevoked != 1 || st.WillsRefused != 1 {
		t.Errorf("%d revoked, %d wills refused; want 1 and 1", st.ClientsRevoked, st.WillsRefused)
	}
	connectAs(t, addr, packets.V5, as("alice", "alice", "new secret")).ping()
}
