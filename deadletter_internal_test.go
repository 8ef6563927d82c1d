package mqttd

import (
	"slices"
	"testing"
)

// TestKeptLettersRoom: a letter replacing one on its topic counts once
// and becomes the newest; past either bound the oldest are cleared, but
// never the one just set aside.
func TestKeptLettersRoom(t *testing.T) {
	var k keptLetters
	for _, step := range []struct {
		topic string
		size  int64
		evict []string
		order []string
	}{
		{"a", 10, nil, []string{"a"}},
		{"b", 10, nil, []string{"a", "b"}},
		{"a", 20, nil, []string{"b", "a"}},           // replaced: newest now, 30 bytes in all
		{"c", 10, []string{"b"}, []string{"a", "c"}}, // 3 letters > 2
		{"d", 45, []string{"a", "c"}, []string{"d"}}, // 75 bytes > 50, the new one stays
		{"e", 60, []string{"d"}, []string{"e"}},      // alone over the bytes: kept, its size checked by add
	} {
		evict := k.room(step.topic, step.size, 2, 50)
		if !slices.Equal(evict, step.evict) || !slices.Equal(k.order, step.order) || k.bytes != sumSizes(k) {
			t.Fatalf("after %s (%d bytes): cleared %v, kept %v (%d bytes); want cleared %v, kept %v",
				step.topic, step.size, evict, k.order, k.bytes, step.evict, step.order)
		}
	}
}

func sumSizes(k keptLetters) (n int64) {
	for _, t := range k.order {
		n += k.size[t]
	}
	return n
}

// TestKeptLettersForget: a letter an operator cleared no longer counts
// against the bounds, so it does not push out a newer one.
func TestKeptLettersForget(t *testing.T) {
	var k keptLetters
	k.room("a", 10, 2, 0)
	k.room("b", 10, 2, 0)
	k.forget("a")
	k.forget("nothing")
	if evict := k.room("c", 10, 2, 0); len(evict) != 0 || k.bytes != 20 || !slices.Equal(k.order, []string{"b", "c"}) {
		t.Errorf("after forgetting a: evicted %v, %d bytes, order %v; want none, 20, [b c]", evict, k.bytes, k.order)
	}
}
