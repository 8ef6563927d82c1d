package cluster

import (
	"math/bits"
	"strings"
)

// maxPeers bounds the other nodes a node routes to: a peer is a slot of
// a fixed bit set, so that matching a topic allocates nothing.
const maxPeers = 256

// peerSet is a set of peers, by slot.
type peerSet [maxPeers / 64]uint64

func (s *peerSet) add(i int)      { s[i>>6] |= 1 << (i & 63) }
func (s *peerSet) remove(i int)   { s[i>>6] &^= 1 << (i & 63) }
func (s *peerSet) has(i int) bool { return s[i>>6]&(1<<(i&63)) != 0 }
func (s *peerSet) empty() bool    { return *s == peerSet{} }

func (s *peerSet) count() int {
	n := 0
	for _, w := range s {
		n += bits.OnesCount64(w)
	}
	return n
}

func (s *peerSet) union(o *peerSet) {
	for i := range s {
		s[i] |= o[i]
	}
}

// each calls f for each peer of s, in slot order.
func (s *peerSet) each(f func(i int)) {
	for w, word := range s {
		for word != 0 {
			b := bits.TrailingZeros64(word)
			f(w*64 + b)
			word &^= 1 << b
		}
	}
}

// routeTrie maps the filters the other nodes want to those nodes: a
// level per trie node, '+' and '#' as children of their own. A filter's
// entry holds the peers that want it plainly, and how many nodes (this
// one included) have a share group on it. Not safe for concurrent use:
// the route table's lock guards it.
type routeTrie struct{ root rnode }

type rnode struct {
	kids       map[string]*rnode
	plus, hash *rnode
	peers      peerSet
	// npeers is the number of peers in peers; shared the nodes with a
	// share group on the filter.
	npeers, shared int
}

func (n *rnode) used() bool {
	return n.npeers > 0 || n.shared > 0 || len(n.kids) > 0 || n.plus != nil || n.hash != nil
}

// child returns the node of level under n, made when make is set.
func (n *rnode) child(level string, make bool) *rnode {
	var p **rnode
	switch level {
	case "+":
		p = &n.plus
	case "#":
		p = &n.hash
	default:
		c := n.kids[level]
		if c == nil && make {
			if n.kids == nil {
				n.kids = map[string]*rnode{}
			}
			c = &rnode{}
			n.kids[level] = c
		}
		return c
	}
	if *p == nil && make {
		*p = &rnode{}
	}
	return *p
}

// update applies f to filter's entry, made if need be, and prunes the
// path of entries left empty.
func (t *routeTrie) update(filter string, f func(*rnode)) {
	path := []*rnode{&t.root}
	levels := strings.Split(filter, "/")
	for _, l := range levels {
		path = append(path, path[len(path)-1].child(l, true))
	}
	f(path[len(path)-1])
	for i := len(path) - 1; i > 0 && !path[i].used(); i-- {
		parent, l := path[i-1], levels[i-1]
		switch l {
		case "+":
			parent.plus = nil
		case "#":
			parent.hash = nil
		default:
			delete(parent.kids, l)
		}
	}
}

// add records that peer wants filter plainly, and reports whether it is
// new.
func (t *routeTrie) add(filter string, peer int) (isNew bool) {
	t.update(filter, func(n *rnode) {
		if !n.peers.has(peer) {
			n.peers.add(peer)
			n.npeers++
			isNew = true
		}
	})
	return isNew
}

// remove forgets that peer wants filter plainly.
func (t *routeTrie) remove(filter string, peer int) {
	t.update(filter, func(n *rnode) {
		if n.peers.has(peer) {
			n.peers.remove(peer)
			n.npeers--
		}
	})
}

// share counts one node more (d 1) or fewer (d -1) with a share group on
// filter.
func (t *routeTrie) share(filter string, d int) {
	t.update(filter, func(n *rnode) { n.shared = max(n.shared+d, 0) })
}

// match adds to dst the peers wanting topic plainly, and reports whether
// a node has a share group whose filter matches it. Topics beginning
// with '$' never cross: the caller leaves them out.
func (t *routeTrie) match(topic string, dst *peerSet) (shared bool) {
	return matchLevels(&t.root, topic, dst)
}

func matchLevels(n *rnode, topic string, dst *peerSet) (shared bool) {
	for {
		if h := n.hash; h != nil {
			// "a/#" matches "a" and everything under it.
			dst.union(&h.peers)
			shared = shared || h.shared > 0
		}
		level, rest, more := strings.Cut(topic, "/")
		if p := n.plus; p != nil {
			if more {
				shared = matchLevels(p, rest, dst) || shared
			} else {
				shared = leaf(p, dst) || shared
			}
		}
		c := n.kids[level]
		if c == nil {
			return shared
		}
		if !more {
			return leaf(c, dst) || shared
		}
		n, topic = c, rest
	}
}

// leaf is the match of the node a topic's last level reached.
func leaf(n *rnode, dst *peerSet) bool {
	dst.union(&n.peers)
	shared := n.shared > 0
	if h := n.hash; h != nil {
		dst.union(&h.peers)
		shared = shared || h.shared > 0
	}
	return shared
}
