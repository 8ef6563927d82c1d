package mqttd

import "hash/maphash"

// clientsByID is the registry's clients by client id (Server.clients,
// under Server.mu): an open-addressing table of client pointers keyed by
// each client's own id. A map[string]*client kept a copy of the id's
// string header beside each pointer, 24-byte slots and ~43 bytes a
// client at 10,000 clients; here a slot is the pointer alone, ~15 bytes
// a client at a load between 3/8 and 3/4.
type clientsByID struct {
	slots []*client // a power of two of them, or none
	n     int
	seed  maphash.Seed
}

func (t *clientsByID) len() int { return t.n }

func (t *clientsByID) home(id string) int {
	return int(maphash.String(t.seed, id) & uint64(len(t.slots)-1))
}

// slot returns where the client with id is, or the empty slot where it
// would go; the table has room.
func (t *clientsByID) slot(id string) int {
	mask := len(t.slots) - 1
	for i := t.home(id); ; i = (i + 1) & mask {
		if cl := t.slots[i]; cl == nil || cl.id == id {
			return i
		}
	}
}

// get returns the client with id, or nil.
func (t *clientsByID) get(id string) *client {
	if t.n == 0 {
		return nil
	}
	return t.slots[t.slot(id)]
}

// put adds cl, in place of the client with its id if there is one.
func (t *clientsByID) put(cl *client) {
	if 4*(t.n+1) > 3*len(t.slots) {
		t.grow()
	}
	i := t.slot(cl.id)
	if t.slots[i] == nil {
		t.n++
	}
	t.slots[i] = cl
}

func (t *clientsByID) grow() {
	old := t.slots
	if old == nil {
		t.seed = maphash.MakeSeed()
	}
	t.slots = make([]*client, max(8, 2*len(old)))
	for _, cl := range old {
		if cl != nil {
			t.slots[t.slot(cl.id)] = cl
		}
	}
}

// remove takes the client with id out, if it is there. The clients after
// it in its run that may take its slot move back into it (backward-shift
// deletion), so a lookup stops at the first empty slot: no tombstones.
func (t *clientsByID) remove(id string) {
	if t.n == 0 {
		return
	}
	i := t.slot(id)
	if t.slots[i] == nil {
		return
	}
	t.n--
	mask := len(t.slots) - 1
	for j := i; ; {
		j = (j + 1) & mask
		cl := t.slots[j]
		if cl == nil {
			break
		}
		// cl stays unless the slot freed lies on its way from its home
		// to j: with h cyclically in (i, j], a lookup from h would not
		// pass i.
		h := t.home(cl.id)
		if i <= j && i < h && h <= j || i > j && (i < h || h <= j) {
			continue
		}
		t.slots[i] = cl
		i = j
	}
	t.slots[i] = nil
}

// all yields every client, for range-over-func; the table must not
// change meanwhile.
func (t *clientsByID) all(yield func(*client) bool) {
	for _, cl := range t.slots {
		if cl != nil && !yield(cl) {
			return
		}
	}
}
