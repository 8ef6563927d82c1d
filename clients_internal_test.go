package mqttd

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// The registry's table agrees with a map through random puts, replacements
// and removals, at every size it grows through and with runs that wrap
// around its end.
func TestClientsByID(t *testing.T) {
	for _, ids := range []int{12, 600} {
		testClientsByID(t, ids)
	}
}

func testClientsByID(t *testing.T, ids int) {
	rng := rand.New(rand.NewPCG(1, uint64(ids)))
	var tab clientsByID
	want := map[string]*client{}
	check := func(step int) {
		t.Helper()
		if tab.len() != len(want) {
			t.Fatalf("step %d: len %d, want %d", step, tab.len(), len(want))
		}
		seen := 0
		for cl := range tab.all {
			if want[cl.id] != cl {
				t.Fatalf("step %d: all yields %q, not the client put last", step, cl.id)
			}
			seen++
		}
		if seen != len(want) {
			t.Fatalf("step %d: all yields %d clients, want %d", step, seen, len(want))
		}
	}
	for step := range 20_000 {
		id := strconv.Itoa(rng.IntN(ids))
		switch rng.IntN(3) {
		case 0, 1:
			if step > 10_000 && rng.IntN(2) == 0 { // shrink again: removals only
				tab.remove(id)
				delete(want, id)
				break
			}
			cl := &client{id: id}
			tab.put(cl)
			want[id] = cl
		case 2:
			tab.remove(id)
			delete(want, id)
		}
		if got := tab.get(id); got != want[id] {
			t.Fatalf("step %d: get(%q) = %p, want %p", step, id, got, want[id])
		}
		if step%50 == 0 {
			check(step)
			for id, cl := range want {
				if tab.get(id) != cl {
					t.Fatalf("step %d: get(%q) lost its client", step, id)
				}
			}
		}
	}
	check(-1)
	for id := range want {
		tab.remove(id)
	}
	if tab.len() != 0 || tab.get("1") != nil {
		t.Fatal("the table is not empty after removing everything")
	}
}
