package main

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"mqttd"
	"mqttd/auth/passwd"
	"mqttd/internal/testutil"
	"mqttd/listeners"
)

// loginFiles writes a password file with alice (an admin in the ACL
// file written beside it) and bob (not one), and returns both paths.
func loginFiles(t *testing.T) (passwdFile, aclFile string) {
	t.Helper()
	dir := t.TempDir()
	passwdFile, aclFile = filepath.Join(dir, "passwd"), filepath.Join(dir, "acl")
	if err := passwd.Set(passwdFile, "alice", []byte("alice-pw"), true); err != nil {
		t.Fatal(err)
	}
	if err := passwd.Set(passwdFile, "bob", []byte("bob-pw"), false); err != nil {
		t.Fatal(err)
	}
	acl := "user alice\nadmin\ntopic alice/#\nuser bob\ntopic bob/#\n"
	if err := os.WriteFile(aclFile, []byte(acl), 0o600); err != nil {
		t.Fatal(err)
	}
	return passwdFile, aclFile
}

// testLogins loads the API's logins from loginFiles' files.
func testLogins(t *testing.T, reg prometheus.Registerer, log zerolog.Logger) *apiLogins {
	t.Helper()
	pf, af := loginFiles(t)
	l, err := newAPILogins(mqttd.AuthConfig{PasswordFile: pf, ACLFile: af}, reg, log)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// request sends method url with client and the headers, and returns the
// status, the WWW-Authenticate headers and the body.
func request(t *testing.T, client *http.Client, method, url string, header ...string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, strings.Join(resp.Header.Values("WWW-Authenticate"), "; "), string(b)
}

func basic(user, password string) string {
	r, _ := http.NewRequest("GET", "/", nil)
	r.SetBasicAuth(user, password)
	return r.Header.Get("Authorization")
}

// TestAPILogins: over TLS, an admin of the ACL file is let in with its
// password (reads, and actions with the action header, logged with its
// name), a user who is not an admin gets 403, a wrong password or an
// unknown user 401 with a Basic challenge (counted, logged and the next
// one from the address slowed); over plain
// HTTP on an address that is not loopback (exposed, here served on
// 127.0.0.1 as the tests' only address) a password is refused without a
// check, and on loopback it is taken.
func TestAPILogins(t *testing.T) {
	b := startBroker(t, mqttd.Options{}, "main")
	var log testutil.LockedBuffer
	logins := testLogins(t, b.reg, zerolog.New(&log))
	o := httpOptions{exposed: true, logins: logins, log: zerolog.New(&log), reload: func() error { return nil }}
	hs := httptest.NewUnstartedServer(newHTTPHandler(b.srv, b.reg, o))
	hs.StartTLS()
	t.Cleanup(hs.Close)
	client := hs.Client()
	api := hs.URL + "/api/v1"
	alice, bob := basic("alice", "alice-pw"), basic("bob", "bob-pw")

	for _, tc := range []struct {
		name   string
		method string
		header []string
		code   int
		says   string
	}{
		{"admin reads", "GET", []string{"Authorization", alice}, 200, ""},
		{"admin acts", "POST", []string{"Authorization", alice, actionHeader, "1"}, 200, "reloaded"},
		{"admin acts without the action header", "POST", []string{"Authorization", alice}, 403, actionHeader},
		{"not an admin", "GET", []string{"Authorization", bob}, 403, "not an admin"},
		{"not an admin acts", "POST", []string{"Authorization", bob, actionHeader, "1"}, 403, "not an admin"},
		{"wrong password", "GET", []string{"Authorization", basic("alice", "bob-pw")}, 401, "wrong user name or password"},
		{"unknown user", "GET", []string{"Authorization", basic("mallory", "x")}, 401, "wrong user name or password"},
		{"nothing", "GET", nil, 401, "admin"},
	} {
		path := "/overview"
		if tc.method == "POST" {
			path = "/reload"
		}
		code, challenge, body := request(t, client, tc.method, api+path, tc.header...)
		if code != tc.code || !strings.Contains(body, tc.says) {
			t.Errorf("%s: %d %s, want %d saying %q", tc.name, code, body, tc.code, tc.says)
		}
		if code == 401 && !strings.Contains(challenge, `Basic realm="mqttd"`) {
			t.Errorf("%s: 401 with WWW-Authenticate %q, want a Basic challenge", tc.name, challenge)
		}
	}
	if line := log.String(); !regexp.MustCompile(`"by":"alice"[^\n]*API: reloaded the configuration`).MatchString(line) {
		t.Errorf("the action's log line does not name alice:\n%s", line)
	}
	if !strings.Contains(log.String(), `"username":"alice"`) || strings.Contains(log.String(), "bob-pw") {
		t.Errorf("the refused login's log line (with the user, without the password):\n%s", log.String())
	}
	if st := logins.passwd.Stats(); st.Delayed == 0 || st.Failed != 2 {
		t.Errorf("password file stats %+v: want the login after a failure slowed (Delayed), 2 failed", st)
	}
	if code, _, body := request(t, client, "GET", hs.URL+"/metrics"); code != 200 ||
		!strings.Contains(body, "mqttd_api_login_failures_total 2") {
		t.Errorf("metrics: %d, want mqttd_api_login_failures_total 2 in\n%s", code, body)
	}

	// With a token set too, a password (which a browser sends by itself)
	// is no proof against CSRF: an action still needs the header.
	withToken := o
	withToken.token = "s3cret-T0ken"
	hs2 := httptest.NewUnstartedServer(newHTTPHandler(b.srv, prometheus.NewRegistry(), withToken))
	hs2.StartTLS()
	t.Cleanup(hs2.Close)
	if code, _, body := request(t, hs2.Client(), "POST", hs2.URL+"/api/v1/reload", "Authorization", alice); code != 403 ||
		!strings.Contains(body, actionHeader) {
		t.Errorf("a password with a token set, no action header: %d %s, want 403", code, body)
	}
	if code, challenge, _ := request(t, hs2.Client(), "GET", hs2.URL+"/api/v1/overview"); code != 401 ||
		!strings.Contains(challenge, "Bearer") || !strings.Contains(challenge, "Basic") {
		t.Errorf("nothing, with a token set: %d %q, want 401 asking for either", code, challenge)
	}

	// Plain HTTP: refused on an exposed address, taken on loopback.
	plain := b.serve(t, o)
	if code, _, body := request(t, http.DefaultClient, "GET", plain+"/api/v1/overview", "Authorization", alice); code != 403 ||
		!strings.Contains(body, "plain HTTP") {
		t.Errorf("a password over plain HTTP, exposed: %d %s, want 403", code, body)
	}
	if code, challenge, _ := request(t, http.DefaultClient, "GET", plain+"/api/v1/overview"); code != 403 || challenge != "" {
		t.Errorf("nothing over plain HTTP, exposed: %d %q, want 403 and no challenge (no password asked for in clear)", code, challenge)
	}
	o.exposed = false
	local := b.serve(t, o)
	if code, _, body := request(t, http.DefaultClient, "POST", local+"/api/v1/reload", "Authorization", alice, actionHeader, "1"); code != 200 {
		t.Errorf("a password over plain HTTP on loopback: %d %s, want 200", code, body)
	}
	if code, _, body := request(t, http.DefaultClient, "GET", local+"/api/v1/overview", "Authorization", bob); code != 403 {
		t.Errorf("not an admin on loopback: %d %s, want 403", code, body)
	}
}

// TestBasicAllowed: the decision whether a password may be taken, from
// the address bound (httpOptionsFor) and the connection's TLS: never in
// clear on an address that is not loopback.
func TestBasicAllowed(t *testing.T) {
	cs := &tls.ConnectionState{}
	for _, tc := range []struct {
		addr net.Addr
		tls  *tls.ConnectionState
		want bool
	}{
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, nil, true},
		{&net.TCPAddr{IP: net.IPv6loopback}, nil, true},
		{&net.TCPAddr{IP: net.IPv4(192, 168, 1, 10)}, nil, false},
		{&net.TCPAddr{IP: net.IPv4zero}, nil, false},
		{&net.TCPAddr{IP: net.IPv6unspecified}, nil, false},
		{&net.TCPAddr{IP: net.IPv4(192, 168, 1, 10)}, cs, true},
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, cs, true},
	} {
		o, _ := httpOptionsFor(tc.addr, metricsConfig{}, nil)
		if got := basicAllowed(o.exposed, tc.tls); got != tc.want {
			t.Errorf("%s, TLS %v: %v, want %v", tc.addr, tc.tls != nil, got, tc.want)
		}
	}
}

