package topictrie

import (
	"strings"

	"mqttd/internal/namedset"
)

// smallLevels is the number of children a node keeps in a slice before it
// switches to a table. Most nodes of a large tree have one or a few
// children; a slice of them costs 24 bytes a child where a table costs
// more, and scanning a few entries is as fast as hashing.
const smallLevels = 8

// levels maps the names of a node's literal child levels to the children,
// each of which knows its own level's name (SetName).
type levels[N any, P namedset.Named[N]] struct {
	small []child[N]
	// big holds the children of a node with more than smallLevels: ~15
	// bytes a child where a map[string]*N took ~43 (a node with a child
	// a device).
	big *namedset.Set[N, P]
}

type child[N any] struct {
	level string
	node  *N
}

func (l *levels[N, P]) len() int {
	if l.big != nil {
		return l.big.Len()
	}
	return len(l.small)
}

func (l *levels[N, P]) get(level string) *N {
	if l.big != nil {
		return l.big.Get(level)
	}
	for i := range l.small {
		if l.small[i].level == level {
			return l.small[i].node
		}
	}
	return nil
}

// put adds n under level, which must not be present and must be n's
// SetName.
func (l *levels[N, P]) put(level string, n *N) {
	if l.big != nil {
		l.big.Put(n)
		return
	}
	if len(l.small) < smallLevels {
		l.small = append(l.small, child[N]{level, n})
		return
	}
	l.big = new(namedset.Set[N, P])
	for _, c := range l.small {
		l.big.Put(c.node)
	}
	l.big.Put(n)
	l.small = nil
}

func (l *levels[N, P]) remove(level string) {
	if l.big != nil {
		l.big.Remove(level)
		// Going back to a slice only well below the switch point keeps a
		// node that hovers around it from converting on every change.
		if l.big.Len() <= smallLevels/2 {
			l.small = make([]child[N], 0, l.big.Len())
			for c := range l.big.All {
				l.small = append(l.small, child[N]{P(c).SetName(), c})
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
		for c := range l.big.All {
			if !yield(P(c).SetName(), c) {
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

// SetName is the last level of n's filter, its name among its parent's
// children.
func (n *node[K, V]) SetName() string {
	return n.filter[strings.LastIndexByte(n.filter, '/')+1:]
}

// SetName is n's level, its name among its parent's children.
func (n *rnode[T]) SetName() string { return n.level }
