package topictrie

import (
	"maps"
	"math/rand/v2"
	"strconv"
	"testing"
)

// testLevel is a node of levels that knows its name, as the tries' do.
type testLevel struct{ name string }

func (n *testLevel) SetName() string { return n.name }

// TestLevelsAgainstMap drives levels through the slice and table forms and
// back with random puts and removes, checking it against a plain map.
func TestLevelsAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var l levels[testLevel, *testLevel]
	ref := map[string]*testLevel{}
	sawBig, sawSmallAfterBig := false, false
	for i := range 5000 {
		name := strconv.Itoa(rng.IntN(3 * smallLevels))
		if _, ok := ref[name]; ok {
			l.remove(name)
			delete(ref, name)
		} else {
			v := &testLevel{name}
			l.put(name, v)
			ref[name] = v
		}
		if l.big != nil {
			sawBig = true
		} else if sawBig {
			sawSmallAfterBig = true
		}
		if l.len() != len(ref) {
			t.Fatalf("step %d: len %d, want %d", i, l.len(), len(ref))
		}
		got := map[string]*testLevel{}
		for k, n := range l.all {
			got[k] = n
		}
		if !maps.Equal(got, ref) {
			t.Fatalf("step %d: all() = %v, want %v", i, got, ref)
		}
		if l.get(name) != ref[name] {
			t.Fatalf("step %d: get(%q) = %v, want %v", i, name, l.get(name), ref[name])
		}
		for k, n := range ref {
			if l.get(k) != n {
				t.Fatalf("step %d: get(%q) lost its child", i, k)
			}
		}
	}
	if !sawBig || !sawSmallAfterBig {
		t.Errorf("did not cover both forms: big %v, back to small %v", sawBig, sawSmallAfterBig)
	}
}

func TestLevelsAllStopsEarly(t *testing.T) {
	for _, n := range []int{3, 3 * smallLevels} {
		var l levels[testLevel, *testLevel]
		for i := range n {
			l.put(strconv.Itoa(i), &testLevel{strconv.Itoa(i)})
		}
		seen := 0
		for range l.all {
			seen++
			break
		}
		if seen != 1 {
			t.Errorf("%d children: loop body ran %d times after break", n, seen)
		}
	}
}
