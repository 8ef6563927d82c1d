package topictrie

import (
	"sync"
	"testing"
)

// sharedTrie returns a trie with members keys 0..n-1 in group g on filter.
func sharedTrie(t *testing.T, s Strategy, filter string, n int) *Trie[int, int] {
	t.Helper()
	tr := New[int, int](Options{Strategy: s})
	for i := range n {
		if _, err := tr.Subscribe("$share/g/"+filter, i, i); err != nil {
			t.Fatal(err)
		}
	}
	return tr
}

func TestShareOneMemberPerGroupAndFilter(t *testing.T) {
	tr := New[string, int](Options{})
	subs := []struct{ filter, key string }{
		{"$share/g1/a/+", "m1"}, {"$share/g1/a/+", "m2"},
		{"$share/g2/a/+", "m1"}, {"$share/g2/a/+", "m3"},
		{"$share/g1/a/#", "m1"}, {"$share/g1/a/#", "m2"},
		{"$share/g1/b", "m1"},
		{"a/+", "m1"}, {"a/+", "m4"},
	}
	for _, s := range subs {
		mustSub(t, tr, s.filter, s.key, 0, true)
	}
	got := tr.Match("a/x", nil)
	perGroup := map[[2]string]int{}
	normal := 0
	for _, s := range got {
		if s.Group == "" {
			normal++
			continue
		}
		perGroup[[2]string{s.Group, s.Filter}]++
	}
	want := map[[2]string]int{{"g1", "a/+"}: 1, {"g2", "a/+"}: 1, {"g1", "a/#"}: 1}
	if normal != 2 || len(perGroup) != len(want) {
		t.Fatalf("Match = %+v", got)
	}
	for k, n := range want {
		if perGroup[k] != n {
			t.Errorf("group %v delivered %d times, want %d", k, perGroup[k], n)
		}
	}
}

func TestShareDollarRule(t *testing.T) {
	tr := sharedTrie(t, RoundRobin{}, "#", 2)
	if got := tr.Match("$SYS/x", nil); len(got) != 0 {
		t.Errorf("$share/g/# matched $SYS/x: %+v", got)
	}
	tr = sharedTrie(t, RoundRobin{}, "$SYS/#", 2)
	if got := tr.Match("$SYS/x", nil); len(got) != 1 {
		t.Errorf("$share/g/$SYS/# did not match $SYS/x: %+v", got)
	}
}

func TestRoundRobin(t *testing.T) {
	const members, rounds = 3, 4
	tr := sharedTrie(t, RoundRobin{}, "t", members)
	var seq []int
	for range members * rounds {
		got := tr.Match("t", nil)
		if len(got) != 1 {
			t.Fatalf("Match = %+v", got)
		}
		seq = append(seq, got[0].Key)
	}
	for i := members; i < len(seq); i++ {
		if seq[i] != seq[i-members] {
			t.Fatalf("not round robin: %v", seq)
		}
	}
	for i := 1; i < members; i++ {
		if seq[i] == seq[0] {
			t.Fatalf("member repeated before the others had a turn: %v", seq)
		}
	}
}

// TestRoundRobinConcurrent checks that the counter is shared safely: with
// concurrent matchers every member still gets exactly its share.
func TestRoundRobinConcurrent(t *testing.T) {
	const members, workers, each = 4, 8, 500
	tr := sharedTrie(t, RoundRobin{}, "t", members)
	counts := make([][members]int, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			var buf []Sub[int, int]
			for range each {
				buf = tr.Match("t", buf[:0])
				for _, s := range buf {
					counts[w][s.Key]++
				}
			}
		})
	}
	wg.Wait()
	for m := range members {
		total := 0
		for w := range workers {
			total += counts[w][m]
		}
		if total != workers*each/members {
			t.Errorf("member %d got %d messages, want %d", m, total, workers*each/members)
		}
	}
}

