package session

import "math"

// ring is a FIFO of Outbound values. Entries removed from the middle (an
// out-of-order acknowledgement) become tombstones that are skipped and
// reclaimed when they reach the head, so the common in-order case is O(1).
type ring struct {
	buf  []Outbound
	dead []bool
	// ids are the packet ids of buf's live entries, 0 in every other
	// slot: find scans them, two bytes a slot, rather than the entries.
	ids   []uint16
	head  int
	n     int // slots used, tombstones included
	tombs int
	// popped counts the entries ever taken off the head, and compactions
	// the times compact moved entries: together they let a caller keep a
	// position across removals.
	popped      uint64
	compactions uint32
	// lo and hi bound the Seqs of the live entries: pushes widen them,
	// removals leave them stale (still bounds) until idFree narrows them.
	lo, hi uint64
}

func (r *ring) len() int { return r.n - r.tombs }

func (r *ring) slot(i int) int { return (r.head + i) % len(r.buf) }

func (r *ring) push(o Outbound) {
	if r.n == len(r.buf) {
		r.grow()
	}
	if r.len() == 0 {
		r.lo, r.hi = o.Seq, o.Seq
	} else {
		r.lo, r.hi = min(r.lo, o.Seq), max(r.hi, o.Seq)
	}
	j := r.slot(r.n)
	r.buf[j], r.dead[j], r.ids[j] = o, false, o.PacketID
	r.n++
}

func (r *ring) grow() {
	size := 2 * len(r.buf)
	if size == 0 {
		size = 4
	}
	buf, dead, ids := make([]Outbound, size), make([]bool, size), make([]uint16, size)
	for i := 0; i < r.n; i++ {
		j := r.slot(i)
		buf[i], dead[i], ids[i] = r.buf[j], r.dead[j], r.ids[j]
	}
	r.buf, r.dead, r.ids, r.head = buf, dead, ids, 0
}

func (r *ring) peek() *Outbound {
	r.trim()
	return &r.buf[r.head]
}

func (r *ring) pop() Outbound {
	r.trim()
	o := r.buf[r.head]
	r.buf[r.head], r.ids[r.head] = Outbound{}, 0
	r.advance()
	return o
}

func (r *ring) advance() {
	r.popped++
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	if r.n == 0 {
		r.head = 0
	}
}

// trim drops tombstones at the head.
func (r *ring) trim() {
	for r.n > 0 && r.dead[r.head] {
		r.dead[r.head] = false
		r.tombs--
		r.advance()
	}
}

// find returns the position (from the head) of the live entry with the
// packet id, or -1. A QoS 2 window's PUBRECs are for entries behind all
// of those waiting for PUBCOMP: scanning the entries themselves for them
// was a large part of qos2's profile (docs/perf-log.md).
func (r *ring) find(id uint16) int {
	if id == 0 || r.n == 0 {
		return -1
	}
	first := min(r.n, len(r.ids)-r.head) // slots from the head to the end of ids
	for i, v := range r.ids[r.head : r.head+first] {
		if v == id {
			return i
		}
	}
	for i, v := range r.ids[:r.n-first] {
		if v == id {
			return first + i
		}
	}
	return -1
}

// idFree reports whether no live entry holds the packet id of seq, the
// Seq of an entry not in the ring. Only an entry a multiple of 65,535
// away can (PacketIDOf), and none is while the live Seqs and seq span
// fewer: so a window sliding along in Seq order is checked in O(1), and
// scanned only when its stale bounds have drifted that far apart. The
// scan, once per message, showed in qos1's profile.
func (r *ring) idFree(seq uint64) bool {
	if r.len() == 0 || r.spans(seq) {
		return true
	}
	r.lo, r.hi = math.MaxUint64, 0 // there is a live entry to set both
	r.each(func(o *Outbound) { r.lo, r.hi = min(r.lo, o.Seq), max(r.hi, o.Seq) })
	return r.spans(seq) || r.find(PacketIDOf(seq)) < 0
}

// spans reports whether seq and the bounds of the live Seqs lie within
// 65,535 of each other.
func (r *ring) spans(seq uint64) bool {
	return max(r.hi, seq)-min(r.lo, seq) < 65535
}

func (r *ring) at(i int) *Outbound { return &r.buf[r.slot(i)] }

func (r *ring) remove(i int) {
	j := r.slot(i)
	r.buf[j], r.ids[j] = Outbound{}, 0
	r.dead[j] = true
	r.tombs++
	r.trim()
	if r.tombs > 16 && r.tombs > r.n/2 {
		// One entry never acknowledged while later ones are would keep
		// every tombstone behind it, and make each find scan them all.
		r.compact()
	}
}

// compact drops the tombstones, keeping the live entries in order.
func (r *ring) compact() {
	r.compactions++
	k := 0
	for i := 0; i < r.n; i++ {
		if j := r.slot(i); !r.dead[j] {
			o, id := r.buf[j], r.ids[j]
			r.buf[j], r.ids[j] = Outbound{}, 0
			d := r.slot(k)
			r.buf[d], r.dead[d], r.ids[d] = o, false, id
			k++
		}
	}
	for i := k; i < r.n; i++ {
		j := r.slot(i)
		r.buf[j], r.dead[j], r.ids[j] = Outbound{}, false, 0
	}
	r.n, r.tombs = k, 0
}

func (r *ring) each(fn func(*Outbound)) {
	for i := 0; i < r.n; i++ {
		if j := r.slot(i); !r.dead[j] {
			fn(&r.buf[j])
		}
	}
}
