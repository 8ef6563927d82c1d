package passwd

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// maxLine bounds a line so a wrong file (a binary, say) fails fast
// instead of being read whole into memory.
const maxLine = 64 << 10

// Users maps user names to their hashes.
type Users map[string]Hash

// ParseLine parses one line of a password file. A blank line or a
// comment gives ok false and no error.
func ParseLine(line string) (user string, h Hash, ok bool, err error) {
	line = strings.TrimRight(line, "\r\n")
	t := strings.TrimSpace(line)
	if t == "" || t[0] == '#' {
		return "", Hash{}, false, nil
	}
	user, hash, found := strings.Cut(line, ":")
	if !found {
		return "", Hash{}, false, errors.New("no ':' between user and hash")
	}
	// Mosquitto trims blanks around both parts.
	user, hash = strings.Trim(user, " \t"), strings.Trim(hash, " \t")
	if user == "" {
		return "", Hash{}, false, errors.New("empty user name")
	}
	h, err = ParseHash(hash)
	if err != nil {
		return "", Hash{}, false, fmt.Errorf("user %q: %w", user, err)
	}
	return user, h, true, nil
}

// Parse reads a password file; name is used in errors. A malformed line
// or a user listed twice is an error naming name and the line number.
func Parse(r io.Reader, name string) (Users, error) {
	users := Users{}
	first := map[string]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, maxLine)
	for n := 1; sc.Scan(); n++ {
		user, h, ok, err := ParseLine(sc.Text())
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, n, err)
		}
		if !ok {
			continue
		}
		if l, dup := first[user]; dup {
			// Which line would win is not obvious: refuse rather than guess.
			return nil, fmt.Errorf("%s:%d: user %q already on line %d", name, n, user, l)
		}
		first[user] = n
		users[user] = h
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return users, nil
}

// Legacy returns, sorted, the users whose entries are $6$ (Hash.Legacy).
func (u Users) Legacy() []string {
	var out []string
	for name, h := range u {
		if h.Legacy() {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// Load reads the password file at path.
func Load(path string) (Users, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Parse(f, path)
}

// CheckUser reports why name cannot be written to a file as a user name.
func CheckUser(name string) error {
	switch {
	case name == "":
		return errors.New("empty user name")
	case strings.ContainsAny(name, ":\r\n"):
		return fmt.Errorf("user name %q contains ':' or a line break", name)
	case name[0] == '#':
		return fmt.Errorf("user name %q starts with '#' (it would read as a comment)", name)
	case strings.Trim(name, " \t") != name:
		return fmt.Errorf("user name %q starts or ends with a blank (Mosquitto trims them)", name)
	}
	return nil
}

// Set writes user's password to the file at path, replacing the user's
// line where it is or adding one at the end; the other lines are kept as
// they are. With create, the file is replaced by one holding only user.
// The file is rewritten atomically: readers see the old or the new one.
// A rewritten file keeps the owner, group and mode of the one it
// replaces; a new one is 0600, or root:mqttd 0640 where the packaged
// service reads it (in /etc/mqttd or a directory of group mqttd).
func Set(path, user string, password []byte, create bool) error {
	if err := CheckUser(user); err != nil {
		return err
	}
	h, err := NewHash(password)
	if err != nil {
		return err
	}
	entry := user + ":" + h.String()
	if create {
		old, err := os.Stat(path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return writeAtomic(path, []string{entry}, old)
	}
	lines, old, err := readLines(path)
	if err != nil {
		return err
	}
	i := find(lines, user)
	if i < 0 {
		lines = append(lines, entry)
	} else {
		lines[i] = entry
	}
	return writeAtomic(path, lines, old)
}

// Delete removes user's line from the file at path; a user not there is
// an error.
func Delete(path, user string) error {
	lines, old, err := readLines(path)
	if err != nil {
		return err
	}
	i := find(lines, user)
	if i < 0 {
		return fmt.Errorf("%s: user %q not found", path, user)
	}
	return writeAtomic(path, append(lines[:i], lines[i+1:]...), old)
}

// readLines reads the file and checks that it parses, so a rewrite never
// carries a broken line along unnoticed.
func readLines(path string) ([]string, fs.FileInfo, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	if _, err := Parse(bytes.NewReader(data), path); err != nil {
		return nil, nil, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	text := strings.TrimSuffix(string(data), "\n")
	if text == "" {
		return nil, fi, nil
	}
	return strings.Split(text, "\n"), fi, nil
}

// find returns the index of user's line, or -1.
func find(lines []string, user string) int {
	for i, l := range lines {
		if u, _, ok, err := ParseLine(l); err == nil && ok && u == user {
			return i
		}
	}
	return -1
}

// writeAtomic writes lines to a temporary file next to path, syncs it and
// renames it over path, then syncs the directory so the rename survives a
// crash. The new file keeps old's mode and owner; without old (a new
// file) it is 0600, as it holds hashes, unless shareNew gives it to the
// service's group.
func writeAtomic(path string, lines []string, old fs.FileInfo) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	if _, err = tmp.WriteString(b.String()); err != nil {
		return err
	}
	var mode fs.FileMode
	if old != nil {
		mode = old.Mode().Perm()
		keepOwner(tmp, old)
	} else {
		mode = shareNew(tmp, dir)
	}
	if err = tmp.Chmod(mode); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
