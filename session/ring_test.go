package session

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestRingFindAgainstModel runs pushes, pops and removals from anywhere
// (tombstones, compactions, growth across the wrap) against a plain slice
// of the live entries: after every step find gives each live entry's
// position, as each and at see it, and -1 for ids not in the ring.
func TestRingFindAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var r ring
	var live, gone []uint16 // packet ids in ring order; ids removed
	next := uint64(0)
	for step := range 20000 {
		// Every other phase keeps the head and takes entries behind it,
		// leaving tombstones until the ring compacts.
		keepHead := step/1000%2 == 1
		switch op := rng.IntN(10); {
		case op < 5 && len(live) < 300:
			next++
			id := PacketIDOf(next)
			r.push(Outbound{Seq: next, PacketID: id})
			live = append(live, id)
		case op < 6 && len(live) > 0 && !keepHead:
			if o := r.pop(); o.PacketID != live[0] {
				t.Fatalf("step %d: pop gave %d, want %d", step, o.PacketID, live[0])
			}
			gone = append(gone, live[0])
			live = live[1:]
		case len(live) > 1 || len(live) == 1 && !keepHead:
			k := rng.IntN(len(live))
			if k > 0 && rng.IntN(2) == 0 {
				k = len(live) - 1 - rng.IntN(min(len(live), 4)) // near the tail
			}
			if keepHead && k == 0 {
				k = 1
			}
			gone = append(gone, live[k])
			i := r.find(live[k])
			if i < 0 || r.at(i).PacketID != live[k] {
				t.Fatalf("step %d: find(%d) = %d", step, live[k], i)
			}
			r.remove(i)
			live = slices.Delete(live, k, k+1)
		}
		var seen []uint16
		r.each(func(o *Outbound) { seen = append(seen, o.PacketID) })
		if !slices.Equal(seen, live) {
			t.Fatalf("step %d: ring holds %v, want %v", step, seen, live)
		}
		for _, id := range live {
			if i := r.find(id); i < 0 || r.at(i).PacketID != id {
				t.Fatalf("step %d: find(%d) = %d", step, id, i)
			}
		}
		if len(gone) > 64 {
			gone = gone[len(gone)-64:]
		}
		for _, id := range append([]uint16{0, PacketIDOf(next + 1), PacketIDOf(next + 7)}, gone...) {
			if i := r.find(id); i >= 0 {
				t.Fatalf("step %d: find(%d) = %d for an id not in the ring", step, id, i)
			}
		}
	}
	if r.compactions == 0 {
		t.Fatal("the ring never compacted")
	}
}

// TestRingIDFreeAgainstFind checks the O(1) answer of idFree against a
// scan of the ids, over a window sliding in Seq order for two laps of
// the packet ids, entries taken from anywhere, and pushes out of Seq
// order and 65,535 or more apart as Restore makes them: probes a lap
// behind or ahead of a live entry must be refused, the next Seq allowed.
func TestRingIDFreeAgainstFind(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var r ring
	var live []uint64 // Seqs in the ring
	next := uint64(0)
	refused := 0
	for step := range 300000 {
		switch op := rng.IntN(100); {
		case op < 2: // an entry restored far behind or ahead
			seq := next + 65535*uint64(1+rng.IntN(2)) - uint64(rng.IntN(3))
			if rng.IntN(2) == 0 && next > 70000 {
				seq = next - 65535 - uint64(rng.IntN(3))
			}
			if r.find(PacketIDOf(seq)) < 0 { // ids in flight are distinct
				r.push(Outbound{Seq: seq, PacketID: PacketIDOf(seq)})
				live = append(live, seq)
			}
		case op < 52 && len(live) < 200:
			next++
			for r.find(PacketIDOf(next)) >= 0 {
				next++
			}
			r.push(Outbound{Seq: next, PacketID: PacketIDOf(next)})
			live = append(live, next)
		case len(live) > 0:
			k := 0
			if rng.IntN(4) == 0 {
				k = rng.IntN(len(live))
			}
			i := r.find(PacketIDOf(live[k]))
			if i < 0 || r.at(i).Seq != live[k] {
				t.Fatalf("step %d: find(%d) = %d", step, PacketIDOf(live[k]), i)
			}
			r.remove(i)
			live = slices.Delete(live, k, k+1)
		}
		probes := []uint64{next + 1, next + 2 + uint64(rng.IntN(65535))}
		if len(live) > 0 {
			s := live[rng.IntN(len(live))]
			probes = append(probes, s+65535, s+2*65535)
			if s > 65535 {
				probes = append(probes, s-65535)
			}
		}
		for _, seq := range probes {
			if slices.Contains(live, seq) {
				continue
			}
			want := r.find(PacketIDOf(seq)) < 0
			if got := r.idFree(seq); got != want {
				t.Fatalf("step %d: idFree(%d) = %v, the ids' scan says %v (live %d entries, bounds %d..%d)",
					step, seq, got, want, len(live), r.lo, r.hi)
			}
			if !want {
				refused++
			}
		}
	}
	if next < 2*65535 || refused < 1000 {
		t.Fatalf("the window went to Seq %d and %d probes were refused: too few to test", next, refused)
	}
}
