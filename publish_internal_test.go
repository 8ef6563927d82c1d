package mqttd

import (
	"bytes"
	"strings"
	"testing"
	"unsafe"

	"mqttd/session"
)

// TestOutAliases checks the broker's alias table for a client: aliases
// given in turn up to the maximum, the least recently used taken by a new
// topic, a forgotten alias given again first, and no alias for a topic
// that would keep more than maxAliasBytes.
func TestOutAliases(t *testing.T) {
	a := newOutAliases(3)
	step := func(topic string, wantAlias uint16, wantTopic bool) {
		t.Helper()
		if alias, send := a.assign(topic); alias != wantAlias || send != wantTopic {
			t.Fatalf("assign(%q) = %d, %v; want %d, %v", topic, alias, send, wantAlias, wantTopic)
		}
	}
	step("a", 1, true)
	step("b", 2, true)
	step("a", 1, false)
	step("c", 3, true)
	step("d", 2, true) // b was the least recently used
	step("b", 1, true) // then a
	a.forget(3)
	step("e", 3, true) // the forgotten slot first
	step("d", 2, false)
	long := strings.Repeat("x", maxAliasBytes)
	step(long, 0, true)
	if a.bytes != len("b")+len("d")+len("e") {
		t.Errorf("bytes %d, want %d", a.bytes, 3)
	}
	if got := newOutAliases(60000).max; got != maxOutAliases {
		t.Errorf("max %d for a client allowing 60000, want %d", got, maxOutAliases)
	}
}

// TestCopiedMessage checks the copy a borrowed message gets at every
// size around newWithBytes's: topic and payload equal to the source's and
// independent of its bytes, the payload's capacity ending with it, the
// other fields carried over, and up to 400 bytes one allocation.
func TestCopiedMessage(t *testing.T) {
	frame := make([]byte, 700)
	for n := 0; n <= len(frame); n++ {
		topicLen := min(n, 7)
		for i := range frame[:n] {
			frame[i] = byte('a' + (n+i)%26)
		}
		// The topic aliases the frame, as a decoded one does.
		src := &session.Message{Topic: aliasString(frame[:topicLen]), Payload: frame[topicLen:n], QoS: 1, Retain: true, Origin: "o"}
		wantTopic, wantPayload := strings.Clone(src.Topic), bytes.Clone(src.Payload)
		m := copiedMessage(src)
		for i := range frame[:n] {
			frame[i] = 0 // the next read reuses the buffer
		}
		if m.Topic != wantTopic || !bytes.Equal(m.Payload, wantPayload) {
			t.Fatalf("%d bytes: copy has topic %q payload %q, want %q %q", n, m.Topic, m.Payload, wantTopic, wantPayload)
		}
		if cap(m.Payload) != len(m.Payload) {
			t.Fatalf("%d bytes: payload capacity %d past its length %d", n, cap(m.Payload), len(m.Payload))
		}
		if m.QoS != 1 || !m.Retain || m.Origin != "o" {
			t.Fatalf("%d bytes: copy %+v lost the source's fields", n, m)
		}
	}
	// On 64-bit platforms; a 32-bit one has smaller pointers, and its
	// objects only fill the size classes less exactly.
	if size := unsafe.Sizeof(session.Message{}); unsafe.Sizeof(uintptr(0)) == 8 && size != 88 {
		t.Errorf("session.Message is %d bytes: newWithBytes's sizes assume 88", size)
	}
	src := &session.Message{Topic: "t/opic", Payload: make([]byte, 418)}
	if got := testing.AllocsPerRun(100, func() { copiedMessage(src) }); got != 1 {
		t.Errorf("copiedMessage of 424 bytes: %v allocations, want 1", got)
	}
}

// aliasString is b as a string without a copy, as the codec decodes one.
func aliasString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

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
