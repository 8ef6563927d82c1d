package topictrie

import (
	"strings"
	"sync"
	"sync/atomic"
)

// Sub is one subscription that matches a topic, as returned by Trie.Match.
type Sub[K comparable, V any] struct {
	// Key identifies the subscriber.
	Key K
	// Value is the value given to Subscribe: the subscription's options.
	Value V
	// Filter is the topic filter that matched, without any $share prefix.
	Filter string
	// Group is the share name for a shared subscription, of which Key is the
	// one member chosen for this message; empty for a normal subscription.
	Group string
	// KeyID is a small integer, equal for equal keys and different for
	// different keys within one Match result; ForEachDelivery sorts by it.
	// An ID is reused once its key has no subscription left, so IDs from
	// different Match calls must not be compared.
	KeyID uint32
}

// Options configures a Trie. The zero value is ready to use.
type Options struct {
	// Limits bounds the filters Subscribe accepts.
	Limits Limits
	// Strategy chooses the member of a share group that receives a
	// message; nil means RoundRobin.
	Strategy Strategy
}

// Trie holds subscriptions keyed by subscriber and matches topic names
// against them. All methods are safe for concurrent use; Match runs under a
// read lock, so many goroutines match at once while writers wait.
type Trie[K comparable, V any] struct {
	mu sync.RWMutex
	// gen moves with every Subscribe and Unsubscribe (Generation).
	gen      atomic.Uint64
	root     node[K, V]
	keys     keyIDs[K]
	index    indexes[K, V] // of the nodes' and groups' large sets
	count    int
	limits   Limits
	strategy Strategy
}

// node is one level of the trie.
type node[K comparable, V any] struct {
	children levels[node[K, V], *node[K, V]]
	// wild is the node's + and # children and share groups, nil when it
	// has none: the leaves of a large trie (a filter per device) have
	// none. With them apart, no parent pointer (lookupPath) and the
	// sets' indexes the trie's, a node fills 80 bytes, where it took 128.
	wild *wild[K, V]
	// filter is the whole filter down to this node, a substring of the
	// first filter that created it; the node's level is its last level.
	filter string
	subs   set[K, V]
}

// wild is what a node has beside its literal children and subscriptions.
// The + and # levels have their own pointers so matching never looks them
// up by name.
type wild[K comparable, V any] struct {
	plus   *node[K, V]
	hash   *node[K, V]
	groups []*group[K, V]
}

// plus is n's + child, or nil.
func (n *node[K, V]) plus() *node[K, V] {
	if n.wild == nil {
		return nil
	}
	return n.wild.plus
}

// hash is n's # child, or nil.
func (n *node[K, V]) hash() *node[K, V] {
	if n.wild == nil {
		return nil
	}
	return n.wild.hash
}

// groups is n's share groups.
func (n *node[K, V]) groups() []*group[K, V] {
	if n.wild == nil {
		return nil
	}
	return n.wild.groups
}

// wilds returns n's wild, allocating it on first use.
func (n *node[K, V]) wilds() *wild[K, V] {
	if n.wild == nil {
		n.wild = new(wild[K, V])
	}
	return n.wild
}

// dropWild frees n's wild once it holds nothing.
func (n *node[K, V]) dropWild() {
	if w := n.wild; w != nil && w.plus == nil && w.hash == nil && len(w.groups) == 0 {
		n.wild = nil
	}
}

// group is one share group on one topic filter.
type group[K comparable, V any] struct {
	name    string
	members set[K, V]
	state   GroupState
}

// New returns an empty Trie.
func New[K comparable, V any](opts Options) *Trie[K, V] {
	if opts.Strategy == nil {
		opts.Strategy = RoundRobin{}
	}
	return &Trie[K, V]{limits: opts.Limits, strategy: opts.Strategy}
}

// Len returns the number of subscriptions, counting each member of a share
// group once.
func (t *Trie[K, V]) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.count
}

// SubscribedUnder reports whether any subscription's filter (a shared
// one's without its $share/{group}/ prefix) has level as its first level.
// Only such filters can match a topic whose first level starts with $
// [MQTT-4.7.2-1], so the broker asks it of "$SYS" to learn, without a
// Match, whether anybody could receive its $SYS topics.
func (t *Trie[K, V]) SubscribedUnder(level string) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.root.children.get(level) != nil // prune removes the empty ones
}

