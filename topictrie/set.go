package topictrie

// entry is one subscription of a key to a node (or one member of a group).
type entry[K comparable, V any] struct {
	key   K
	id    uint32
	value V
}

// indexAt is the size above which a set keeps a map from key to position;
// below it a linear scan is faster than hashing and costs no memory.
const indexAt = 16

// set holds the subscriptions of one node or the members of one group. Items
// live in a slice so that Match walks contiguous memory.
type set[K comparable, V any] struct {
	items []entry[K, V]
}

// indexes are the maps from key to position of the sets that have one
// (over indexAt items), kept apart from the sets: a node of a large trie
// holds a subscription or two, and a map pointer in each took its node
// past the 80-byte size class. Only a set of indexAt/2 items or more can
// have one, so smaller sets never look here.
type indexes[K comparable, V any] map[*set[K, V]]map[K]int

func (s *set[K, V]) find(k K, ix indexes[K, V]) int {
	if len(s.items) >= indexAt/2 {
		if index := ix[s]; index != nil {
			if i, ok := index[k]; ok {
				return i
			}
			return -1
		}
	}
	for i := range s.items {
		if s.items[i].key == k {
			return i
		}
	}
	return -1
}

func (s *set[K, V]) add(e entry[K, V], ix *indexes[K, V]) {
	s.items = append(s.items, e)
	if len(s.items) <= indexAt {
		return
	}
	if index := (*ix)[s]; index != nil {
		index[e.key] = len(s.items) - 1
		return
	}
	index := make(map[K]int, len(s.items))
	for i := range s.items {
		index[s.items[i].key] = i
	}
	if *ix == nil {
		*ix = make(indexes[K, V])
	}
	(*ix)[s] = index
}

// remove deletes the item at i by moving the last item into its place, and
// returns the index the moved item came from.
func (s *set[K, V]) remove(i int, ix indexes[K, V]) (movedFrom int) {
	last := len(s.items) - 1
	var index map[K]int
	if len(s.items) >= indexAt/2 {
		index = ix[s]
	}
	if index != nil {
		delete(index, s.items[i].key)
		if i != last {
			index[s.items[last].key] = i
		}
	}
	s.items[i] = s.items[last]
	var zero entry[K, V]
	s.items[last] = zero // release what the key and value point to
	s.items = s.items[:last]
	if len(s.items) == 0 {
		s.items = nil
	}
	if index != nil && len(s.items) < indexAt/2 {
		delete(ix, s)
	}
	return last
}

// keyIDs gives each key with at least one subscription a small integer, so
// that match results can be grouped by key by sorting integers. IDs of keys
// without subscriptions are reused.
type keyIDs[K comparable] struct {
	// ids holds the refs by value: 8 bytes in the map's slot, where a
	// pointer to them cost another 16-byte allocation per subscriber.
	ids  map[K]keyRef
	free []uint32
	next uint32
}

type keyRef struct {
	id uint32
	// refs is the key's subscriptions: 4 billion would take more memory
	// than any broker has.
	refs uint32
}

func (k *keyIDs[K]) acquire(key K) uint32 {
	if r, ok := k.ids[key]; ok {
		r.refs++
		k.ids[key] = r
		return r.id
	}
	if k.ids == nil {
		k.ids = make(map[K]keyRef)
	}
	var id uint32
	if n := len(k.free); n > 0 {
		id, k.free = k.free[n-1], k.free[:n-1]
	} else {
		id = k.next
		k.next++
	}
	k.ids[key] = keyRef{id: id, refs: 1}
	return id
}

func (k *keyIDs[K]) release(key K) {
	r := k.ids[key]
	if r.refs--; r.refs == 0 {
		delete(k.ids, key)
		k.free = append(k.free, r.id)
		return
	}
	k.ids[key] = r
}
