package topictrie

// smallLevels is the number of children a node keeps in a slice before it
// switches to a map. Most nodes of a large tree have one or a few children;
// a slice of them costs 24 bytes a child where a map costs over 200 bytes,
// and scanning a few entries is as fast as hashing.
const smallLevels = 8

// levels maps the names of a node's literal child levels to the children.
type levels[N any] struct {
	small []child[N]
	big   map[string]*N
}

type child[N any] struct {
	level string
	node  *N
}

func (l *levels[N]) len() int {
	if l.big != nil {
		return len(l.big)
	}
	return len(l.small)
}

func (l *levels[N]) get(level string) *N {
	if l.big != nil {
		return l.big[level]
	}
	for i := range l.small {
		if l.small[i].level == level {
			return l.small[i].node
		}
	}
	return nil
}

// put adds n under level, which must not be present.
func (l *levels[N]) put(level string, n *N) {
	if l.big != nil {
		l.big[level] = n
		return
	}
	if len(l.small) < smallLevels {
		l.small = append(l.small, child[N]{level, n})
		return
	}
	l.big = make(map[string]*N, smallLevels+1)
	for _, c := range l.small {
		l.big[c.level] = c.node
	}
	l.big[level] = n
	l.small = nil
}

func (l *levels[N]) remove(level string) {
	if l.big != nil {
		delete(l.big, level)
		// Going back to a slice only well below the switch point keeps a
		// node that hovers around it from converting on every change.
		if len(l.big) <= smallLevels/2 {
			l.small = make([]child[N], 0, len(l.big))
			for k, n := range l.big {
				l.small = append(l.small, child[N]{k, n})
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
func (l *levels[N]) all(yield func(string, *N) bool) {
	if l.big != nil {
		for k, n := range l.big {
			if !yield(k, n) {
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
