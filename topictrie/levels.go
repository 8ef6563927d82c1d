package topictrie

import (
	"hash/maphash"
	"strings"
)

// smallLevels is the number of children a node keeps in a slice before it
// switches to a table. Most nodes of a large tree have one or a few
// children; a slice of them costs 24 bytes a child where a table costs
// more, and scanning a few entries is as fast as hashing.
const smallLevels = 8

// levelNode is a node type levels can hold: a pointer to N that knows its
// own level's name, which the table's slots then need not keep.
type levelNode[N any] interface {
	*N
	levelName() string
}

// levels maps the names of a node's literal child levels to the children.
type levels[N any, P levelNode[N]] struct {
	small []child[N]
	big   *levelTable[N, P]
}

type child[N any] struct {
	level string
	node  *N
}

// levelTable is the children of a node with more than smallLevels of
// them: an open-addressing table of the children alone, each found by
// the name it knows, with a byte of each one's hash beside it so that a
// probe follows a pointer only to a likely match. A map[string]*N kept a
// copy of the name's string header beside each pointer, ~43 bytes a
// child of a node with 10,000 (a filter per device); here ~15, at a load
// between 3/8 and 3/4.
type levelTable[N any, P levelNode[N]] struct {
	slots []*N    // a power of two of them
	tags  []uint8 // each slot's tagOf its child's hash; 0: empty
	n     int
}

// levelSeed hashes every table's names: one seed, so that a table needs
// none of its own.
var levelSeed = maphash.MakeSeed()

func hashLevel(level string) uint64 { return maphash.String(levelSeed, level) }

// tagOf is the top 7 bits of a hash, never 0.
func tagOf(h uint64) uint8 { return uint8(h>>57) | 0x80 }

// slot returns where the child named level is, or the empty slot where it
// would go.
func (t *levelTable[N, P]) slot(level string) int {
	h := hashLevel(level)
	tag, mask := tagOf(h), len(t.slots)-1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		switch t.tags[i] {
		case 0:
			return i
		case tag:
			if P(t.slots[i]).levelName() == level {
				return i
			}
		}
	}
}

// put adds n, named level, which must not be present.
func (t *levelTable[N, P]) put(level string, n *N) {
	if 4*(t.n+1) > 3*len(t.slots) {
		old := t.slots
		t.slots = make([]*N, max(4*smallLevels, 2*len(old)))
		t.tags = make([]uint8, len(t.slots))
		for _, c := range old {
			if c != nil {
				t.set(P(c).levelName(), c)
			}
		}
	}
	t.set(level, n)
	t.n++
}

func (t *levelTable[N, P]) set(level string, n *N) {
	i := t.slot(level)
	t.slots[i], t.tags[i] = n, tagOf(hashLevel(level))
}

// remove takes the child named level out, if it is there, moving back
// the children after it in its run that may take its slot (backward-shift
// deletion): a lookup stops at the first empty slot, with no tombstones.
func (t *levelTable[N, P]) remove(level string) {
	i := t.slot(level)
	if t.slots[i] == nil {
		return
	}
	t.n--
	mask := len(t.slots) - 1
	for j := i; ; {
		j = (j + 1) & mask
		c := t.slots[j]
		if c == nil {
			break
		}
		// c stays when its home h is cyclically in (i, j]: a lookup from
		// h does not pass i.
		h := int(hashLevel(P(c).levelName())) & mask
		if i <= j && i < h && h <= j || i > j && (i < h || h <= j) {
			continue
		}
		t.slots[i], t.tags[i] = c, t.tags[j]
		i = j
	}
	t.slots[i], t.tags[i] = nil, 0
}

func (l *levels[N, P]) len() int {
	if l.big != nil {
		return l.big.n
	}
	return len(l.small)
}

func (l *levels[N, P]) get(level string) *N {
	if l.big != nil {
		return l.big.slots[l.big.slot(level)]
	}
	for i := range l.small {
		if l.small[i].level == level {
			return l.small[i].node
		}
	}
	return nil
}

// put adds n under level, which must not be present and must be n's
// levelName.
func (l *levels[N, P]) put(level string, n *N) {
	if l.big != nil {
		l.big.put(level, n)
		return
	}
	if len(l.small) < smallLevels {
		l.small = append(l.small, child[N]{level, n})
		return
	}
	l.big = new(levelTable[N, P])
	for _, c := range l.small {
		l.big.put(c.level, c.node)
	}
	l.big.put(level, n)
	l.small = nil
}

func (l *levels[N, P]) remove(level string) {
	if l.big != nil {
		l.big.remove(level)
		// Going back to a slice only well below the switch point keeps a
		// node that hovers around it from converting on every change.
		if l.big.n <= smallLevels/2 {
			l.small = make([]child[N], 0, l.big.n)
			for _, c := range l.big.slots {
				if c != nil {
					l.small = append(l.small, child[N]{P(c).levelName(), c})
				}
			}
			l.big = nil
		}
		return
	}
	for i := range l.small {
		if l.small[i].level == level {
			last := len(l.small) - 1
			l.small[i] = l.small[last]
			l.small[last] = child[N]{}
			l.small = l.small[:last]
			break
		}
	}
	if len(l.small) == 0 {
		l.small = nil
	}
}

// all yields every child with its level name, for range-over-func.
func (l *levels[N, P]) all(yield func(string, *N) bool) {
	if l.big != nil {
		for _, c := range l.big.slots {
			if c != nil && !yield(P(c).levelName(), c) {
				return
			}
		}
		return
	}
	for _, c := range l.small {
		if !yield(c.level, c.node) {
			return
		}
	}
}

// levelName is the last level of n's filter.
func (n *node[K, V]) levelName() string {
	return n.filter[strings.LastIndexByte(n.filter, '/')+1:]
}

// levelName is n's level.
func (n *rnode[T]) levelName() string { return n.level }
