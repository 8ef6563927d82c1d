package mqttd

import (
	"strings"
	"testing"
)

// keysOf lists the clients of r's matches.
func keysOf(r *router) []string {
	var ids []string
	for _, m := range r.matches {
		ids = append(ids, m.Key.id)
	}
	return ids
}

// TestMatchIntoKeepsLastMatch checks matchInto on one router: the last
// topic's matches are used again while that server's trie is unchanged,
// not for another server whose trie is at the same generation, not once
// the trie changed, and never for a result with a shared subscription or
// a long topic.
func TestMatchIntoKeepsLastMatch(t *testing.T) {
	s1, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	s2, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := &client{id: "a"}, &client{id: "b"}, &client{id: "c"}
	s1.subs.Subscribe("t", a, subOpts{qos: 1})
	s2.subs.Subscribe("t", b, subOpts{qos: 1})
	if s1.subs.Generation() != s2.subs.Generation() {
		t.Fatal("the two tries are at different generations: the test needs them equal")
	}
	r := new(router)
	check := func(s *Server, topic string, want string, kept bool) {
		t.Helper()
		s.matchInto(r, topic)
		if got := strings.Join(keysOf(r), ","); got != want || r.matched != kept {
			t.Fatalf("matchInto(%q) = %q, kept %v; want %q, kept %v", topic, got, r.matched, want, kept)
		}
	}
	check(s1, "t", "a", true)
	r.matches[0].Value.qos = 2 // marks the result: only a reused one has it
	s1.matchInto(r, "t")
	if r.matches[0].Value.qos != 2 {
		t.Fatal("the same topic on an unchanged trie was matched again")
	}
	check(s2, "t", "b", true)
	check(s1, "t", "a", true)
	if r.matches[0].Value.qos != 1 {
		t.Fatal("s1's result was used again after s2's")
	}
	s1.subs.Subscribe("t", c, subOpts{qos: 1})
	s1.matchInto(r, "t")
	if got := strings.Join(keysOf(r), ","); got != "a,c" && got != "c,a" {
		t.Fatalf("after a new subscription: %q, want a and c", got)
	}
	s1.subs.Unsubscribe("t", c)
	check(s1, "t", "a", true)
	check(s1, "u", "", true)
	long := strings.Repeat("x", maxKeptTopic+1)
	s1.subs.Subscribe(long, a, subOpts{})
	check(s1, long, "a", false)
	s1.subs.Subscribe("$share/g/t", b, subOpts{})
	s1.matchInto(r, "t")
	if r.matched || len(r.matches) != 2 {
		t.Fatalf("with a share group: %v, kept %v; want a and b, not kept", keysOf(r), r.matched)
	}
}
