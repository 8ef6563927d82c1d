package topictrie

import (
	"strings"
	"testing"
)

func TestOverlap(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"a/b", "a/b", true},
		{"a/b", "a/c", false},
		{"a/+", "a/b", true},
		{"+/b", "a/+", true},
		{"+/b", "a/c", false},
		{"#", "a/b/c", true},
		{"a/#", "a", true},
		{"a", "a/#", true},
		{"a/#", "b/#", false},
		{"a/+/c", "a/b/#", true},
		{"a/+", "a/b/c", false},
		{"a/+/+", "+/x/1", true},
		{"a/b", "a/b/c", false},
		{"+", "a/b", false},
		{"+/+", "a/b/c", false},
		{"+/#", "a", true},
		{"#", "$SYS/x", false},
		{"+/x", "$SYS/x", false},
		{"$SYS/#", "$SYS/x", true},
		{"$SYS/+", "+/x", false},
		{"a//b", "a/+/b", true},
		{"a//b", "a/x/b", false},
		{"a/", "a/+", true},
	} {
		if got := Overlap(c.a, c.b); got != c.want {
			t.Errorf("Overlap(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
		if got := Overlap(c.b, c.a); got != c.want {
			t.Errorf("Overlap(%q, %q) = %v, want %v", c.b, c.a, got, c.want)
		}
	}
}

// FuzzOverlap checks Overlap against Matches: a topic both filters match
// means they overlap.
func FuzzOverlap(f *testing.F) {
	f.Add("a/+", "+/b", "a/b")
	f.Add("#", "$x/#", "$x/y")
	f.Fuzz(func(t *testing.T, a, b, topic string) {
		if ValidFilter(a) != nil || ValidFilter(b) != nil || ValidTopicName(topic) != nil ||
			len(a) > 64 || len(b) > 64 {
			return
		}
		if strings.HasPrefix(a, sharePrefix) || strings.HasPrefix(b, sharePrefix) {
			return
		}
		if Matches(a, topic) && Matches(b, topic) && !Overlap(a, b) {
			t.Fatalf("%q matches %q and %q, which Overlap says do not overlap", topic, a, b)
		}
	})
}
