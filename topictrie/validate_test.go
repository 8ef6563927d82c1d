package topictrie

import (
	"errors"
	"strings"
	"testing"
)

func TestValidTopicName(t *testing.T) {
	tests := []struct {
		name string
		want error
	}{
		{"a", nil},
		{"a/b/c", nil},
		{"/", nil},
		{"/a", nil},
		{"a/", nil},
		{"a//b", nil},
		{"$SYS/broker", nil},
		{"\uFEFFbom/kept", nil},
		{"caf\u00e9/\u4e16\u754c", nil},
		{"", ErrEmpty},
		{"a/+", ErrWildcardInName},
		{"a/#", ErrWildcardInName},
		{"+", ErrWildcardInName},
		{"#", ErrWildcardInName},
		{"a+b", ErrWildcardInName},
		{"a\x00b", ErrNull},
		{strings.Repeat("x", 65535), nil},
		{strings.Repeat("x", 65536), ErrTooLong},
		{strings.Repeat("/", DefaultMaxLevels-1), nil},
		{strings.Repeat("/", DefaultMaxLevels), ErrTooManyLevels},
	}
	for _, tt := range tests {
		if err := ValidTopicName(tt.name); !errors.Is(err, tt.want) {
			t.Errorf("ValidTopicName(%.20q) = %v, want %v", tt.name, err, tt.want)
		}
	}
}

func TestValidFilter(t *testing.T) {
	tests := []struct {
		filter string
		want   error
	}{
		{"a", nil},
		{"#", nil},
		{"+", nil},
		{"/", nil},
		{"+/+", nil},
		{"/+", nil},
		{"+/", nil},
		{"a/#", nil},
		{"a/+/b", nil},
		{"+/a/#", nil},
		{"a//b", nil},
		{"/#", nil},
		{"$SYS/#", nil},
		{"$share", nil},
		{"a/#/b", ErrBadWildcard},
		{"a#", ErrBadWildcard},
		{"#/", ErrBadWildcard},
		{"##", ErrBadWildcard},
		{"a/b#", ErrBadWildcard},
		{"a+/b", ErrBadWildcard},
		{"+a", ErrBadWildcard},
		{"a/+b", ErrBadWildcard},
		{"a/b+", ErrBadWildcard},
		{"++", ErrBadWildcard},
		{"+#", ErrBadWildcard},
		{"", ErrEmpty},
		{"a/\x00", ErrNull},
		{strings.Repeat("x", 65536), ErrTooLong},
		{strings.Repeat("+/", 10000) + "#", ErrTooManyLevels},
	}
	for _, tt := range tests {
		if err := ValidFilter(tt.filter); !errors.Is(err, tt.want) {
			t.Errorf("ValidFilter(%.20q) = %v, want %v", tt.filter, err, tt.want)
		}
	}
}

func TestParseFilterShared(t *testing.T) {
	tests := []struct {
		filter string
		want   Filter
		err    error
	}{
		{"$share/g/t", Filter{Group: "g", Topic: "t"}, nil},
		{"$share/g/a/+/#", Filter{Group: "g", Topic: "a/+/#"}, nil},
		{"$share/g/#", Filter{Group: "g", Topic: "#"}, nil},
		{"$share/g//", Filter{Group: "g", Topic: "/"}, nil},
		{"$share/g/$SYS/x", Filter{Group: "g", Topic: "$SYS/x"}, nil},
		{"$share/$share/x", Filter{Group: "$share", Topic: "x"}, nil},
		{"a/b", Filter{Topic: "a/b"}, nil},
		{"$share", Filter{Topic: "$share"}, nil},
		{"$sharex/g/t", Filter{Topic: "$sharex/g/t"}, nil},
		{"$share//t", Filter{}, ErrShareName},
		{"$share/a+b/t", Filter{}, ErrShareName},
		{"$share/+/t", Filter{}, ErrShareName},
		{"$share/#/t", Filter{}, ErrShareName},
		{"$share/g\x00/t", Filter{}, ErrShareName},
		{"$share/", Filter{}, ErrShareName},
		{"$share/a#", Filter{}, ErrShareName},
		{"$share/g", Filter{}, ErrShareFilter},
		{"$share/g/", Filter{}, ErrShareFilter},
		{"$share/g/a#", Filter{Group: "g", Topic: "a#"}, ErrBadWildcard},
		{"$share/g/a/#/b", Filter{Group: "g", Topic: "a/#/b"}, ErrBadWildcard},
		{"$share/g/" + strings.Repeat("x", 65535), Filter{}, ErrTooLong},
	}
	for _, tt := range tests {
		got, err := ParseFilter(tt.filter)
		if !errors.Is(err, tt.err) {
			t.Errorf("ParseFilter(%.30q) error = %v, want %v", tt.filter, err, tt.err)
			continue
		}
		if err == nil && got != tt.want {
			t.Errorf("ParseFilter(%q) = %+v, want %+v", tt.filter, got, tt.want)
		}
	}
}

