package topictrie

import (
	"slices"
	"testing"
)

// TestMatchPlainLeavesGroupsOut: MatchPlain returns the normal
// subscriptions only, and does not move a group's round robin on: the
// member chosen next is the one Match would have chosen without it.
func TestMatchPlainLeavesGroupsOut(t *testing.T) {
	tr := New[string, int](Options{})
	mustSub(t, tr, "$share/g/a/+", "m1", 0, true)
	mustSub(t, tr, "$share/g/a/+", "m2", 0, true)
	mustSub(t, tr, "a/#", "p1", 0, true)
	mustSub(t, tr, "a/x", "p2", 0, true)
	got := tr.MatchPlain("a/x", nil)
	if len(got) != 2 || got[0].Group != "" || got[1].Group != "" {
		t.Fatalf("MatchPlain = %+v, want the two normal subscriptions", got)
	}
	var chosen []string
	for range 4 {
		tr.MatchPlain("a/x", nil)
		for _, s := range tr.Match("a/x", nil) {
			if s.Group != "" {
				chosen = append(chosen, s.Key)
			}
		}
	}
	if want := []string{"m1", "m2", "m1", "m2"}; !slices.Equal(chosen, want) {
		t.Fatalf("members chosen %v with MatchPlain between, want %v", chosen, want)
	}
}