// Subscribe subscribes key to filter with value, which replaces the value of
// an existing subscription of key to the same filter. A filter of the form
// $share/{group}/{filter} makes key a member of that share group. It reports
// whether the subscription is new, or an error from ParseFilter. The trie
// keeps slices of filter: pass a string that is not part of a larger
// buffer, or that buffer is kept alive with it.
func (t *Trie[K, V]) Subscribe(filter string, key K, value V) (bool, error) {
	f, err := t.limits.ParseFilter(filter)
	if err != nil {
		return false, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gen.Add(1)
	n := t.root.descend(f.Topic)
	s := &n.subs
	if f.Group != "" {
		s = &n.group(f.Group).members
	}
	if i := s.find(key, t.index); i >= 0 {
		s.items[i].value = value
		return false, nil
	}
	s.add(entry[K, V]{key: key, id: t.keys.acquire(key), value: value}, &t.index)
	t.count++
	return true, nil
}

// Unsubscribe removes the subscription of key to filter (a $share filter
// removes key from that group) and reports whether it existed.
func (t *Trie[K, V]) Unsubscribe(filter string, key K) bool {
	f, err := t.limits.ParseFilter(filter)
	if err != nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gen.Add(1)
	var buf [16]*node[K, V]
	path := t.root.lookupPath(f.Topic, buf[:0])
	if path == nil {
		return false
	}
	n := path[len(path)-1]
	if f.Group == "" {
		if !t.removeFrom(&n.subs, key, nil) {
			return false
		}
	} else {
		gi := n.findGroup(f.Group)
		if gi < 0 {
			return false
		}
		w := n.wild
		g := w.groups[gi]
		if !t.removeFrom(&g.members, key, &g.state) {
			return false
		}
		if len(g.members.items) == 0 {
			last := len(w.groups) - 1
			w.groups[gi], w.groups[last] = w.groups[last], nil
			w.groups = w.groups[:last]
			n.dropWild()
		}
	}
	prune(path)
	return true
}

// removeFrom removes key from s, keeping st's sticky member pointing at the
// same member when the removal moves it.
func (t *Trie[K, V]) removeFrom(s *set[K, V], key K, st *GroupState) bool {
	i := s.find(key, t.index)
	if i < 0 {
		return false
	}
	t.keys.release(key)
	from := s.remove(i, t.index)
	if st != nil {
		st.moved(i, -1)
		if from != i {
			st.moved(from, i)
		}
	}
	t.count--
	return true
}

// Generation changes with every Subscribe and Unsubscribe, before what
// they change can be matched: a Match result whose subscriptions are not
// shared (their member is chosen per Match) stays what Match would
// return for as long as Generation reads what it read before that Match.
func (t *Trie[K, V]) Generation() uint64 { return t.gen.Load() }

// Match appends to into every subscription matching topic and returns the
// extended slice: each normal subscription once, and for each share group
// (per group and filter) one member chosen by the Strategy. A subscriber
// with overlapping subscriptions appears once per subscription; see
// ForEachDelivery. Match allocates only to grow into.
func (t *Trie[K, V]) Match(topic string, into []Sub[K, V]) []Sub[K, V] {
	return t.MatchFrom(topic, 0, into)
}

// MatchFrom is Match with a hash of the publisher, given to the Strategy as
// Message.Publisher (see HashPublisher).
func (t *Trie[K, V]) MatchFrom(topic string, publisher uint64, into []Sub[K, V]) []Sub[K, V] {
	m := Message{Topic: topic, Publisher: publisher}
	t.mu.RLock()
	defer t.mu.RUnlock()
	// [MQTT-4.7.2-1] a topic starting with $ is not matched by a first-level wildcard.
	return t.match(&t.root, topic, strings.HasPrefix(topic, "$"), m, into)
}

// MatchPlain is Match without the share groups: only the normal
// subscriptions matching topic, and no group's Strategy is asked, so
// that a message the groups get another way (a cluster's shared
// subscriptions) does not move their choice on.
func (t *Trie[K, V]) MatchPlain(topic string, into []Sub[K, V]) []Sub[K, V] {
	m := Message{Topic: topic, plain: true}
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.match(&t.root, topic, strings.HasPrefix(topic, "$"), m, into)
}

// match walks literal levels iteratively and recurses only into + children,
// so its depth is bounded by the depth of the trie (Limits.MaxLevels), not by
// the number of levels of the topic.
func (t *Trie[K, V]) match(n *node[K, V], rest string, dollar bool, m Message, into []Sub[K, V]) []Sub[K, V] {
	for {
		i := strings.IndexByte(rest, '/')
		level, last := rest, i < 0
		if !last {
			level = rest[:i]
		}
		if w := n.wild; w != nil && !dollar {
			if w.hash != nil {
				into = t.collect(w.hash, m, into)
			}
			if w.plus != nil {
				if last {
					into = t.terminal(w.plus, m, into)
				} else {
					into = t.match(w.plus, rest[i+1:], false, m, into)
				}
			}
		}
		dollar = false
		c := n.children.get(level)
		if c == nil {
			return into
		}
		if last {
			return t.terminal(c, m, into)
		}
		n, rest = c, rest[i+1:]
	}
}

// terminal appends the subscriptions of n, where the topic ends, and those of
// its # child, since "a/#" matches "a".
func (t *Trie[K, V]) terminal(n *node[K, V], m Message, into []Sub[K, V]) []Sub[K, V] {
	into = t.collect(n, m, into)
	if h := n.hash(); h != nil {
		into = t.collect(h, m, into)
	}
	return into
}

func (t *Trie[K, V]) collect(n *node[K, V], m Message, into []Sub[K, V]) []Sub[K, V] {
	for i := range n.subs.items {
		e := &n.subs.items[i]
		into = append(into, Sub[K, V]{Key: e.key, Value: e.value, Filter: n.filter, KeyID: e.id})
	}
	if m.plain || n.wild == nil {
		return into
	}
	for _, g := range n.wild.groups {
		e := &g.members.items[t.strategy.Choose(&g.state, len(g.members.items), m)]
		into = append(into, Sub[K, V]{Key: e.key, Value: e.value, Filter: n.filter, Group: g.name, KeyID: e.id})
	}
	return into
}

// descend returns the node for filter, creating the missing levels.
//
// The new nodes keep slices of filter: the caller passes a string it owns
// (the broker copies filters out of their SUBSCRIBE frames), so that the
// trie and the session share one copy.
func (n *node[K, V]) descend(filter string) *node[K, V] {
	for off := 0; ; {
		end := strings.IndexByte(filter[off:], '/')
		if end < 0 {
			end = len(filter)
		} else {
			end += off
		}
		level := filter[off:end]
		c := n.child(level)
		if c == nil {
			c = &node[K, V]{filter: filter[:end]}
			switch level {
			case "+":
				n.wilds().plus = c
			case "#":
				n.wilds().hash = c
			default:
				n.children.put(level, c)
			}
		}
		if end == len(filter) {
			return c
		}
		n, off = c, end+1
	}
}

// lookup returns the node for filter, or nil.
func (n *node[K, V]) lookup(filter string) *node[K, V] {
	for {
		i := strings.IndexByte(filter, '/')
		if i < 0 {
			return n.child(filter)
		}
		if n = n.child(filter[:i]); n == nil {
			return nil
		}
		filter = filter[i+1:]
	}
}

// lookupPath appends to path the nodes from n down to the node for
// filter, n included, and returns it; nil when filter has no node. The
// nodes keep no parent pointer (8 bytes each), so a removal walks back
// up the path its lookup took.
func (n *node[K, V]) lookupPath(filter string, path []*node[K, V]) []*node[K, V] {
	path = append(path, n)
	for {
		i := strings.IndexByte(filter, '/')
		level := filter
		if i >= 0 {
			level = filter[:i]
		}
		if n = n.child(level); n == nil {
			return nil
		}
		path = append(path, n)
		if i < 0 {
			return path
		}
		filter = filter[i+1:]
	}
}

func (n *node[K, V]) child(level string) *node[K, V] {
	switch level {
	case "+":
		return n.plus()
	case "#":
		return n.hash()
	}
	return n.children.get(level)
}

func (n *node[K, V]) findGroup(name string) int {
	for i, g := range n.groups() {
		if g.name == name {
			return i
		}
	}
	return -1
}

// group returns the share group called name, creating it.
func (n *node[K, V]) group(name string) *group[K, V] {
	if i := n.findGroup(name); i >= 0 {
		return n.wild.groups[i]
	}
	g := &group[K, V]{name: strings.Clone(name)} // its own copy, as node keys
	w := n.wilds()
	w.groups = append(w.groups, g)
	return g
}

// prune removes the last node of path, which runs from the root, and its
// ancestors while they hold nothing.
func prune[K comparable, V any](path []*node[K, V]) {
	for i := len(path) - 1; i > 0; i-- {
		n, p := path[i], path[i-1]
		if len(n.subs.items) != 0 || n.wild != nil || n.children.len() != 0 {
			return
		}
		switch n {
		case p.plus():
			p.wild.plus = nil
			p.dropWild()
		case p.hash():
			p.wild.hash = nil
			p.dropWild()
		default:
			level := n.filter
			if i > 1 {
				level = n.filter[len(p.filter)+1:]
			}
			p.children.remove(level)
		}
	}
}
