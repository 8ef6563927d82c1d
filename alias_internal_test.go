package mqttd

import (
	"strings"
	"testing"
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
