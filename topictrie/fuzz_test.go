package topictrie

import (
	"slices"
	"strings"
	"testing"
)

// refMatch is the reference matcher: split both on "/" and compare level by
// level, straight from the spec's wording.
func refMatch(filter, topic string) bool {
	f, tp := strings.Split(filter, "/"), strings.Split(topic, "/")
	if strings.HasPrefix(topic, "$") && (f[0] == "+" || f[0] == "#") {
		return false
	}
	for i, l := range f {
		if l == "#" {
			return true
		}
		if i >= len(tp) || (l != "+" && l != tp[i]) {
			return false
		}
	}
	return len(f) == len(tp)
}

func fuzzSeeds(f *testing.F) {
	f.Add("a/b,a/+,#,+/+,a/#,$share/g/a/b,$share/g/+/b,$share/h/#", "a/b")
	f.Add("$SYS/#,#,+/x,$SYS/+,$share/g/#", "$SYS/x")
	f.Add("/,+/,/+,//,+/+/+,a//b,#", "/")
	f.Add("a/#/b,a#,+a,,$share//t,$share/g", "a/b")
	f.Add("+,+/#,a,a,a,$share/g/a,$share/g/a", "a")
	f.Add("x/+/+/#,x/y/z/w", "x/y/z/w/v")
}

// splitFilters turns the fuzzer's comma-separated list into filters; empty
// entries are kept so that the empty filter is tried too.
func splitFilters(s string) []string {
	fs := strings.Split(s, ",")
	if len(fs) > 32 {
		fs = fs[:32]
	}
	return fs
}

// expected returns the sorted "group|filter" entries a correct Match of topic
// returns when key i is subscribed to filters[i] for each i in live.
func expected(filters []string, live []int, topic string) []string {
	var want []string
	groups := map[string]bool{}
	for _, i := range live {
		pf, _ := ParseFilter(filters[i])
		if !refMatch(pf.Topic, topic) {
			continue
		}
		id := pf.Group + "|" + pf.Topic
		if pf.Group != "" {
			if groups[id] {
				continue
			}
			groups[id] = true
		}
		want = append(want, id)
	}
	slices.Sort(want)
	return want
}

func matchEntries(tr *Trie[int, string], topic string) []string {
	var got []string
	for _, s := range tr.Match(topic, nil) {
		got = append(got, s.Group+"|"+s.Filter)
	}
	slices.Sort(got)
	return got
}

func FuzzTrieMatch(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, list, topic string) {
		filters := splitFilters(list)
		tr := New[int, string](Options{})
		var live []int
		for i, fl := range filters {
			_, err := tr.Subscribe(fl, i, fl)
			if (err == nil) != (ValidFilter(fl) == nil) {
				t.Fatalf("Subscribe(%q) error %v disagrees with ValidFilter", fl, err)
			}
			if err == nil {
				live = append(live, i)
			}
		}
		got := matchEntries(tr, topic)
		if ValidTopicName(topic) != nil {
			return // matched only for robustness; the broker never does it
		}
		if want := expected(filters, live, topic); !slices.Equal(got, want) {
			t.Fatalf("Match(%q) with %q\n got %q\nwant %q", topic, filters, got, want)
		}
		var kept []int
		for n, i := range live {
			if n%3 == 0 {
				if !tr.Unsubscribe(filters[i], i) {
					t.Fatalf("Unsubscribe(%q, %d) = false", filters[i], i)
				}
			} else {
				kept = append(kept, i)
			}
		}
		if tr.Len() != len(kept) {
			t.Fatalf("Len = %d, want %d", tr.Len(), len(kept))
		}
		got = matchEntries(tr, topic)
		if want := expected(filters, kept, topic); !slices.Equal(got, want) {
			t.Fatalf("after unsubscribing, Match(%q) with %q\n got %q\nwant %q", topic, filters, got, want)
		}
	})
}

func FuzzRetainedMatch(f *testing.F) {
	f.Add("a,a/b,a/b/c,/,/a,a/,$SYS/x,b", "a/#")
	f.Add("a,a/b,$SYS,$SYS/x,x/$y", "#")
	f.Add("a//c,a/x/c,a/c", "a/+/c")
	f.Add("a,b,c", "+/+")
	f.Fuzz(func(t *testing.T, list, filter string) {
		r := NewRetained[int](Limits{})
		stored := map[string]bool{}
		for i, tp := range splitFilters(list) {
			_, err := r.Set(tp, i)
			if (err == nil) != (ValidTopicName(tp) == nil) {
				t.Fatalf("Set(%q) error %v disagrees with ValidTopicName", tp, err)
			}
			if err == nil {
				stored[tp] = true
			}
		}
		if r.Len() != len(stored) {
			t.Fatalf("Len = %d, want %d", r.Len(), len(stored))
		}
		var got []string
		for _, it := range r.Match(filter, nil) {
			got = append(got, it.Topic)
		}
		pf, err := ParseFilter(filter)
		if err != nil || pf.Group != "" {
			return // matched only for robustness
		}
		var want []string
		for tp := range stored {
			if refMatch(filter, tp) {
				want = append(want, tp)
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("Match(%q) over %q\n got %q\nwant %q", filter, list, got, want)
		}
	})
}
