package passwd_test

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"mqttd/auth"
	"mqttd/auth/passwd"
)

// mosquittoPasswd runs the real mosquitto_passwd, skipping the test when
// it is not installed.
func mosquittoPasswd(t *testing.T, args ...string) {
	t.Helper()
	bin, err := exec.LookPath("mosquitto_passwd")
	if err != nil {
		t.Skip("mosquitto_passwd not installed")
	}
	if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_passwd %q: %v\n%s", args, err, out)
	}
}

// Passwords worth trying: blanks, a colon, a dollar, non-ASCII.
var passwords = map[string]string{
	"alice": "secret",
	"bob":   "p:w $d",
	"chloé": "mot de passe é",
}

func TestReadsMosquittoPasswdFiles(t *testing.T) {
	for _, algo := range []string{"sha512-pbkdf2", "sha512"} {
		t.Run(algo, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "passwd")
			create := "-c"
			for user, pw := range passwords {
				args := []string{"-H", algo, "-b", path, user, pw}
				if create != "" {
					args = append([]string{create}, args...)
					create = ""
				}
				mosquittoPasswd(t, args...)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			prefix := map[string]string{"sha512-pbkdf2": ":$7$101$", "sha512": ":$6$"}[algo]
			if !strings.Contains(string(data), prefix) {
				t.Fatalf("mosquitto_passwd wrote no %q entry:\n%s", prefix, data)
			}
			users, err := passwd.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(users) != len(passwords) {
				t.Fatalf("%d users, want %d", len(users), len(passwords))
			}
			for user, pw := range passwords {
				if !users[user].Verify([]byte(pw)) {
					t.Errorf("%s: right password refused", user)
				}
				if users[user].Verify([]byte(pw + "x")) {
					t.Errorf("%s: wrong password accepted", user)
				}
			}
		})
	}
}

func TestMosquittoPasswdUpdatesOurFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "passwd")
	if err := passwd.Set(path, "alice", []byte("one"), true); err != nil {
		t.Fatal(err)
	}
	if err := passwd.Set(path, "bob", []byte("two"), false); err != nil {
		t.Fatal(err)
	}
	// mosquitto_passwd reads our entries to rewrite the file: it must keep
	// them and add its own.
	mosquittoPasswd(t, "-b", path, "carol", "three")
	mosquittoPasswd(t, "-D", path, "alice")
	users, err := passwd.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := users["alice"]; ok || len(users) != 2 {
		t.Fatalf("users after mosquitto_passwd: %v", users)
	}
	if !users["bob"].Verify([]byte("two")) || !users["carol"].Verify([]byte("three")) {
		t.Fatal("passwords lost in mosquitto_passwd's rewrite")
	}
}

func TestParseErrorsNameFileAndLine(t *testing.T) {
	good := "alice:$7$101$6cJdP4XOnU5ANGbe$7HJP/Nj6SQU/uM5mIhGGuoq80Sco+Nzbi/WbY0EgAxHPR2T1F1fyuLzj4FlHaebZvWQxYIqX+B09CrS2mbM4Mg=="
	for _, tc := range []struct{ name, line, want string }{
		{"no colon", "alice", "no ':'"},
		{"plain text password", "alice:secret", "plain-text"},
		{"empty user", ":$6$x$y", "empty user"},
		{"bad iterations", "alice:$7$0$6cJdP4XOnU5ANGbe$" + strings.Repeat("A", 86) + "==", "iteration"},
		{"huge iterations", "alice:$7$999999999$6cJdP4XOnU5ANGbe$" + strings.Repeat("A", 86) + "==", "iteration"},
		{"short salt", "alice:$7$101$AAAA$" + strings.Repeat("A", 86) + "==", "salt"},
		{"short sum", "alice:$7$101$6cJdP4XOnU5ANGbe$AAAA", "sum"},
		{"not base64", "alice:$6$6cJdP4XOnU5ANGbe$" + strings.Repeat("!", 88), "sum"},
		{"missing sum", "alice:$6$6cJdP4XOnU5ANGbe", "salt and sum"},
		{"duplicate user", good, "already on line 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := "# users\n" + good + "\n\n" + tc.line + "\n"
			_, err := passwd.Parse(strings.NewReader(text), "pw.txt")
			if err == nil {
				t.Fatalf("%q parsed", tc.line)
			}
			if !strings.Contains(err.Error(), "pw.txt:4:") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not name pw.txt:4 and %q", err, tc.want)
			}
		})
	}
}

func TestSetAndDeleteKeepOtherLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "passwd")
	for _, u := range []string{"a", "b", "c"} {
		if err := passwd.Set(path, u, []byte(u), u == "a"); err != nil {
			t.Fatal(err)
		}
	}
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	lines = append([]string{"# kept"}, lines...)
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := passwd.Set(path, "b", []byte("new"), false); err != nil {
		t.Fatal(err)
	}
	if err := passwd.Delete(path, "a"); err != nil {
		t.Fatal(err)
	}
	if err := passwd.Delete(path, "zed"); err == nil {
		t.Fatal("deleting an absent user succeeded")
	}
	data, _ = os.ReadFile(path)
	got := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(got) != 3 || got[0] != "# kept" || !strings.HasPrefix(got[1], "b:$7$101$") || got[2] != lines[3] {
		t.Fatalf("file after updates:\n%s", data)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v, want the file's own 0640", fi.Mode().Perm())
	}
	users, err := passwd.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !users["b"].Verify([]byte("new")) || !users["c"].Verify([]byte("c")) {
		t.Fatal("passwords wrong after updates")
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*"))
	if len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
	for _, bad := range []string{"", "a:b", "#a", " a", "a\nb"} {
		if err := passwd.Set(path, bad, []byte("x"), false); err == nil {
			t.Errorf("user name %q written", bad)
		}
	}
}

