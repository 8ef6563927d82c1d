package passwd_test

import (
	"testing"

	"mqttd/auth/passwd"
)

// FuzzParseLine checks that no line panics the parser and that an entry
// it accepts is written back to a line that parses to the same entry.
func FuzzParseLine(f *testing.F) {
	for _, s := range []string{
		"alice:$7$101$6cJdP4XOnU5ANGbe$7HJP/Nj6SQU/uM5mIhGGuoq80Sco+Nzbi/WbY0EgAxHPR2T1F1fyuLzj4FlHaebZvWQxYIqX+B09CrS2mbM4Mg==",
		"bob:$6$6cJdP4XOnU5ANGbe$7HJP/Nj6SQU/uM5mIhGGuoq80Sco+Nzbi/WbY0EgAxHPR2T1F1fyuLzj4FlHaebZvWQxYIqX+B09CrS2mbM4Mg==",
		"# comment", "", "  ", "alice", "alice:secret", ":$7$", "a:$7$$$", "a:$7$-1$x$y", "a:$6$$",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		user, h, ok, err := passwd.ParseLine(line)
		if err != nil || !ok {
			return
		}
		if user == "" {
			t.Fatalf("%q: accepted an empty user", line)
		}
		user2, h2, ok, err := passwd.ParseLine(user + ":" + h.String())
		if err != nil || !ok || user2 != user || h2.String() != h.String() {
			t.Fatalf("%q: written back as %q: %v", line, user+":"+h.String(), err)
		}
	})
}
