package topictrie

import (
	"math"
	"strings"
	"sync"
)

// Item is one retained message returned by Retained.Match.
type Item[T any] struct {
	// Topic is the topic name the message was retained under.
	Topic string
	// Value is the value given to Set.
	Value T
}

// Retained stores one value per topic name (the retained message) in a tree
// of levels, so that matching a filter visits only the branches the filter
// can reach. All methods are safe for concurrent use; Get and Match run under
// a read lock.
type Retained[T any] struct {
	mu     sync.RWMutex
	root   rnode[T]
	count  int
	limits Limits
}

type rnode[T any] struct {
	children levels[rnode[T], *rnode[T]]
	parent   *rnode[T]
	level    string
	// topic is set while the node holds a value; topic names are never
	// empty, so it doubles as the presence flag.
	topic string
	value T
}

// NewRetained returns an empty store that accepts the topic names limits
// allows.
func NewRetained[T any](limits Limits) *Retained[T] {
	return &Retained[T]{limits: limits}
}

// Len returns the number of retained topics.
func (r *Retained[T]) Len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.count
}

// Set stores v under topic, replacing any value there, and reports whether it
// replaced one. It returns an error from Limits.ValidTopicName for a topic
// name it refuses. The broker deletes instead of storing an empty payload
// [MQTT-3.3.1-10].
func (r *Retained[T]) Set(topic string, v T) (bool, error) {
	_, replaced, err := r.Swap(topic, v)
	return replaced, err
}

// Swap is Set, also returning the value it replaced.
func (r *Retained[T]) Swap(topic string, v T) (old T, replaced bool, err error) {
	if err := r.limits.ValidTopicName(topic); err != nil {
		return old, false, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := &r.root
	for off := 0; ; {
		end := strings.IndexByte(topic[off:], '/')
		if end < 0 {
			end = len(topic)
		} else {
			end += off
		}
		level := topic[off:end]
		c := n.children.get(level)
		if c == nil {
			// A node outlives the message that made it: it keeps its own
			// copy of the level, not a slice of that message's topic.
			level = strings.Clone(level)
			c = &rnode[T]{parent: n, level: level}
			n.children.put(level, c)
		}
		n = c
		if end == len(topic) {
			break
		}
		off = end + 1
	}
	replaced = n.topic != ""
	if !replaced {
		r.count++
	}
	old = n.value
	n.topic, n.value = topic, v
	return old, replaced, nil
}

// Delete removes the value stored under topic and reports whether there was
// one.
func (r *Retained[T]) Delete(topic string) bool {
	_, ok := r.Remove(topic)
	return ok
}

// Remove is Delete, also returning the value removed.
func (r *Retained[T]) Remove(topic string) (old T, ok bool) {
	return r.RemoveIf(topic, nil)
}

// RemoveIf is Remove, only when match (if not nil) holds for the value
// stored: a caller that found a value stale removes that value, not one
// stored since.
func (r *Retained[T]) RemoveIf(topic string, match func(T) bool) (old T, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.root.lookup(topic)
	if n == nil || n.topic == "" || (match != nil && !match(n.value)) {
		return old, false
	}
	var zero T
	old = n.value
	n.topic, n.value = "", zero
	r.count--
	for n.parent != nil && n.topic == "" && n.children.len() == 0 {
		n.parent.children.remove(n.level)
		n = n.parent
	}
	return old, true
}

// Get returns the value stored under topic.
func (r *Retained[T]) Get(topic string) (T, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if n := r.root.lookup(topic); n != nil && n.topic != "" {
		return n.value, true
	}
	var zero T
	return zero, false
}

func (n *rnode[T]) lookup(topic string) *rnode[T] {
	for {
		i := strings.IndexByte(topic, '/')
		if i < 0 {
			return n.children.get(topic)
		}
		if n = n.children.get(topic[:i]); n == nil {
			return nil
		}
		topic = topic[i+1:]
	}
}

// Match appends to into every retained message whose topic matches filter and
// returns the extended slice, in no particular order. filter is a valid topic
// filter without a $share prefix (Filter.Topic). Topics starting with $ are
// not matched by a filter starting with a wildcard [MQTT-4.7.2-1].
func (r *Retained[T]) Match(filter string, into []Item[T]) []Item[T] {
	return r.MatchN(filter, into, math.MaxInt)
}

// MatchN is Match that stops once into holds n items, so that a filter
// matching millions of topics costs no more than n of them (and the
// nodes passed on the way).
func (r *Retained[T]) MatchN(filter string, into []Item[T], n int) []Item[T] {
	if len(into) >= n {
		return into
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	into = r.root.match(filter, true, into, n)
	return into[:min(len(into), n)]
}

// match recurses once per + level of the filter and per level below a #, so
// its depth is bounded by the filter's and the stored topics' levels, both
// capped by Limits.MaxLevels. It stops once into holds limit items.
func (n *rnode[T]) match(rest string, root bool, into []Item[T], limit int) []Item[T] {
	for {
		i := strings.IndexByte(rest, '/')
		level, last := rest, i < 0
		if !last {
			level = rest[:i]
		}
		switch level {
		case "#":
			// n itself matches too: "a/#" matches "a" [MQTT-4.7.1-2].
			return n.all(root, into, limit)
		case "+":
			for l, c := range n.children.all {
				if len(into) >= limit {
					break
				}
				if root && strings.HasPrefix(l, "$") {
					continue // [MQTT-4.7.2-1]
				}
				if last {
					into = c.appendTo(into)
				} else {
					into = c.match(rest[i+1:], false, into, limit)
				}
			}
			return into
		}
		c := n.children.get(level)
		if c == nil {
			return into
		}
		if last {
			return c.appendTo(into)
		}
		n, rest, root = c, rest[i+1:], false
	}
}

// all appends the value of n and of every node below it, until into
// holds limit items; at the root it skips the $ topics [MQTT-4.7.2-1].
func (n *rnode[T]) all(root bool, into []Item[T], limit int) []Item[T] {
	into = n.appendTo(into)
	for l, c := range n.children.all {
		if len(into) >= limit {
			break
		}
		if root && strings.HasPrefix(l, "$") {
			continue
		}
		into = c.all(false, into, limit)
	}
	return into
}

// All yields every retained topic and its value, $ topics included, in
// no particular order. It holds the read lock until the loop ends, so the
// loop must be short and must not change r; a caller that needs more
// copies what it needs and works on the copy.
func (r *Retained[T]) All(yield func(topic string, v T) bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	r.root.each(yield)
}

// each yields the value of n and of every node below it, and reports
// whether to go on. Its depth is bounded by Limits.MaxLevels.
func (n *rnode[T]) each(yield func(string, T) bool) bool {
	if n.topic != "" && !yield(n.topic, n.value) {
		return false
	}
	for _, c := range n.children.all {
		if !c.each(yield) {
			return false
		}
	}
	return true
}

func (n *rnode[T]) appendTo(into []Item[T]) []Item[T] {
	if n.topic != "" {
		into = append(into, Item[T]{Topic: n.topic, Value: n.value})
	}
	return into
}
