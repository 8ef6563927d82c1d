package acl

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"mqttd/auth"
)

// section holds one user's (or the anonymous clients', or the patterns')
// rules, deny rules apart because Mosquitto checks them first.
type section struct {
	deny, allow []rule
}

func (s *section) add(r rule) {
	if r.access == 0 {
		s.deny = append(s.deny, r)
		return
	}
	s.allow = append(s.allow, r)
}

// decision is a section's answer: a rule denied, a rule allowed, or no
// rule matched and the next section decides.
type decision uint8

const (
	undecided decision = iota
	allowed
	denied
)

// decide asks the section about filter or topic f. Rules with %u are
// skipped for a client without a username, as Mosquitto does.
func (s *section) decide(f string, need access, id *ident) decision {
	for i := range s.deny {
		r := &s.deny[i]
		if r.refsU && !id.hasUser {
			continue
		}
		if r.covers(f, id) {
			return denied
		}
	}
	for i := range s.allow {
		r := &s.allow[i]
		if r.access&need == 0 || r.refsU && !id.hasUser {
			continue
		}
		if r.covers(f, id) {
			return allowed
		}
	}
	return undecided
}

// Rules is a parsed ACL file. It is immutable, so one Rules may answer
// from many goroutines.
type Rules struct {
	anon     section
	users    map[string]*section
	patterns section
	// usesU and usesC say some pattern substitutes the username or the
	// client id, which makes a / or leading $ in it unsafe.
	usesU, usesC bool
	// admins are the users with an "admin" line in their section.
	admins map[string]bool
}

// Admin reports whether the file gives user the admin role (a line
// "admin" in its user section): mqttd's management API accepts its
// password.
func (rs *Rules) Admin(user string) bool { return user != "" && rs.admins[user] }

// Admins returns, sorted, the users with the admin role.
func (rs *Rules) Admins() []string { return slices.Sorted(maps.Keys(rs.admins)) }

// Authorize answers r for client c: Publish and Will need write access to
// the topic, Read (a message delivered to c) needs read access to it, and
// Subscribe needs read access to the whole filter (see the package
// documentation). A client with no username (an empty one counts as none)
// is an anonymous client.
func (rs *Rules) Authorize(c auth.ClientInfo, r auth.Request) bool {
	var need access
	switch r.Action {
	case auth.Publish, auth.Will:
		if r.Topic == "$SYS" || strings.HasPrefix(r.Topic, "$SYS/") || r.Topic == "$DLQ" || strings.HasPrefix(r.Topic, "$DLQ/") {
			return false // $SYS and $DLQ (dead letters) belong to the broker
		}
		need = accessWrite
	case auth.Subscribe, auth.Read:
		need = accessRead
	default:
		return false
	}
	id := ident{user: c.Username, client: c.ClientID, hasUser: c.Username != ""}
	s := &rs.anon
	if id.hasUser {
		s = rs.users[c.Username]
	}
	if s != nil {
		if d := s.decide(r.Topic, need, &id); d != undecided {
			return d == allowed
		}
	}
	if !rs.patternsSafe(&id) {
		return false
	}
	return rs.patterns.decide(r.Topic, need, &id) == allowed
}

// patternsSafe reports whether the patterns may be expanded for id. A + or
// # in either identity refuses every pattern decision, as in Mosquitto; a
// / or a leading $ refuses them when a pattern substitutes that identity.
// Refusing the whole pattern phase rather than skipping the rules that
// substitute fails closed: a deny pattern that cannot be expanded safely
// must not stop denying.
func (rs *Rules) patternsSafe(id *ident) bool {
	if len(rs.patterns.deny)+len(rs.patterns.allow) == 0 {
		return true
	}
	if id.client == "" || strings.ContainsAny(id.user, "+#") || strings.ContainsAny(id.client, "+#") {
		return false
	}
	unsafe := func(s string) bool { return strings.IndexByte(s, '/') >= 0 || strings.HasPrefix(s, "$") }
	return !(rs.usesU && unsafe(id.user) || rs.usesC && unsafe(id.client))
}

// Authorizer answers from the rules of an ACL file and reloads them on
// demand. It is safe for concurrent use; a decision sees either the old
// rules or the new, never a mixture.
type Authorizer struct {
	path   string
	rules  atomic.Pointer[Rules]
	reload sync.Mutex // one Reload at a time, so the last file read is the one kept
}

// Open reads the ACL file at path.
func Open(path string) (*Authorizer, error) {
	rs, err := ParseFile(path)
	if err != nil {
		return nil, err
	}
	a := &Authorizer{path: path}
	a.rules.Store(rs)
	return a, nil
}

// Authorize answers r for c from the current rules.
func (a *Authorizer) Authorize(c auth.ClientInfo, r auth.Request) bool {
	return a.rules.Load().Authorize(c, r)
}

// Admin reports whether the current rules give user the admin role.
func (a *Authorizer) Admin(user string) bool { return a.rules.Load().Admin(user) }

// Admins returns, sorted, the users the current rules make admins.
func (a *Authorizer) Admins() []string { return a.rules.Load().Admins() }

// Reload reads the file again and swaps the new rules in. If the file
// cannot be read or parsed, the old rules stay and the error says why.
func (a *Authorizer) Reload() error {
	a.reload.Lock()
	defer a.reload.Unlock()
	rs, err := ParseFile(a.path)
	if err != nil {
		return err
	}
	a.rules.Store(rs)
	return nil
}