func TestSharedLevelsCountInnerFilter(t *testing.T) {
	l := Limits{MaxLevels: 3}
	if err := l.ValidFilter("$share/g/a/b/c"); err != nil {
		t.Errorf("3-level shared filter: %v", err)
	}
	if err := l.ValidFilter("$share/g/a/b/c/d"); !errors.Is(err, ErrTooManyLevels) {
		t.Errorf("4-level shared filter: %v, want ErrTooManyLevels", err)
	}
}

func TestLimits(t *testing.T) {
	l := Limits{MaxLength: 5, MaxLevels: 2}
	tests := []struct {
		topic string
		want  error
	}{
		{"a/b", nil},
		{"abcde", nil},
		{"abcdef", ErrTooLong},
		{"a/b/c", ErrTooManyLevels},
	}
	for _, tt := range tests {
		if err := l.ValidTopicName(tt.topic); !errors.Is(err, tt.want) {
			t.Errorf("ValidTopicName(%q) = %v, want %v", tt.topic, err, tt.want)
		}
		if err := l.ValidFilter(tt.topic); !errors.Is(err, tt.want) {
			t.Errorf("ValidFilter(%q) = %v, want %v", tt.topic, err, tt.want)
		}
	}
}

// TestManyLevelsRejectedCheaply checks the CVE-2019-11779 defence: a topic of
// 10,000 levels is refused without allocating (nothing splits it).
func TestManyLevelsRejectedCheaply(t *testing.T) {
	topic := strings.Repeat("a/", 10000) + "a"
	filter := strings.Repeat("+/", 10000) + "#"
	allocs := testing.AllocsPerRun(100, func() {
		if !errors.Is(ValidTopicName(topic), ErrTooManyLevels) {
			t.Error("10,000-level topic name accepted")
		}
		if !errors.Is(ValidFilter(filter), ErrTooManyLevels) {
			t.Error("10,000-level filter accepted")
		}
	})
	if allocs != 0 {
		t.Errorf("rejecting a deep topic allocated %v times", allocs)
	}
	tr := New[int, int](Options{})
	if _, err := tr.Subscribe(filter, 1, 0); !errors.Is(err, ErrTooManyLevels) {
		t.Errorf("Subscribe of a 10,000-level filter: %v", err)
	}
	if _, err := NewRetained[int](Limits{}).Set(topic, 1); !errors.Is(err, ErrTooManyLevels) {
		t.Errorf("Retained.Set of a 10,000-level topic: %v", err)
	}
}

func BenchmarkRejectDeepTopic(b *testing.B) {
	topic := strings.Repeat("/", 10000)
	b.ReportAllocs()
	for b.Loop() {
		if ValidTopicName(topic) == nil {
			b.Fatal("accepted")
		}
	}
}

// TestMatchesAgreesWithTrie checks Matches against the trie itself over
// filters and topics that exercise every rule: each filter subscribed,
// a topic must match exactly the filters Matches says it does.
func TestMatchesAgreesWithTrie(t *testing.T) {
	filters := []string{"#", "+", "a", "a/#", "a/+", "+/b", "a/b", "a/+/c", "+/+", "/#", "+/", "a//c", "$SYS/#", "$SYS/+", "a/b/#"}
	topics := []string{"a", "a/b", "a/b/c", "a//c", "/", "/a", "b", "$SYS", "$SYS/x", "a/", "x/b", "a/x/c", "$x/b"}
	tr := New[string, int](Options{})
	for _, f := range filters {
		if _, err := tr.Subscribe(f, f, 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, topic := range topics {
		matched := map[string]bool{}
		for _, s := range tr.Match(topic, nil) {
			matched[s.Key] = true
		}
		for _, f := range filters {
			if got := Matches(f, topic); got != matched[f] {
				t.Errorf("Matches(%q, %q) = %v, the trie says %v", f, topic, got, matched[f])
			}
		}
	}
}
