package namedset

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

type member struct{ name string }

func (m *member) SetName() string { return m.name }

// TestAgainstMap: the set agrees with a map through random puts,
// replacements and removals, at every size it grows through, with runs
// that wrap around its end, and empties again.
func TestAgainstMap(t *testing.T) {
	for _, names := range []int{12, 600} {
		rng := rand.New(rand.NewPCG(1, uint64(names)))
		var s Set[member, *member]
		want := map[string]*member{}
		check := func(step int) {
			t.Helper()
			if s.Len() != len(want) {
				t.Fatalf("step %d: Len %d, want %d", step, s.Len(), len(want))
			}
			seen := 0
			for m := range s.All {
				if want[m.name] != m {
					t.Fatalf("step %d: All yields %q, not the member put last", step, m.name)
				}
				seen++
			}
			if seen != len(want) {
				t.Fatalf("step %d: All yields %d members, want %d", step, seen, len(want))
			}
			for name, m := range want {
				if s.Get(name) != m {
					t.Fatalf("step %d: Get(%q) lost its member", step, name)
				}
			}
		}
		for step := range 20_000 {
			name := strconv.Itoa(rng.IntN(names))
			switch rng.IntN(3) {
			case 0, 1:
				if step > 10_000 && rng.IntN(2) == 0 { // shrink again: removals only
					s.Remove(name)
					delete(want, name)
					break
				}
				m := &member{name}
				s.Put(m)
				want[name] = m
			case 2:
				s.Remove(name)
				delete(want, name)
			}
			if got := s.Get(name); got != want[name] {
				t.Fatalf("step %d: Get(%q) = %p, want %p", step, name, got, want[name])
			}
			if step%50 == 0 {
				check(step)
			}
		}
		check(-1)
		for name := range want {
			s.Remove(name)
		}
		if s.Len() != 0 || s.Get("1") != nil {
			t.Fatal("the set is not empty after removing everything")
		}
	}
}
