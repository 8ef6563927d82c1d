package session

// ring is a FIFO of Outbound values. Entries removed from the middle (an
// out-of-order acknowledgement) become tombstones that are skipped and
// reclaimed when they reach the head, so the common in-order case is O(1).
type ring struct {
	buf   []Outbound
	dead  []bool
	head  int
	n     int // slots used, tombstones included
	tombs int
	// popped counts the entries ever taken off the head, and compactions
	// the times compact moved entries: together they let a caller keep a
	// position across removals.
	popped      uint64
	compactions uint32
}

func (r *ring) len() int { return r.n - r.tombs }

func (r *ring) slot(i int) int { return (r.head + i) % len(r.buf) }

func (r *ring) push(o Outbound) {
	if r.n == len(r.buf) {
		r.grow()
	}
	j := r.slot(r.n)
	r.buf[j], r.dead[j] = o, false
	r.n++
}

func (r *ring) grow() {
	size := 2 * len(r.buf)
	if size == 0 {
		size = 4
	}
	buf, dead := make([]Outbound, size), make([]bool, size)
	for i := 0; i < r.n; i++ {
		buf[i], dead[i] = r.buf[r.slot(i)], r.dead[r.slot(i)]
	}
	r.buf, r.dead, r.head = buf, dead, 0
}

func (r *ring) peek() *Outbound {
	r.trim()
	return &r.buf[r.head]
}

func (r *ring) pop() Outbound {
	r.trim()
	o := r.buf[r.head]
	r.buf[r.head] = Outbound{}
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
// packet id, or -1.
func (r *ring) find(id uint16) int {
	for i := 0; i < r.n; i++ {
		j := r.slot(i)
		if !r.dead[j] && r.buf[j].PacketID == id {
			return i
		}
	}
	return -1
}

func (r *ring) at(i int) *Outbound { return &r.buf[r.slot(i)] }

func (r *ring) remove(i int) {
	j := r.slot(i)
	r.buf[j] = Outbound{}
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
			o := r.buf[j]
			r.buf[j] = Outbound{}
			r.buf[r.slot(k)], r.dead[r.slot(k)] = o, false
			k++
		}
	}
	for i := k; i < r.n; i++ {
		j := r.slot(i)
		r.buf[j], r.dead[j] = Outbound{}, false
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
