package passwd_test

import (
	"os"
	"testing"

	"mqttd/auth/passwd"
)

func benchVerify(b *testing.B, hash string) {
	b.Helper()
	h, err := passwd.ParseHash(hash)
	if err != nil {
		b.Fatal(err)
	}
	pw := []byte("wrong password")
	for b.Loop() {
		h.Verify(pw)
	}
}

// A $7$ check with mosquitto_passwd's 101 iterations: what each login and
// each unknown user costs a worker.
func BenchmarkVerifyPBKDF2(b *testing.B) {
	benchVerify(b, "$7$101$6cJdP4XOnU5ANGbe$7HJP/Nj6SQU/uM5mIhGGuoq80Sco+Nzbi/WbY0EgAxHPR2T1F1fyuLzj4FlHaebZvWQxYIqX+B09CrS2mbM4Mg==")
}

func BenchmarkVerifySHA512(b *testing.B) {
	benchVerify(b, "$6$6cJdP4XOnU5ANGbe$7HJP/Nj6SQU/uM5mIhGGuoq80Sco+Nzbi/WbY0EgAxHPR2T1F1fyuLzj4FlHaebZvWQxYIqX+B09CrS2mbM4Mg==")
}

// Authenticate end to end, through the pool, for a wrong password and an
// unknown user: the two should cost the same.
func BenchmarkAuthenticate(b *testing.B) {
	path := b.TempDir() + "/passwd"
	if err := passwd.Set(path, "alice", []byte("secret"), true); err != nil {
		b.Fatal(err)
	}
	a, err := passwd.New(path, passwd.Options{})
	if err != nil {
		b.Fatal(err)
	}
	for _, user := range []string{"alice", "mallory"} {
		b.Run(user, func(b *testing.B) {
			// No Remote: failures are not slowed, only the check is timed.
			c := client(user, "")
			c.Remote = nil
			for b.Loop() {
				a.Authenticate(c, []byte("wrong"))
			}
		})
	}
}

// Authenticate for a file migrated from an old Mosquitto: a $6$ user, a
// $7$ user and an unknown one, each with a wrong password. The unknown
// user should cost what the $7$ one does (the dearest entry); the $6$
// one is cheaper, which is why the broker warns about such entries.
func BenchmarkAuthenticateMigratedFile(b *testing.B) {
	path := b.TempDir() + "/passwd"
	if err := passwd.Set(path, "modern", []byte("secret"), true); err != nil {
		b.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	f.WriteString("legacy:$6$6cJdP4XOnU5ANGbe$7HJP/Nj6SQU/uM5mIhGGuoq80Sco+Nzbi/WbY0EgAxHPR2T1F1fyuLzj4FlHaebZvWQxYIqX+B09CrS2mbM4Mg==\n")
	f.Close()
	a, err := passwd.New(path, passwd.Options{})
	if err != nil {
		b.Fatal(err)
	}
	for _, user := range []string{"legacy", "modern", "unknown"} {
		b.Run(user, func(b *testing.B) {
			c := client(user, "")
			c.Remote = nil
			for b.Loop() {
				a.Authenticate(c, []byte("wrong"))
			}
		})
	}
}
