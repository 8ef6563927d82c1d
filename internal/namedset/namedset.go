// Package namedset is a set of pointers each found by a name it knows
// itself: an open-addressing table of the pointers alone, where a
// map[string]*T keeps a copy of the name's string header beside each
// (24-byte slots). The broker's registry of clients by id and the topic
// trie's wide levels are such sets, large by the number of devices.
package namedset

import "hash/maphash"

// Named is a pointer to T that knows its name in the set.
type Named[T any] interface {
	*T
	SetName() string
}

// Set holds pointers to T by name, at a load between 3/8 and 3/4: ~9 bytes
// a slot (the pointer and a byte of its name's hash, which a probe checks
// before it follows the pointer), ~15 a member. The zero Set is empty.
// It is not safe for concurrent use.
type Set[T any, P Named[T]] struct {
	slots []*T    // a power of two of them, or none
	tags  []uint8 // each slot's tagOf its member's hash; 0: empty
	n     int
}

// seed hashes every set's names: random a process, so that names a
// client chooses cannot be made to collide.
var seed = maphash.MakeSeed()

func hash(name string) uint64 { return maphash.String(seed, name) }

// tagOf is the top 7 bits of a hash, never 0.
func tagOf(h uint64) uint8 { return uint8(h>>57) | 0x80 }

// Len returns the number of members.
func (s *Set[T, P]) Len() int { return s.n }

// slot returns where the member named name is, or the empty slot where it
// would go; the set has room.
func (s *Set[T, P]) slot(name string) int {
	h := hash(name)
	tag, mask := tagOf(h), len(s.slots)-1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		switch s.tags[i] {
		case 0:
			return i
		case tag:
			if P(s.slots[i]).SetName() == name {
				return i
			}
		}
	}
}

// Get returns the member named name, or nil.
func (s *Set[T, P]) Get(name string) *T {
	if s.n == 0 {
		return nil
	}
	return s.slots[s.slot(name)]
}

// Put adds m, in place of the member of its name if there is one.
func (s *Set[T, P]) Put(m *T) {
	if 4*(s.n+1) > 3*len(s.slots) {
		old := s.slots
		s.slots = make([]*T, max(8, 2*len(old)))
		s.tags = make([]uint8, len(s.slots))
		for _, o := range old {
			if o != nil {
				s.set(o)
			}
		}
	}
	if s.set(m) {
		s.n++
	}
}

// set puts m in its slot and reports whether the slot was empty.
func (s *Set[T, P]) set(m *T) bool {
	name := P(m).SetName()
	i := s.slot(name)
	empty := s.slots[i] == nil
	s.slots[i], s.tags[i] = m, tagOf(hash(name))
	return empty
}

// Remove takes the member named name out, if there is one. The members
// after it in its run that may take its slot move back into it
// (backward-shift deletion), so a lookup stops at the first empty slot:
// no tombstones.
func (s *Set[T, P]) Remove(name string) {
	if s.n == 0 {
		return
	}
	i := s.slot(name)
	if s.slots[i] == nil {
		return
	}
	s.n--
	mask := len(s.slots) - 1
	for j := i; ; {
		j = (j + 1) & mask
		m := s.slots[j]
		if m == nil {
			break
		}
		// m stays when its home h is cyclically in (i, j]: a lookup from
		// h does not pass i.
		h := int(hash(P(m).SetName())) & mask
		if i <= j && i < h && h <= j || i > j && (i < h || h <= j) {
			continue
		}
		s.slots[i], s.tags[i] = m, s.tags[j]
		i = j
	}
	s.slots[i], s.tags[i] = nil, 0
}

// All yields every member, for range-over-func; the set must not change
// meanwhile.
func (s *Set[T, P]) All(yield func(*T) bool) {
	for _, m := range s.slots {
		if m != nil && !yield(m) {
			return
		}
	}
}
