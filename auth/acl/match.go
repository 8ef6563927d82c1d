package acl

import "strings"

// kind is what one level of a rule's filter matches.
type kind uint8

const (
	literal  kind = iota // exactly text
	plus                 // any one level
	hash                 // this level and everything below, or nothing
	template             // text with %u and %c replaced, compared as a literal
)

// level is one /-separated level of a rule's filter, split once at load so
// that a decision does not split or expand the rule again.
type level struct {
	kind kind
	text string
}

// rule is one compiled topic or pattern line.
type rule struct {
	levels []level
	access access
	// wildStart: the filter starts with + or #, so it matches no topic
	// starting with $ [MQTT-4.7.2-1].
	wildStart bool
	// refsU and refsC say the pattern substitutes the username or the
	// client id.
	refsU, refsC bool
}

// compile splits a valid filter into levels. In a pattern, a level holding
// %u or %c becomes a template; in a topic rule % is an ordinary character.
func compile(filter string, acc access, pattern bool) rule {
	r := rule{access: acc, wildStart: filter[0] == '+' || filter[0] == '#'}
	for l := range strings.SplitSeq(filter, "/") {
		lv := level{kind: literal, text: l}
		switch {
		case l == "+":
			lv.kind = plus
		case l == "#":
			lv.kind = hash
		case pattern:
			u, c := refs(l)
			if u || c {
				lv.kind = template
				r.refsU = r.refsU || u
				r.refsC = r.refsC || c
			}
		}
		r.levels = append(r.levels, lv)
	}
	return r
}

// refs reports whether template t substitutes %u and %c, scanning as
// expandEquals does so that "%%u" is a literal % and the username.
func refs(t string) (u, c bool) {
	for i := 0; i < len(t)-1; i++ {
		if t[i] != '%' {
			continue
		}
		switch t[i+1] {
		case 'u':
			u = true
			i++
		case 'c':
			c = true
			i++
		}
	}
	return u, c
}

// ident is the client a pattern is expanded for.
type ident struct {
	user, client string
	hasUser      bool
}

// expandEquals reports whether template t with %u and %c replaced equals s,
// without building the expansion. The substitution is Mosquitto's: a %
// followed by c or (with a username) u is replaced, any other % is itself.
func expandEquals(t, s string, id *ident) bool {
	for len(t) > 0 {
		if t[0] == '%' && len(t) > 1 {
			v, ok := "", false
			switch t[1] {
			case 'c':
				v, ok = id.client, true
			case 'u':
				v, ok = id.user, id.hasUser
			}
			if ok {
				if !strings.HasPrefix(s, v) {
					return false
				}
				s, t = s[len(v):], t[2:]
				continue
			}
		}
		if s == "" || s[0] != t[0] {
			return false
		}
		s, t = s[1:], t[1:]
	}
	return s == ""
}

// covers reports whether every topic that filter f can match is matched by
// the rule (expanded for id). For a topic name, which has no wildcards, that
// is whether the rule matches it. Level by level: a rule # covers the rest,
// the topic's parent level included; a rule + covers one level, a literal
// one or the subscription's +; a literal covers only itself. A
// subscription's # is covered only by a rule's #, since it also matches its
// parent and every depth below.
func (r *rule) covers(f string, id *ident) bool {
	if f == "" || r.wildStart && f[0] == '$' {
		return false
	}
	lv := r.levels
	for i := 0; ; i++ {
		l := lv[i]
		if l.kind == hash {
			return true
		}
		fl, rest, more := strings.Cut(f, "/")
		switch {
		case fl == "#":
			return false
		case l.kind == plus:
		case fl == "+":
			return false
		case l.kind == literal:
			if fl != l.text {
				return false
			}
		default: // template
			if !expandEquals(l.text, fl, id) {
				return false
			}
		}
		last := i == len(lv)-1
		if !more {
			// "a/#" matches "a" [MQTT-4.7.1-2].
			return last || i == len(lv)-2 && lv[i+1].kind == hash
		}
		if last {
			return false
		}
		f = rest
	}
}
