package topictrie

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// opts is the per-subscription value tests store, shaped like the broker's.
type opts struct {
	QoS   byte
	SubID uint32
}

// matchedFilters subscribes key i to filters[i] in a new trie and returns the
// sorted filters (raw, with any $share prefix) that match topic.
func matchedFilters(t *testing.T, filters []string, topic string) []string {
	t.Helper()
	tr := New[int, string](Options{})
	for i, f := range filters {
		if _, err := tr.Subscribe(f, i, f); err != nil {
			t.Fatalf("Subscribe(%q): %v", f, err)
		}
	}
	var got []string
	for _, s := range tr.Match(topic, nil) {
		got = append(got, s.Value)
	}
	slices.Sort(got)
	return got
}

func TestMatchRules(t *testing.T) {
	all := []string{
		"#", "+", "+/+", "+/#", "/+", "/#", "+/", "a", "a/", "a/#", "a/+", "a/b",
		"a/+/c", "+/b/c", "a/b/+", "a/b/c", "a/b/#", "a//b", "a/+/b", "+/+/+",
		"$SYS/#", "$SYS/+", "$SYS", "+/broker", "$share/g/a/b",
	}
	tests := []struct {
		topic string
		want  []string
	}{
		{"a", []string{"#", "+", "+/#", "a", "a/#"}},
		{"a/b", []string{"#", "$share/g/a/b", "+/#", "+/+", "a/#", "a/+", "a/b", "a/b/#"}},
		{"a/b/c", []string{"#", "+/#", "+/+/+", "+/b/c", "a/#", "a/+/c", "a/b/#", "a/b/+", "a/b/c"}},
		// Empty levels are levels: + matches them.
		{"a/", []string{"#", "+/", "+/#", "+/+", "a/", "a/#", "a/+"}},
		{"/a", []string{"#", "+/#", "+/+", "/#", "/+"}},
		{"/", []string{"#", "+/", "+/#", "+/+", "/#", "/+"}},
		{"a//b", []string{"#", "+/#", "+/+/+", "a/#", "a/+/b", "a//b"}},
		{"//", []string{"#", "+/#", "+/+/+", "/#"}},
		{"x/y/z/w", []string{"#", "+/#"}},
		// [MQTT-4.7.2-1] no first-level wildcard matches a $ topic.
		{"$SYS", []string{"$SYS", "$SYS/#"}},
		{"$SYS/broker", []string{"$SYS/#", "$SYS/+"}},
		{"$SYS/a/b", []string{"$SYS/#"}},
		{"$", nil},
		{"$x/b/c", nil},
		// Only a leading $ is special.
		{"a/$b", []string{"#", "+/#", "+/+", "a/#", "a/+"}},
		{"#", []string{"#", "+", "+/#"}},
	}
	for _, tt := range tests {
		got := matchedFilters(t, all, tt.topic)
		if !slices.Equal(got, tt.want) {
			t.Errorf("Match(%q)\n got %q\nwant %q", tt.topic, got, tt.want)
		}
	}
}

func TestPlusAtEveryPosition(t *testing.T) {
	topic := "a/b/c/d"
	levels := strings.Split(topic, "/")
	for mask := 0; mask < 1<<len(levels); mask++ {
		f := slices.Clone(levels)
		for i := range f {
			if mask&(1<<i) != 0 {
				f[i] = "+"
			}
		}
		filter := strings.Join(f, "/")
		if got := matchedFilters(t, []string{filter}, topic); len(got) != 1 {
			t.Errorf("%q does not match %q", filter, topic)
		}
		if got := matchedFilters(t, []string{filter}, topic+"/e"); len(got) != 0 {
			t.Errorf("%q matches %q", filter, topic+"/e")
		}
		if got := matchedFilters(t, []string{filter + "/#"}, topic); len(got) != 1 {
			t.Errorf("%q does not match parent %q", filter+"/#", topic)
		}
	}
}

func TestSubscribeReplacesValue(t *testing.T) {
	tr := New[string, opts](Options{})
	mustSub(t, tr, "a/+", "c1", opts{QoS: 0}, true)
	mustSub(t, tr, "a/+", "c1", opts{QoS: 2}, false)
	mustSub(t, tr, "a/b", "c1", opts{QoS: 1}, true)
	mustSub(t, tr, "a/+", "c2", opts{QoS: 1}, true)
	if n := tr.Len(); n != 3 {
		t.Fatalf("Len = %d, want 3", n)
	}
	got := tr.Match("a/b", nil)
	if len(got) != 3 {
		t.Fatalf("Match returned %d subscriptions, want 3: %+v", len(got), got)
	}
	for _, s := range got {
		if s.Key == "c1" && s.Filter == "a/+" && s.Value.QoS != 2 {
			t.Errorf("replaced value not returned: %+v", s)
		}
	}
}

