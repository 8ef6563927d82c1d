package topictrie

import (
	"fmt"
	"maps"
	"slices"
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