// writeFile writes a password file of user:password pairs with Set.
func writeFile(t *testing.T, pairs ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "passwd")
	for i := 0; i < len(pairs); i += 2 {
		if err := passwd.Set(path, pairs[i], []byte(pairs[i+1]), i == 0); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

func client(user, remote string) auth.ClientInfo {
	return auth.ClientInfo{ClientID: "c", Username: user, Remote: &net.TCPAddr{IP: net.ParseIP(remote), Port: 40000}}
}

func TestAuthenticate(t *testing.T) {
	path := writeFile(t, "alice", "secret")
	var refused []error
	a, err := passwd.New(path, passwd.Options{OnFailure: func(_ auth.ClientInfo, err error) { refused = append(refused, err) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Authenticate(client("alice", "10.0.0.1"), []byte("secret")); err != nil {
		t.Fatalf("right password: %v", err)
	}
	if err := a.Authenticate(client("alice", "10.0.0.2"), []byte("wrong")); !errors.Is(err, auth.ErrBadCredentials) {
		t.Fatalf("wrong password: %v", err)
	}
	if err := a.Authenticate(client("mallory", "10.0.0.3"), []byte("secret")); !errors.Is(err, auth.ErrBadCredentials) {
		t.Fatalf("unknown user: %v", err)
	}
	if err := a.Authenticate(client("", "10.0.0.4"), nil); !errors.Is(err, passwd.ErrAnonymous) || !errors.Is(err, auth.ErrNotAuthorized) {
		t.Fatalf("anonymous: %v", err)
	}
	want := passwd.Stats{Accepted: 1, Failed: 2, UnknownUser: 1, Anonymous: 1}
	if s := a.Stats(); s != want {
		t.Fatalf("stats %+v, want %+v", s, want)
	}
	if len(refused) != 2 {
		t.Fatalf("OnFailure told of %d refusals, want 2", len(refused))
	}
}

func TestReloadKeepsOldUsersOnError(t *testing.T) {
	path := writeFile(t, "alice", "one")
	a, err := passwd.New(path, passwd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := passwd.Set(path, "bob", []byte("two"), true); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if a.Authenticate(client("bob", "10.0.0.1"), []byte("two")) != nil || a.Authenticate(client("alice", "10.0.0.1"), []byte("one")) == nil {
		t.Fatal("reload did not swap the users")
	}
	if err := os.WriteFile(path, []byte("bob:plain\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err == nil || !strings.Contains(err.Error(), path+":1:") {
		t.Fatalf("reload of a broken file: %v", err)
	}
	if a.Authenticate(client("bob", "10.0.0.1"), []byte("two")) != nil {
		t.Fatal("a failed reload dropped the old users")
	}
	if a.Authenticate(client("bob", "10.0.0.1"), []byte("plain")) == nil {
		t.Fatal("a failed reload let the broken line in")
	}
	if _, err := passwd.New(path, passwd.Options{}); err == nil {
		t.Fatal("New accepted a broken file")
	}
}

func TestFailuresSlowDownTheAddress(t *testing.T) {
	const step = 30 * time.Millisecond
	path := writeFile(t, "alice", "secret")
	a, err := passwd.New(path, passwd.Options{FailureDelay: step, MaxFailureDelay: 2 * step})
	if err != nil {
		t.Fatal(err)
	}
	timed := func(remote, pw string) time.Duration {
		t.Helper()
		start := time.Now()
		a.Authenticate(client("alice", remote), []byte(pw))
		return time.Since(start)
	}
	timed("10.0.0.1", "wrong")
	if d := timed("10.0.0.1", "wrong"); d < step {
		t.Fatalf("second failure answered in %v, want at least %v", d, step)
	}
	if d := timed("10.0.0.1", "wrong"); d < 2*step {
		t.Fatalf("third failure answered in %v, want at least %v", d, 2*step)
	}
	// The cap holds: the fourth waits 2×step, not 4×step. Only a lower
	// bound is checked; an upper one would fail on a loaded machine.
	if d := timed("10.0.0.1", "secret"); d < 2*step {
		t.Fatalf("fourth attempt answered in %v, want at least the cap %v", d, 2*step)
	}
	if s := a.Stats(); s.Delayed != 3 {
		t.Fatalf("%d delayed, want 3", s.Delayed)
	}
	// A success takes back one failure, not all: someone with an account
	// of their own cannot clear the address by logging in between
	// guesses. Another address was never slowed.
	timed("10.0.0.1", "secret")
	timed("10.0.0.2", "secret")
	if s := a.Stats(); s.Delayed != 4 {
		t.Fatalf("%d delayed after a success, want 4: one success does not clear three failures", s.Delayed)
	}
}

func TestMosquittoAcceptsOurFile(t *testing.T) {
	path := writeFile(t, "alice", "secret", "bob", "p:w $d")
	// mosquitto_passwd's own entry next to ours, to check the broker reads
	// the file as a whole.
	mosquittoPasswd(t, "-b", path, "carol", "three")
	port := runMosquitto(t, path)
	for _, tc := range []struct {
		user, pw string
		ok       bool
	}{
		{"alice", "secret", true},
		{"bob", "p:w $d", true},
		{"carol", "three", true},
		{"alice", "wrong", false},
		{"mallory", "secret", false},
	} {
		err := exec.Command("mosquitto_pub", "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-u", tc.user, "-P", tc.pw,
			"-t", "t", "-m", "m", "-q", "1").Run()
		if (err == nil) != tc.ok {
			t.Errorf("%s/%q: mosquitto_pub error %v, want accepted %v", tc.user, tc.pw, err, tc.ok)
		}
	}
}

// runMosquitto starts the real broker with the password file and
// anonymous clients refused; it returns its port.
func runMosquitto(t *testing.T, passwordFile string) int {
	t.Helper()
	bin, err := exec.LookPath("mosquitto")
	if err != nil {
		if bin, err = exec.LookPath("/usr/sbin/mosquitto"); err != nil {
			t.Skip("mosquitto not installed")
		}
	}
	if _, err := exec.LookPath("mosquitto_pub"); err != nil {
		t.Skip("mosquitto_pub not installed")
	}
	// Mosquitto needs a fixed port: take a free one and give it back.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	conf := filepath.Join(t.TempDir(), "mosquitto.conf")
	// Running as root, mosquitto would switch to its own user, which cannot
	// read the test's directory; "user" keeps it as whoever runs the test.
	text := "listener " + strconv.Itoa(port) + " 127.0.0.1\nallow_anonymous false\npassword_file " + passwordFile + "\n"
	if os.Geteuid() == 0 {
		text += "user root\n"
	}
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(filepath.Dir(conf), "mosquitto.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(bin, "-c", conf)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		c, err := net.Dial("tcp", l.Addr().String())
		if err == nil {
			c.Close()
			return port
		}
		select {
		case err := <-exited:
			log, _ := os.ReadFile(logPath)
			t.Fatalf("mosquitto exited: %v\n%s", err, log)
		case <-deadline:
			t.Fatal("mosquitto not listening after 10s")
		case <-tick.C:
		}
	}
}

// TestEntryStamps checks the stamps the broker compares after a reload:
// a login returns its entry's stamp, a reload of the same file keeps it,
// a new password changes it, and a deleted user has none.
func TestEntryStamps(t *testing.T) {
	path := writeFile(t, "alice", "secret", "bob", "builder")
	a, err := passwd.New(path, passwd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	stamp, err := a.AuthenticateEntry(client("alice", "10.0.0.1"), []byte("secret"))
	if cur, ok := a.Entry("alice"); err != nil || stamp == 0 || !ok || cur != stamp {
		t.Fatalf("login stamp %d (%v), entry %d %v", stamp, err, cur, ok)
	}
	if s, err := a.AuthenticateEntry(client("alice", "10.0.0.1"), []byte("wrong")); s != 0 || err == nil {
		t.Fatalf("wrong password: stamp %d, %v", s, err)
	}
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if cur, _ := a.Entry("alice"); cur != stamp {
		t.Error("a reload of the same file changed the stamp")
	}
	if err := passwd.Set(path, "alice", []byte("new"), false); err != nil {
		t.Fatal(err)
	}
	if err := passwd.Delete(path, "bob"); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if cur, ok := a.Entry("alice"); !ok || cur == stamp {
		t.Error("a new password kept the stamp")
	}
	if _, ok := a.Entry("bob"); ok {
		t.Error("a deleted user still has an entry")
	}
}