func mustSub[V any](t *testing.T, tr *Trie[string, V], filter, key string, v V, wantNew bool) {
	t.Helper()
	isNew, err := tr.Subscribe(filter, key, v)
	if err != nil {
		t.Fatalf("Subscribe(%q, %q): %v", filter, key, err)
	}
	if isNew != wantNew {
		t.Fatalf("Subscribe(%q, %q) new = %v, want %v", filter, key, isNew, wantNew)
	}
}

func TestSubscribeInvalid(t *testing.T) {
	tr := New[int, int](Options{})
	for _, f := range []string{"a/#/b", "a#", "#/", "a+/b", "+a", "", "$share//t", "$share/g"} {
		if _, err := tr.Subscribe(f, 1, 0); err == nil {
			t.Errorf("Subscribe(%q) accepted", f)
		}
		if tr.Unsubscribe(f, 1) {
			t.Errorf("Unsubscribe(%q) reported a subscription", f)
		}
	}
	if tr.Len() != 0 {
		t.Errorf("Len = %d after invalid subscribes", tr.Len())
	}
}

func TestUnsubscribe(t *testing.T) {
	tr := New[string, int](Options{})
	filters := []string{"a/b", "a/+", "a/#", "#", "+/b", "$share/g/a/b", "a/b/c"}
	for _, f := range filters {
		mustSub(t, tr, f, "c1", 1, true)
		mustSub(t, tr, f, "c2", 2, true)
	}
	if tr.Unsubscribe("a/b/c/d", "c1") || tr.Unsubscribe("a/b", "c3") || tr.Unsubscribe("$share/h/a/b", "c1") {
		t.Fatal("Unsubscribe of a missing subscription reported true")
	}
	for _, f := range filters {
		if !tr.Unsubscribe(f, "c1") {
			t.Fatalf("Unsubscribe(%q, c1) = false", f)
		}
		if tr.Unsubscribe(f, "c1") {
			t.Fatalf("second Unsubscribe(%q, c1) = true", f)
		}
	}
	for _, s := range tr.Match("a/b", nil) {
		if s.Key != "c2" {
			t.Errorf("c1 still matched: %+v", s)
		}
	}
	for _, f := range filters {
		tr.Unsubscribe(f, "c2")
	}
	if tr.Len() != 0 || len(tr.keys.ids) != 0 {
		t.Errorf("Len = %d, key ids = %d after removing everything", tr.Len(), len(tr.keys.ids))
	}
	if tr.root.children.len() != 0 || tr.root.wild != nil {
		t.Error("empty nodes were not pruned")
	}
}

// TestManySubscribersOneFilter crosses the set's index threshold both ways.
func TestManySubscribersOneFilter(t *testing.T) {
	tr := New[int, int](Options{})
	const n = 100
	for i := range n {
		if _, err := tr.Subscribe("a/b", i, i); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i += 2 {
		if !tr.Unsubscribe("a/b", i) {
			t.Fatalf("Unsubscribe(%d) = false", i)
		}
	}
	got := tr.Match("a/b", nil)
	if len(got) != n/2 {
		t.Fatalf("Match returned %d, want %d", len(got), n/2)
	}
	for _, s := range got {
		if s.Key%2 == 0 || s.Value != s.Key {
			t.Errorf("unexpected subscription %+v", s)
		}
	}
	for i := 1; i < n-4; i += 2 {
		tr.Unsubscribe("a/b", i)
	}
	if isNew, _ := tr.Subscribe("a/b", n-1, -1); isNew {
		t.Error("existing member reported new after the index was dropped")
	}
	if got := tr.Match("a/b", got[:0]); len(got) != 2 {
		t.Errorf("Match returned %d, want 2", len(got))
	}
}

func TestMatchAppendsToBuffer(t *testing.T) {
	tr := New[int, int](Options{})
	if _, err := tr.Subscribe("a", 1, 0); err != nil {
		t.Fatal(err)
	}
	buf := make([]Sub[int, int], 1, 8)
	buf = tr.Match("a", buf)
	if len(buf) != 2 || buf[1].Key != 1 {
		t.Errorf("Match did not append: %+v", buf)
	}
}

func TestMatchDoesNotAllocate(t *testing.T) {
	tr := New[int, opts](Options{})
	for i, f := range []string{"a/b/c", "a/+/c", "a/#", "#", "$share/g/a/b/c", "x/y"} {
		if _, err := tr.Subscribe(f, i, opts{}); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]Sub[int, opts], 0, 16)
	allocs := testing.AllocsPerRun(100, func() {
		buf = tr.Match("a/b/c", buf[:0])
	})
	if allocs != 0 || len(buf) != 5 {
		t.Errorf("Match: %v allocs, %d results", allocs, len(buf))
	}
}

