package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"mqttd/auth/passwd"
)

// runPasswdCmd runs "mqttd passwd args..." through run and checks its
// exit code; it returns what was printed on stderr.
func runPasswdCmd(t *testing.T, want int, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(append([]string{"passwd"}, args...), noEnv, &stdout, &stderr, nil); code != want {
		t.Fatalf("mqttd passwd %q: exit code %d, want %d; stderr:\n%s", args, code, want, stderr.String())
	}
	return stderr.String()
}

// loadUsers reads the file with auth/passwd.
func loadUsers(t *testing.T, path string) passwd.Users {
	t.Helper()
	users, err := passwd.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return users
}

func TestPasswdCommand(t *testing.T) {
	path := filepath.Join(t.TempDir(), "passwd")
	runPasswdCmd(t, 0, "-c", "-b", path, "alice", "one")
	runPasswdCmd(t, 0, "-b", path, "bob", "two")
	runPasswdCmd(t, 0, "-b", path, "alice", "uno")
	users := loadUsers(t, path)
	if len(users) != 2 || !users["alice"].Verify([]byte("uno")) || !users["bob"].Verify([]byte("two")) {
		t.Fatalf("users after create, add, update: %v", users)
	}
	data, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(data), "alice:$7$101$") {
		t.Fatalf("alice not first, or not $7$ with 101 iterations:\n%s", data)
	}
	// The real mosquitto_passwd reads what we wrote: it rewrites the file
	// keeping our entries.
	if bin, err := exec.LookPath("mosquitto_passwd"); err == nil {
		if out, err := exec.Command(bin, "-b", path, "carol", "three").CombinedOutput(); err != nil {
			t.Fatalf("mosquitto_passwd: %v\n%s", err, out)
		}
		users = loadUsers(t, path)
		if !users["alice"].Verify([]byte("uno")) || !users["carol"].Verify([]byte("three")) {
			t.Fatalf("users after mosquitto_passwd: %v", users)
		}
	}
	runPasswdCmd(t, 0, "-D", path, "bob")
	if _, ok := loadUsers(t, path)["bob"]; ok {
		t.Fatal("bob not deleted")
	}
	if out := runPasswdCmd(t, 1, "-D", path, "bob"); !strings.Contains(out, "not found") {
		t.Fatalf("deleting bob again: %q", out)
	}
	runPasswdCmd(t, 0, "-c", "-b", path, "dave", "four")
	if users := loadUsers(t, path); len(users) != 1 {
		t.Fatalf("-c kept %d users, want only dave", len(users))
	}
}

func TestPasswdCommandUsage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "passwd")
	for _, args := range [][]string{
		{},
		{path},
		{"-b", path, "alice"},
		{path, "alice", "extra"},
		{"-D", "-c", path, "alice"},
		{"-D", "-b", path, "alice", "pw"},
	} {
		if out := runPasswdCmd(t, 2, args...); !strings.Contains(out, "Usage: mqttd passwd") {
			t.Errorf("%q: no usage:\n%s", args, out)
		}
	}
	if out := runPasswdCmd(t, 1, "-c", "-b", path, "a:b", "pw"); !strings.Contains(out, "':'") {
		t.Errorf("user a:b: %q", out)
	}
	if out := runPasswdCmd(t, 1, "-b", path, "alice", "pw"); !strings.Contains(out, "-c creates") {
		t.Errorf("updating a missing file: %q", out)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("a refused command wrote the file: %v", err)
	}
}

func TestPasswdPrompts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "passwd")
	for _, tc := range []struct {
		name, input, want string
		code              int
	}{
		{"match", "s3cret pw\ns3cret pw\n", "", 0},
		{"mismatch", "one\ntwo\n", "do not match", 1},
		{"empty", "\n\n", "empty password", 1},
		{"end of input", "one\n", "reading the password", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			code := runPasswd([]string{"-c", path, "alice"}, strings.NewReader(tc.input), &stderr)
			if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("exit code %d, stderr %q; want %d and %q", code, stderr.String(), tc.code, tc.want)
			}
			if strings.Contains(stderr.String(), "one") || strings.Contains(stderr.String(), "s3cret") {
				t.Fatalf("password printed: %q", stderr.String())
			}
		})
	}
	// Only the matching pair was written.
	if users := loadUsers(t, path); !users["alice"].Verify([]byte("s3cret pw")) {
		t.Fatal("prompted password not written")
	}
}

// TestPasswdUpgrade checks "mqttd passwd --upgrade FILE": it lists the
// users whose entries are still $6$, with exit status 1, until each
// password is set again, then reports none, with 0.
func TestPasswdUpgrade(t *testing.T) {
	path := filepath.Join(t.TempDir(), "passwd")
	runPasswdCmd(t, 0, "-c", "-b", path, "modern", "one")
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("old:$6$6cJdP4XOnU5ANGbe$7HJP/Nj6SQU/uM5mIhGGuoq80Sco+Nzbi/WbY0EgAxHPR2T1F1fyuLzj4FlHaebZvWQxYIqX+B09CrS2mbM4Mg==\n")
	f.Close()
	out := runPasswdCmd(t, 1, "--upgrade", path)
	if !strings.Contains(out, "\n  old\n") || strings.Contains(out, "  modern") || !strings.Contains(out, "mqttd passwd "+path+" USER") {
		t.Errorf("--upgrade listed:\n%s", out)
	}
	runPasswdCmd(t, 0, "-b", path, "old", "two")
	if out := runPasswdCmd(t, 0, "--upgrade", path); !strings.Contains(out, "no $6$ entries") {
		t.Errorf("--upgrade after setting the password:\n%s", out)
	}
	runPasswdCmd(t, 2, "--upgrade", "-b", path, "old", "x")
}
