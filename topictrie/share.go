package topictrie

import (
	"math/rand/v2"
	"sync/atomic"
)

// Message describes the published message a Strategy chooses a member for.
type Message struct {
	// Topic is the topic name of the message.
	Topic string
	// Publisher is an opaque hash of the publishing client, given to
	// Trie.MatchFrom; zero when the caller did not supply one.
	Publisher uint64
	// plain leaves the share groups out of a match (Trie.MatchPlain).
	plain bool
}

// Strategy chooses which member of a share group receives a message.
// Several goroutines call Choose at the same time, for the same group too,
// under the trie's read lock: an implementation keeps its mutable state in
// the GroupState's atomics or otherwise synchronises it.
type Strategy interface {
	// Choose returns the index, in [0, n), of the member that receives m.
	// n is at least 1; st belongs to this (group, filter) pair.
	Choose(st *GroupState, n int, m Message) int
}

// GroupState is the per-(group, filter) state a Strategy may keep. The trie
// keeps the sticky member correct as members leave.
type GroupState struct {
	next atomic.Uint64
	// sticky holds the index of the sticky member plus one; zero means none.
	sticky atomic.Int64
}

// Next returns a counter that increases by one on every call, starting at 0.
func (st *GroupState) Next() uint64 { return st.next.Add(1) - 1 }

// Sticky returns the member chosen by an earlier SetSticky, if it is still in
// the group.
func (st *GroupState) Sticky() (int, bool) {
	v := st.sticky.Load()
	return int(v - 1), v > 0
}

// SetSticky makes member i sticky unless another goroutine made a member
// sticky first, and returns the sticky member.
func (st *GroupState) SetSticky(i int) int {
	if st.sticky.CompareAndSwap(0, int64(i)+1) {
		return i
	}
	v, ok := st.Sticky()
	if !ok {
		// The sticky member left between the two loads; i is as good as any.
		return i
	}
	return v
}

// moved tells the state that the member at index from now sits at index to,
// or has left the group when to < 0. Called under the trie's write lock.
func (st *GroupState) moved(from, to int) {
	if v, ok := st.Sticky(); ok && v == from {
		st.sticky.Store(int64(to) + 1)
	}
}

// RoundRobin gives messages to the members of a group in turn. It is the
// default Strategy.
type RoundRobin struct{}

// Choose implements Strategy.
func (RoundRobin) Choose(st *GroupState, n int, _ Message) int {
	return int(st.Next() % uint64(n))
}

// Random gives each message to a member chosen uniformly at random.
type Random struct{}

// Choose implements Strategy.
func (Random) Choose(_ *GroupState, n int, _ Message) int { return rand.IntN(n) }

// Sticky gives every message to one member, chosen at random, until that
// member leaves the group.
type Sticky struct{}

// Choose implements Strategy.
func (Sticky) Choose(st *GroupState, n int, _ Message) int {
	if i, ok := st.Sticky(); ok && i < n {
		return i
	}
	return st.SetSticky(rand.IntN(n))
}

// HashTopic gives all messages of one topic to the same member while the
// group does not change, which keeps each topic's messages in order.
type HashTopic struct{}

// Choose implements Strategy.
func (HashTopic) Choose(_ *GroupState, n int, m Message) int {
	// FNV-1a: deterministic across restarts and allocation free.
	h := uint64(14695981039346656037)
	for i := 0; i < len(m.Topic); i++ {
		h ^= uint64(m.Topic[i])
		h *= 1099511628211
	}
	return int(h % uint64(n))
}

// HashPublisher gives all messages of one publisher (Message.Publisher) to
// the same member while the group does not change.
type HashPublisher struct{}

// Choose implements Strategy.
func (HashPublisher) Choose(_ *GroupState, n int, m Message) int {
	return int(m.Publisher % uint64(n))
}

// ShareMember chooses, as a Match would, the member of share group group
// on filter (without its $share prefix) that receives m, passing over the
// members skip reports: the broker hands a message a member left
// unacknowledged to another one. It reports false when no other member
// is left.
func (t *Trie[K, V]) ShareMember(group, filter string, m Message, skip func(K) bool) (Sub[K, V], bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	n := t.root.lookup(filter)
	if n == nil {
		return Sub[K, V]{}, false
	}
	i := n.findGroup(group)
	if i < 0 {
		return Sub[K, V]{}, false
	}
	g := n.wild.groups[i]
	members := g.members.items
	first := t.strategy.Choose(&g.state, len(members), m)
	for k := range members {
		e := &members[(first+k)%len(members)]
		if !skip(e.key) {
			return Sub[K, V]{Key: e.key, Value: e.value, Filter: n.filter, Group: g.name, KeyID: e.id}, true
		}
	}
	return Sub[K, V]{}, false
}