// TestDeepTopicMatchIsCheap matches a topic of 30,000 levels: the walk stops
// where the trie ends instead of splitting the whole topic.
func TestDeepTopicMatchIsCheap(t *testing.T) {
	tr := New[int, int](Options{})
	for i, f := range []string{"a/#", "+/+", "a/a/a"} {
		if _, err := tr.Subscribe(f, i, 0); err != nil {
			t.Fatal(err)
		}
	}
	got := tr.Match(strings.Repeat("a/", 30000)+"a", nil)
	if len(got) != 1 || got[0].Filter != "a/#" {
		t.Errorf("Match of a deep topic = %+v", got)
	}
}

func TestFilterReported(t *testing.T) {
	tr := New[int, int](Options{})
	if _, err := tr.Subscribe("$share/grp/a/+", 1, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Subscribe("a/+", 2, 0); err != nil {
		t.Fatal(err)
	}
	got := tr.Match("a/b", nil)
	slices.SortFunc(got, func(a, b Sub[int, int]) int { return a.Key - b.Key })
	want := []Sub[int, int]{
		{Key: 1, Filter: "a/+", Group: "grp", KeyID: got[0].KeyID},
		{Key: 2, Filter: "a/+", KeyID: got[1].KeyID},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Match = %+v, want %+v", got, want)
	}
	if got[0].KeyID == got[1].KeyID {
		t.Error("different keys share a KeyID")
	}
}

func TestKeyIDsReused(t *testing.T) {
	tr := New[string, int](Options{})
	mustSub(t, tr, "a", "x", 0, true)
	mustSub(t, tr, "b", "x", 0, true)
	idA, idB := tr.Match("a", nil)[0].KeyID, tr.Match("b", nil)[0].KeyID
	if idA != idB {
		t.Fatalf("one key, two KeyIDs: %d, %d", idA, idB)
	}
	tr.Unsubscribe("a", "x")
	tr.Unsubscribe("b", "x")
	mustSub(t, tr, "c", "y", 0, true)
	if id := tr.Match("c", nil)[0].KeyID; id != idA {
		t.Errorf("released KeyID %d not reused, got %d", idA, id)
	}
}

func TestOptionsStrategyUsed(t *testing.T) {
	tr := New[int, int](Options{Strategy: HashPublisher{}})
	for i := range 4 {
		if _, err := tr.Subscribe("$share/g/t", i, 0); err != nil {
			t.Fatal(err)
		}
	}
	for p := range uint64(8) {
		got := tr.MatchFrom("t", p, nil)
		if len(got) != 1 || got[0].Key != int(p%4) {
			t.Errorf("MatchFrom(publisher %d) = %+v", p, got)
		}
	}
	limited := New[int, int](Options{Limits: Limits{MaxLevels: 1}})
	if _, err := limited.Subscribe("a/b", 1, 0); !errors.Is(err, ErrTooManyLevels) {
		t.Errorf("Options.Limits not applied: %v", err)
	}
}

// TestSubscribedUnder follows $SYS subscriptions, plain and shared, in and
// out: wildcards at the first level and other $ levels do not count, and
// the level is gone once its last subscription is.
func TestSubscribedUnder(t *testing.T) {
	tr := New[int, opts](Options{})
	for i, f := range []string{"#", "+/broker", "$SYSX/a", "a/$SYS"} {
		if _, err := tr.Subscribe(f, i, opts{}); err != nil {
			t.Fatal(err)
		}
	}
	if tr.SubscribedUnder("$SYS") {
		t.Fatal("SubscribedUnder($SYS) with no filter starting with $SYS")
	}
	for _, f := range []string{"$SYS/broker/uptime", "$share/g/$SYS/#", "$SYS"} {
		if _, err := tr.Subscribe(f, 9, opts{}); err != nil {
			t.Fatal(err)
		}
		if !tr.SubscribedUnder("$SYS") {
			t.Errorf("SubscribedUnder($SYS) false with %q subscribed", f)
		}
		if !tr.Unsubscribe(f, 9) {
			t.Fatalf("Unsubscribe(%q) found nothing", f)
		}
		if tr.SubscribedUnder("$SYS") {
			t.Errorf("SubscribedUnder($SYS) true after %q left", f)
		}
	}
}

// TestGeneration: every Subscribe and Unsubscribe moves the trie's
// generation, a Match does not.
func TestGeneration(t *testing.T) {
	tr := New[int, int](Options{})
	g := tr.Generation()
	step := func(what string, f func()) {
		t.Helper()
		f()
		if now := tr.Generation(); now == g {
			t.Errorf("%s: generation still %d", what, g)
		} else {
			g = now
		}
	}
	step("subscribe", func() { tr.Subscribe("a/+", 1, 1) })
	step("the same subscription again, another value", func() { tr.Subscribe("a/+", 1, 2) })
	step("a share group member", func() { tr.Subscribe("$share/g/a/b", 2, 1) })
	tr.Match("a/b", nil)
	if tr.Generation() != g {
		t.Error("Match moved the generation")
	}
	step("unsubscribe", func() { tr.Unsubscribe("a/+", 1) })
	step("unsubscribe the share group member", func() { tr.Unsubscribe("$share/g/a/b", 2) })
}