func TestRandomCoversMembers(t *testing.T) {
	const members = 4
	tr := sharedTrie(t, Random{}, "t", members)
	seen := map[int]bool{}
	for i := 0; i < 10000 && len(seen) < members; i++ {
		for _, s := range tr.Match("t", nil) {
			seen[s.Key] = true
		}
	}
	if len(seen) != members {
		t.Errorf("random strategy reached %d of %d members", len(seen), members)
	}
}

func TestHashTopic(t *testing.T) {
	tr := sharedTrie(t, HashTopic{}, "+", 5)
	first := map[string]int{}
	keys := map[int]bool{}
	for range 3 {
		for _, topic := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
			got := tr.Match(topic, nil)
			if len(got) != 1 {
				t.Fatalf("Match(%q) = %+v", topic, got)
			}
			if k, ok := first[topic]; ok && k != got[0].Key {
				t.Errorf("topic %q moved from member %d to %d", topic, k, got[0].Key)
			}
			first[topic] = got[0].Key
			keys[got[0].Key] = true
		}
	}
	if len(keys) < 2 {
		t.Errorf("all topics hashed to one member: %v", first)
	}
}

func TestSticky(t *testing.T) {
	tr := sharedTrie(t, Sticky{}, "t", 5)
	pick := func() int {
		t.Helper()
		got := tr.Match("t", nil)
		if len(got) != 1 {
			t.Fatalf("Match = %+v", got)
		}
		return got[0].Key
	}
	for range 5 {
		// A member that is not the sticky one leaves; the last member may be
		// moved into its slot, and the sticky member must stay the same.
		s := pick()
		for range 10 {
			if k := pick(); k != s {
				t.Fatalf("sticky member changed from %d to %d", s, k)
			}
		}
		other := -1
		for _, e := range tr.root.lookup("t").groups()[0].members.items {
			if e.key != s {
				other = e.key
			}
		}
		if other < 0 {
			break
		}
		tr.Unsubscribe("$share/g/t", other)
		if k := pick(); k != s {
			t.Fatalf("sticky member changed from %d to %d after %d left", s, k, other)
		}
		// The sticky member leaves: another one takes over.
		tr.Unsubscribe("$share/g/t", s)
		if tr.Len() == 0 {
			return
		}
		if k := pick(); k == s {
			t.Fatalf("departed member %d still chosen", s)
		}
	}
}

func TestSharedGroupEmptiedAndRemoved(t *testing.T) {
	tr := sharedTrie(t, RoundRobin{}, "a/b", 2)
	tr.Unsubscribe("$share/g/a/b", 0)
	tr.Unsubscribe("$share/g/a/b", 1)
	if got := tr.Match("a/b", nil); len(got) != 0 {
		t.Errorf("Match after the group emptied = %+v", got)
	}
	if tr.root.children.len() != 0 {
		t.Error("nodes of the emptied group were not pruned")
	}
}

// TestShareMember checks that ShareMember chooses a member of the named
// group on the filter, passing over those skip names, and reports false
// when none is left or the group or filter is unknown.
func TestShareMember(t *testing.T) {
	tr := New[string, int](Options{})
	for _, k := range []string{"a", "b", "c"} {
		if _, err := tr.Subscribe("$share/g/t/#", k, 0); err != nil {
			t.Fatal(err)
		}
	}
	tr.Subscribe("$share/other/t/#", "d", 0)
	for range 6 {
		s, ok := tr.ShareMember("g", "t/#", Message{Topic: "t/x"}, func(k string) bool { return k == "a" })
		if !ok || s.Key == "a" || s.Key == "d" || s.Group != "g" || s.Filter != "t/#" {
			t.Fatalf("got %+v, %v; want b or c of group g", s, ok)
		}
	}
	if s, ok := tr.ShareMember("g", "t/#", Message{Topic: "t/x"}, func(string) bool { return true }); ok {
		t.Errorf("got %+v with every member skipped", s)
	}
	for _, tc := range []struct{ group, filter string }{{"nope", "t/#"}, {"g", "u/#"}} {
		if s, ok := tr.ShareMember(tc.group, tc.filter, Message{Topic: "t/x"}, func(string) bool { return false }); ok {
			t.Errorf("%s on %s: got %+v", tc.group, tc.filter, s)
		}
	}
}
