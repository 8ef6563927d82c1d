package topictrie

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// overlapTrie has three clients whose subscriptions overlap on "a/b".
func overlapTrie(t *testing.T) *Trie[string, opts] {
	t.Helper()
	tr := New[string, opts](Options{})
	for _, s := range []struct {
		filter, key string
		o           opts
	}{
		{"a/b", "c1", opts{QoS: 0, SubID: 1}},
		{"a/+", "c1", opts{QoS: 2, SubID: 2}},
		{"#", "c1", opts{QoS: 1, SubID: 3}},
		{"a/#", "c2", opts{QoS: 1, SubID: 4}},
		{"x", "c2", opts{QoS: 2, SubID: 5}},
		{"$share/g/a/b", "c1", opts{QoS: 1, SubID: 6}},
		{"$share/h/+/b", "c1", opts{QoS: 0, SubID: 7}},
		{"+/b", "c3", opts{QoS: 1}},
	} {
		mustSub(t, tr, s.filter, s.key, s.o, true)
	}
	return tr
}

// TestDeliveryMaxQoS is the 3.1.1 style: one copy per client at the highest
// QoS of its matching subscriptions, plus one per share group.
func TestDeliveryMaxQoS(t *testing.T) {
	tr := overlapTrie(t)
	var got []string
	ForEachDelivery(tr.Match("a/b", nil), func(run []Sub[string, opts]) {
		q := byte(0)
		for _, s := range run {
			q = max(q, s.Value.QoS)
		}
		got = append(got, fmt.Sprintf("%s%s:%d", run[0].Key, run[0].Group, q))
	})
	slices.Sort(got)
	want := []string{"c1:2", "c1g:1", "c1h:0", "c2:1", "c3:1"}
	if !slices.Equal(got, want) {
		t.Errorf("deliveries %q, want %q", got, want)
	}
}

// TestDeliverySubscriptionIDs is the 5.0 style: one copy per client carrying
// every matching subscription identifier [MQTT-3.3.4-4].
func TestDeliverySubscriptionIDs(t *testing.T) {
	tr := overlapTrie(t)
	got := map[string][]uint32{}
	ForEachDelivery(tr.Match("a/b", nil), func(run []Sub[string, opts]) {
		k := run[0].Key + run[0].Group
		if _, dup := got[k]; dup {
			t.Errorf("second delivery for %s", k)
		}
		ids := []uint32{}
		for _, s := range run {
			if s.Value.SubID != 0 {
				ids = append(ids, s.Value.SubID)
			}
		}
		slices.Sort(ids)
		got[k] = ids
	})
	want := map[string][]uint32{
		"c1": {1, 2, 3}, "c1g": {6}, "c1h": {7}, "c2": {4}, "c3": {},
	}
	if !maps.EqualFunc(got, want, slices.Equal) {
		t.Errorf("deliveries %v, want %v", got, want)
	}
}

func TestForEachDeliveryEmpty(t *testing.T) {
	calls := 0
	ForEachDelivery([]Sub[int, int](nil), func([]Sub[int, int]) { calls++ })
	if calls != 0 {
		t.Errorf("fn called %d times for no subscriptions", calls)
	}
}

func TestForEachDeliveryDoesNotAllocate(t *testing.T) {
	tr := overlapTrie(t)
	buf := make([]Sub[string, opts], 0, 16)
	n := 0
	allocs := testing.AllocsPerRun(100, func() {
		n = 0
		buf = tr.Match("a/b", buf[:0])
		ForEachDelivery(buf, func(run []Sub[string, opts]) { n++ })
	})
	if allocs != 0 || n != 5 {
		t.Errorf("%v allocs, %d deliveries", allocs, n)
	}
}

// TestForEachDeliveryAgainstModel subscribes random keys to random
// filters, a few of them shared, and checks every delivery for random
// topics against a model built with Matches: one run per key holding
// exactly its matching normal filters, one run per matching shared
// subscription. Topics that only one filter matches take the path that
// does not sort.
func TestForEachDeliveryAgainstModel(t *testing.T) {
	levels := []string{"a", "b", "+"}
	rng := rand.New(rand.NewPCG(1, 2))
	randFilter := func() string {
		var parts []string
		for n := 1 + rng.IntN(3); len(parts) < n; {
			parts = append(parts, levels[rng.IntN(len(levels))])
		}
		if rng.IntN(4) == 0 {
			parts = append(parts, "#")
		}
		return strings.Join(parts, "/")
	}
	for round := range 200 {
		tr := New[string, opts](Options{})
		type sub struct{ filter, key string }
		var subs []sub
		for range 1 + rng.IntN(12) {
			s := sub{randFilter(), fmt.Sprintf("k%d", rng.IntN(6))}
			if rng.IntN(5) == 0 {
				s.filter = "$share/g" + s.key + "/" + s.filter
			}
			if _, err := tr.Subscribe(s.filter, s.key, opts{}); err != nil {
				t.Fatal(err)
			}
			subs = append(subs, s)
		}
		for _, topic := range []string{"a", "b", "a/b", "b/a", "a/a/b", "b/b/b", "a/b/a/b"} {
			want := map[string][]string{} // a key, or a key's share group on a filter, to its filters
			for _, s := range subs {
				f, k := s.filter, s.key
				if rest, ok := strings.CutPrefix(f, "$share/"); ok {
					g, plain, _ := strings.Cut(rest, "/")
					if Matches(plain, topic) {
						want[k+"|"+g+"|"+plain] = []string{plain}
					}
					continue
				}
				if Matches(f, topic) && !slices.Contains(want[k], f) {
					want[k] = append(want[k], f)
				}
			}
			got := map[string][]string{}
			ForEachDelivery(tr.Match(topic, nil), func(run []Sub[string, opts]) {
				k := run[0].Key
				if run[0].Group != "" {
					k += "|" + run[0].Group + "|" + run[0].Filter
				}
				if _, dup := got[k]; dup {
					t.Errorf("round %d, %q: a second delivery for %s", round, topic, k)
				}
				for _, s := range run {
					if s.Key != run[0].Key {
						t.Errorf("round %d, %q: keys %s and %s in one run", round, topic, run[0].Key, s.Key)
					}
					got[k] = append(got[k], s.Filter)
				}
			})
			for k := range want {
				slices.Sort(want[k])
			}
			for k := range got {
				slices.Sort(got[k])
			}
			if !maps.EqualFunc(got, want, slices.Equal) {
				t.Fatalf("round %d, %q with %v: deliveries %v, want %v", round, topic, subs, got, want)
			}
		}
	}
}

// BenchmarkForEachDeliveryOneFilter is a fan-out: 100 clients on one
// filter, the path that needs no sort.
func BenchmarkForEachDeliveryOneFilter(b *testing.B) {
	tr := New[string, opts](Options{})
	for i := range 100 {
		if _, err := tr.Subscribe("bench/fanout", fmt.Sprintf("c%d", i), opts{}); err != nil {
			b.Fatal(err)
		}
	}
	buf := tr.Match("bench/fanout", nil)
	n := 0
	for b.Loop() {
		buf = tr.Match("bench/fanout", buf[:0])
		ForEachDelivery(buf, func([]Sub[string, opts]) { n++ })
	}
}