// TestHTTPOptionsForLogins: on an address that is not loopback, without a
// token, the start warns unless admins can log in: a password file and an
// ACL file naming an admin, over TLS.
func TestHTTPOptionsForLogins(t *testing.T) {
	lan := &net.TCPAddr{IP: net.IPv4(192, 168, 1, 10), Port: 9183}
	logins := testLogins(t, nil, zerolog.Nop())
	pf, af := loginFiles(t)
	if err := os.WriteFile(af, []byte("user alice\ntopic a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	noAdmins, err := newAPILogins(mqttd.AuthConfig{PasswordFile: pf, ACLFile: af}, nil, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		f    *httpFiles
		says string
	}{
		{"nothing", nil, "neither metrics.token nor auth.password_file"},
		{"logins over plain HTTP", &httpFiles{logins: logins}, "metrics.tls"},
		{"no admins", &httpFiles{logins: noAdmins, tls: serverTLS(t)}, "nobody the admin role"},
		{"admins over TLS", &httpFiles{logins: logins, tls: serverTLS(t)}, ""},
	} {
		o, warning := httpOptionsFor(lan, metricsConfig{}, tc.f)
		if !o.exposed || !strings.Contains(warning, tc.says) || (tc.says == "") != (warning == "") {
			t.Errorf("%s: warning %q, want one saying %q", tc.name, warning, tc.says)
		}
	}
}

// serverTLS loads a certificate of a test CA for 127.0.0.1.
func serverTLS(t *testing.T) *listeners.ServerTLS {
	t.Helper()
	ca := testutil.NewCA(t, "test CA")
	cert, key := ca.Issue(t, "server", time.Now().Add(time.Hour), true)
	st, err := listeners.NewServerTLS(listeners.TLSConfig{CertFile: cert, KeyFile: key})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestCommandHTTPS runs the command with metrics.tls, a password file and
// an ACL file with an admin: the banner says https, HTTPS is served and
// plain HTTP is not; mqttd ctl reaches it with --api-ca (MQTTD_API_CA)
// and not without, as alice (an admin, her action logged with her name)
// from MQTTD_API_PASSWORD or --api-password-file, and not as bob (403)
// or with a wrong password (401); SIGHUP reads the certificate and the
// ACL file's admins again.
func TestCommandHTTPS(t *testing.T) {
	ca := testutil.NewCA(t, "test CA")
	cert, key := ca.Issue(t, "server", time.Now().Add(time.Hour), true)
	pf, af := loginFiles(t)
	sig := make(chan os.Signal, 1)
	var out syncBuffer
	code := make(chan int, 1)
	args := []string{"--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--metrics-tls-cert", cert, "--password-file", pf, "--acl-file", af, "--log-format", "json"}
	env := map[string]string{"MQTTD_METRICS_TLS_KEY": key}
	go func() { code <- run(args, func(k string) string { return env[k] }, io.Discard, &out, sig) }()
	defer func() {
		sig <- syscall.SIGTERM
		select {
		case c := <-code:
			if c != 0 {
				t.Errorf("exit code %d:\n%s", c, out.String())
			}
		case <-time.After(15 * time.Second):
			t.Error("mqttd did not stop within 15 s of SIGTERM")
		}
	}()
	waitOutput(t, &out, "dashboard on ")
	m := regexp.MustCompile(`metrics on https://(127\.0\.0\.1:\d+)/metrics`).FindStringSubmatch(out.String())
	if m == nil || !strings.Contains(out.String(), "dashboard on https://"+m[1]+"/") {
		t.Fatalf("no https metrics and dashboard address in:\n%s", out.String())
	}
	addr := m[1]
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	if code, _, body := request(t, client, "GET", "https://"+addr+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("https /healthz: %d %q", code, body)
	}
	// The release leaves net/http's HTTP/2 out (hack/release): a client
	// offering h2 must be answered in HTTP/1.1.
	if conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool(), NextProtos: []string{"h2", "http/1.1"}}); err != nil {
		t.Errorf("TLS with ALPN h2: %v", err)
	} else {
		if p := conn.ConnectionState().NegotiatedProtocol; p == "h2" {
			t.Errorf("the metrics address negotiated %q, want HTTP/1.1", p)
		}
		conn.Close()
	}
	if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 || string(b) == "ok\n" {
			t.Errorf("plain http /healthz served: %d %q", resp.StatusCode, b)
		}
	}

	api := "https://" + addr
	as := map[string]string{"MQTTD_API": api, "MQTTD_API_CA": ca.File, "MQTTD_API_USER": "alice", "MQTTD_API_PASSWORD": "alice-pw"}
	ctlOK(t, as, "overview")
	ctlOK(t, as, "reload")
	waitOutput(t, &out, `"by":"alice"`)
	if !regexp.MustCompile(`"by":"alice"[^\n]*API: reloaded the configuration`).MatchString(out.String()) {
		t.Errorf("the reload's log line does not name alice:\n%s", out.String())
	}
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte("alice-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctlOK(t, map[string]string{"MQTTD_API": api}, "--api-ca", ca.File, "--user", "alice", "--api-password-file", pwFile, "overview")
	for _, tc := range []struct {
		name string
		env  map[string]string
		says string
	}{
		{"no CA", map[string]string{"MQTTD_API": api, "MQTTD_API_USER": "alice", "MQTTD_API_PASSWORD": "alice-pw"}, "certificate"},
		{"not an admin", map[string]string{"MQTTD_API": api, "MQTTD_API_CA": ca.File, "MQTTD_API_USER": "bob", "MQTTD_API_PASSWORD": "bob-pw"}, "403"},
		{"wrong password", map[string]string{"MQTTD_API": api, "MQTTD_API_CA": ca.File, "MQTTD_API_USER": "alice", "MQTTD_API_PASSWORD": "bob-pw"}, "401"},
	} {
		if c, _, errs := ctlRun(t, tc.env, "overview"); c != 1 || !strings.Contains(errs, tc.says) {
			t.Errorf("%s: status %d, %q, want 1 saying %q", tc.name, c, errs, tc.says)
		}
	}
	if c, _, errs := ctlRun(t, map[string]string{"MQTTD_API": api, "MQTTD_API_USER": "alice"}, "overview"); c != 2 ||
		!strings.Contains(errs, "MQTTD_API_PASSWORD") {
		t.Errorf("a user without a password: status %d, %q, want 2", c, errs)
	}

	serial := func() string {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool()})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	before := serial()
	ca.Issue(t, "server", time.Now().Add(2*time.Hour), true) // over the same files
	if err := os.WriteFile(af, []byte("user bob\nadmin\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sig <- syscall.SIGHUP
	waitFor(t, "the new certificate served", func() bool { return serial() != before })
	bob := map[string]string{"MQTTD_API": api, "MQTTD_API_CA": ca.File, "MQTTD_API_USER": "bob", "MQTTD_API_PASSWORD": "bob-pw"}
	waitFor(t, "bob an admin after the ACL file's reload", func() bool { c, _, _ := ctlRun(t, bob, "overview"); return c == 0 })
}
