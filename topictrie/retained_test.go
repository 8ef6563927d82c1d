package topictrie

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func retainedTopics(t *testing.T, r *Retained[string], filter string) []string {
	t.Helper()
	var got []string
	for _, it := range r.Match(filter, nil) {
		if it.Value != it.Topic {
			t.Errorf("item %q carries value %q", it.Topic, it.Value)
		}
		got = append(got, it.Topic)
	}
	slices.Sort(got)
	return got
}

func TestRetainedMatch(t *testing.T) {
	r := NewRetained[string](Limits{})
	topics := []string{
		"a", "a/b", "a/b/c", "a/c", "a/x/c", "a//c", "a/", "/", "/a", "b",
		"$SYS", "$SYS/broker", "$SYS/broker/uptime", "x/$y",
	}
	for _, tp := range topics {
		if _, err := r.Set(tp, tp); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		filter string
		want   []string
	}{
		{"#", []string{"/", "/a", "a", "a/", "a//c", "a/b", "a/b/c", "a/c", "a/x/c", "b", "x/$y"}},
		{"+", []string{"a", "b"}},
		{"a/#", []string{"a", "a/", "a//c", "a/b", "a/b/c", "a/c", "a/x/c"}},
		{"a/+", []string{"a/", "a/b", "a/c"}},
		{"a/+/c", []string{"a//c", "a/b/c", "a/x/c"}},
		{"+/+", []string{"/", "/a", "a/", "a/b", "a/c", "x/$y"}},
		{"+/#", []string{"/", "/a", "a", "a/", "a//c", "a/b", "a/b/c", "a/c", "a/x/c", "b", "x/$y"}},
		{"/+", []string{"/", "/a"}},
		{"a//c", []string{"a//c"}},
		{"a/b", []string{"a/b"}},
		{"a/b/c/d", nil},
		{"+/$y", []string{"x/$y"}},
		{"$SYS/#", []string{"$SYS", "$SYS/broker", "$SYS/broker/uptime"}},
		{"$SYS/+", []string{"$SYS/broker"}},
		{"+/broker", nil},
		{"nope/#", nil},
	}
	for _, tt := range tests {
		if got := retainedTopics(t, r, tt.filter); !slices.Equal(got, tt.want) {
			t.Errorf("Match(%q)\n got %q\nwant %q", tt.filter, got, tt.want)
		}
	}
}

func TestRetainedSetGetDelete(t *testing.T) {
	r := NewRetained[int](Limits{})
	if replaced, err := r.Set("a/b", 1); replaced || err != nil {
		t.Fatalf("Set = %v, %v", replaced, err)
	}
	if replaced, err := r.Set("a/b", 2); !replaced || err != nil {
		t.Fatalf("second Set = %v, %v", replaced, err)
	}
	if _, err := r.Set("a", 3); err != nil {
		t.Fatal(err)
	}
	if v, ok := r.Get("a/b"); !ok || v != 2 {
		t.Errorf("Get(a/b) = %v, %v", v, ok)
	}
	if _, ok := r.Get("a/b/c"); ok {
		t.Error("Get of a missing topic found a value")
	}
	if _, ok := r.Get("x"); ok {
		t.Error("Get of a missing root topic found a value")
	}
	if r.Len() != 2 {
		t.Errorf("Len = %d, want 2", r.Len())
	}
	if r.Delete("a/b/c") || r.Delete("x") {
		t.Error("Delete of a missing topic reported true")
	}
	if !r.Delete("a") || r.Delete("a") {
		t.Error("Delete(a) wrong")
	}
	if v, ok := r.Get("a/b"); !ok || v != 2 {
		t.Errorf("deleting the parent removed the child: %v, %v", v, ok)
	}
	if !r.Delete("a/b") || r.Len() != 0 {
		t.Errorf("Delete(a/b) left Len = %d", r.Len())
	}
	if r.root.children.len() != 0 {
		t.Error("empty nodes were not pruned")
	}
}

