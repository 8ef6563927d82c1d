package acl

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"

	"mqttd/topictrie"
)

// access is a set of rights a rule grants; zero is a deny rule.
type access uint8

const (
	accessRead access = 1 << iota
	accessWrite
)

// maxLine bounds one line of the file: a filter may be 65,535 bytes, and a
// longer line cannot hold a valid rule.
const maxLine = 1 << 17

// ParseError reports a line of an ACL file that cannot be read.
type ParseError struct {
	File string
	Line int
	Msg  string
}

// Error names the file and line, as an operator needs to fix it.
func (e *ParseError) Error() string {
	return fmt.Sprintf("acl: %s:%d: %s", e.File, e.Line, e.Msg)
}

// ParseFile reads the ACL file at path.
func ParseFile(path string) (*Rules, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("acl: %w", err)
	}
	defer f.Close()
	return Parse(path, f)
}

// blanks are the characters C's isspace accepts, which Mosquitto trims.
const blanks = " \t\n\v\f\r"

// Parse reads an ACL file from r; name is used in errors only.
func Parse(name string, r io.Reader) (*Rules, error) {
	rs := &Rules{users: map[string]*section{}}
	cur := &rs.anon // lines before any "user" line are the anonymous section
	user := ""      // the user whose section cur is; "" for the anonymous one
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	n := 0
	for sc.Scan() {
		n++
		line := strings.Trim(sc.Text(), blanks)
		if line == "" || line[0] == '#' {
			continue
		}
		keyword, rest := cutField(line)
		switch keyword {
		case "user":
			if rest == "" {
				return nil, &ParseError{name, n, "missing username"}
			}
			s := rs.users[rest]
			if s == nil {
				s = &section{}
				rs.users[rest] = s
			}
			cur, user = s, rest
		case "admin":
			// mqttd's own keyword: the user may use the management API
			// with its password (Mosquitto has no such line).
			if err := rs.addAdmin(user, rest); err != nil {
				return nil, &ParseError{name, n, err.Error()}
			}
		case "topic", "pattern":
			ru, err := parseRule(rest, keyword == "pattern")
			if err != nil {
				return nil, &ParseError{name, n, err.Error()}
			}
			if keyword == "topic" {
				cur.add(ru)
				continue
			}
			rs.patterns.add(ru)
			rs.usesU = rs.usesU || ru.refsU
			rs.usesC = rs.usesC || ru.refsC
		default:
			return nil, &ParseError{name, n, fmt.Sprintf("unknown keyword %q", keyword)}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, &ParseError{name, n + 1, err.Error()}
	}
	return rs, nil
}

// addAdmin gives user, the user of the current section, the admin role;
// rest is what followed the keyword.
func (rs *Rules) addAdmin(user, rest string) error {
	if rest != "" {
		return fmt.Errorf("admin takes nothing after it, got %q", rest)
	}
	if user == "" {
		return fmt.Errorf("admin outside a user section: put it after a \"user NAME\" line")
	}
	if rs.admins == nil {
		rs.admins = map[string]bool{}
	}
	rs.admins[user] = true
	return nil
}

// cutField splits off the first word of s (which has no leading blanks)
// and returns it and the rest with its blanks trimmed.
func cutField(s string) (string, string) {
	i := strings.IndexAny(s, " \t")
	if i < 0 {
		return s, ""
	}
	return s[:i], strings.Trim(s[i:], blanks)
}

// parseRule reads what follows "topic" or "pattern". As in Mosquitto, a
// single word is the filter with readwrite access, so "topic read" is a
// rule for the topic "read".
func parseRule(s string, pattern bool) (rule, error) {
	if s == "" {
		return rule{}, fmt.Errorf("missing topic")
	}
	word, filter := cutField(s)
	acc := accessRead | accessWrite
	if filter == "" {
		filter = word
	} else {
		switch word {
		case "read":
			acc = accessRead
		case "write":
			acc = accessWrite
		case "readwrite":
		case "deny":
			acc = 0
		default:
			return rule{}, fmt.Errorf("invalid access %q (read, write, readwrite or deny)", word)
		}
	}
	if err := topictrie.ValidFilter(filter); err != nil {
		return rule{}, fmt.Errorf("invalid topic filter %q: %w", filter, err)
	}
	return compile(filter, acc, pattern), nil
}
