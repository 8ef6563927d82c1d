package session

import (
	"strings"

	"mqttd/packets"
)

// Subscription is one topic filter a session holds.
type Subscription struct {
	Filter  string
	Options packets.SubOptions
	ID      uint32 // 5.0 subscription identifier; 0 when none
}

// subIndexMin is the count of subscriptions past which they are indexed;
// below it a scan is cheaper than a map, and costs an idle client nothing.
const subIndexMin = 8

// SubscriptionCost is what the broker counts a subscription to filter as
// holding, in bytes: the filter, a trie node for each level and a fixed
// part for the entries in the session, its index and the trie's set. It
// overstates what a filter sharing its first levels with others costs,
// and is near what one of unique levels does (heap measured per
// subscription: 14 bytes on 3 levels, 437 where this counts 750; 47 on 8
// unique levels, 1,381 for 1,583; 4,090 on 3, 4,393 for 4,826; 255 on
// 128 unique levels, 19,900 for 20,991).
func SubscriptionCost(filter string) int64 {
	return 256 + int64(len(filter)) + 160*int64(strings.Count(filter, "/")+1)
}

// Subscribe records a subscription; it reports whether the filter was
// already held (the new options replace the old).
func (s *Session) Subscribe(sub Subscription) (existed bool) {
	if i := s.findSub(sub.Filter); i >= 0 {
		s.subs[i] = sub
		return true
	}
	cost := SubscriptionCost(sub.Filter)
	s.subBytes += cost
	s.lim.subBytes.Add(cost)
	s.subs = append(s.subs, sub)
	if idx := s.subIndex(); idx != nil {
		idx[sub.Filter] = len(s.subs) - 1
	} else if len(s.subs) > subIndexMin {
		idx = make(map[string]int, len(s.subs))
		for i, sub := range s.subs {
			idx[sub.Filter] = i
		}
		s.more().subIndex = idx
	}
	return false
}

// Unsubscribe drops a subscription; it reports whether it existed.
func (s *Session) Unsubscribe(filter string) bool {
	i := s.findSub(filter)
	if i < 0 {
		return false
	}
	cost := SubscriptionCost(filter)
	s.subBytes -= cost
	s.lim.subBytes.Add(-cost)
	last := len(s.subs) - 1
	s.subs[i] = s.subs[last]
	s.subs[last] = Subscription{}
	s.subs = s.subs[:last]
	if idx := s.subIndex(); idx != nil {
		delete(idx, filter)
		if i < last {
			idx[s.subs[i].Filter] = i
		}
	}
	return true
}

// findSub returns the place of filter in subs, or -1.
func (s *Session) findSub(filter string) int {
	if idx := s.subIndex(); idx != nil {
		if i, ok := idx[filter]; ok {
			return i
		}
		return -1
	}
	for i := range s.subs {
		if s.subs[i].Filter == filter {
			return i
		}
	}
	return -1
}

// subIndex returns the index of subs by filter; nil while there is none.
func (s *Session) subIndex() map[string]int {
	if s.rare == nil {
		return nil
	}
	return s.rare.subIndex
}

// Subscribed reports whether the session holds filter.
func (s *Session) Subscribed(filter string) bool { return s.findSub(filter) >= 0 }

// SubscriptionCount reports how many subscriptions the session holds.
func (s *Session) SubscriptionCount() int { return len(s.subs) }

// SubscriptionBytes reports the SubscriptionCost of the subscriptions the
// session holds, together.
func (s *Session) SubscriptionBytes() int64 { return s.subBytes }

// Subscriptions calls fn for every subscription held.
func (s *Session) Subscriptions(fn func(Subscription)) {
	for _, sub := range s.subs {
		fn(sub)
	}
}