func TestRetainedSetRejects(t *testing.T) {
	r := NewRetained[int](Limits{MaxLevels: 3})
	for topic, want := range map[string]error{
		"":        ErrEmpty,
		"a/+":     ErrWildcardInName,
		"a/#":     ErrWildcardInName,
		"a\x00":   ErrNull,
		"a/b/c/d": ErrTooManyLevels,
	} {
		if _, err := r.Set(topic, 1); !errors.Is(err, want) {
			t.Errorf("Set(%q) = %v, want %v", topic, err, want)
		}
	}
	if r.Len() != 0 {
		t.Errorf("Len = %d after rejected sets", r.Len())
	}
}

func TestRetainedDeepFilterIsCheap(t *testing.T) {
	r := NewRetained[int](Limits{})
	if _, err := r.Set("a/a", 1); err != nil {
		t.Fatal(err)
	}
	if got := r.Match(strings.Repeat("a/", 30000)+"#", nil); len(got) != 0 {
		t.Errorf("Match of a deep filter = %+v", got)
	}
}

// TestRetainedRemoveIf checks RemoveIf removes only the value it is
// asked about: one stored since is kept.
func TestRetainedRemoveIf(t *testing.T) {
	r := NewRetained[int](Limits{})
	r.Set("a/b", 1)
	r.Set("a/b", 2)
	if _, ok := r.RemoveIf("a/b", func(v int) bool { return v == 1 }); ok {
		t.Fatal("removed a value stored after the one asked about")
	}
	if v, ok := r.RemoveIf("a/b", func(v int) bool { return v == 2 }); !ok || v != 2 || r.Len() != 0 {
		t.Fatalf("RemoveIf(2) = %d, %v with %d left; want 2, true, 0", v, ok, r.Len())
	}
}

// TestRetainedMatchN checks that MatchN returns at most n items, all of
// them matches, for every kind of filter, and all of them when fewer
// match.
func TestRetainedMatchN(t *testing.T) {
	r := NewRetained[int](Limits{})
	for i := range 30 {
		if _, err := r.Set(fmt.Sprintf("a/%d/x", i), i); err != nil {
			t.Fatal(err)
		}
	}
	for _, filter := range []string{"#", "a/#", "a/+/x", "+/+/+"} {
		for _, n := range []int{0, 1, 7, 30, 31} {
			got := r.MatchN(filter, nil, n)
			if want := min(n, 30); len(got) != want {
				t.Errorf("MatchN(%q, %d): %d items, want %d", filter, n, len(got), want)
			}
			seen := map[string]bool{}
			for _, it := range got {
				if seen[it.Topic] || !strings.HasPrefix(it.Topic, "a/") {
					t.Errorf("MatchN(%q, %d): item %q repeated or not a match", filter, n, it.Topic)
				}
				seen[it.Topic] = true
			}
		}
	}
	if got := r.MatchN("a/#", make([]Item[int], 5), 3); len(got) != 5 {
		t.Errorf("MatchN into a slice already past n: %d items, want the 5 given", len(got))
	}
}

func TestRetainedAll(t *testing.T) {
	r := NewRetained[string](Limits{})
	topics := []string{"a", "a/b", "a//c", "/", "$SYS/broker/uptime", "$x", "b/$y"}
	for _, tp := range topics {
		if _, err := r.Set(tp, tp); err != nil {
			t.Fatal(err)
		}
	}
	r.Delete("a/b")
	var got []string
	for topic, v := range r.All {
		if v != topic {
			t.Errorf("%q carries %q", topic, v)
		}
		got = append(got, topic)
	}
	slices.Sort(got)
	want := []string{"$SYS/broker/uptime", "$x", "/", "a", "a//c", "b/$y"}
	if !slices.Equal(got, want) {
		t.Errorf("All yielded %q, want %q ($ topics too, not the deleted one)", got, want)
	}
	n := 0
	for range r.All {
		if n++; n == 2 {
			break
		}
	}
	if _, err := r.Set("after/break", "x"); err != nil { // the lock was released
		t.Fatal(err)
	}
}
