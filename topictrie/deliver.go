package topictrie

import (
	"cmp"
	"slices"
)

// ForEachDelivery reorders subs, a Match result, in place and calls fn once
// per copy of the message to send:
//
//   - once per key with all of that key's normal subscriptions that matched,
//     so the caller sends one copy with the maximum QoS of the run (3.1.1
//     style, [MQTT-3.3.4-2]) or one copy carrying the subscription
//     identifiers of every entry of the run (5.0, [MQTT-3.3.4-4]);
//   - once for each shared subscription entry on its own, because a share
//     group delivers its copy independently of the member's other
//     subscriptions (5.0 §4.8.2).
//
// It does not allocate: it sorts subs by KeyID, unless every normal
// subscription in them is on one filter, whose keys are distinct (a
// topic with many subscribers on one filter: sorting them for every
// message showed in a 100-subscriber fan-out's profile). fn must not keep the slice
// it is given, which aliases subs.
func ForEachDelivery[K comparable, V any](subs []Sub[K, V], fn func(run []Sub[K, V])) {
	if oneFilter(subs) {
		for i := range subs {
			fn(subs[i : i+1])
		}
		return
	}
	slices.SortFunc(subs, func(a, b Sub[K, V]) int {
		// Normal subscriptions first, grouped by key; shared ones after them.
		if as, bs := a.Group != "", b.Group != ""; as != bs {
			if as {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.KeyID, b.KeyID)
	})
	for i := 0; i < len(subs); {
		j := i + 1
		if subs[i].Group == "" {
			for j < len(subs) && subs[j].Group == "" && subs[j].KeyID == subs[i].KeyID {
				j++
			}
		}
		fn(subs[i:j])
		i = j
	}
}

// oneFilter reports whether the normal subscriptions of subs all come from
// one filter; shared ones are delivered on their own whatever their filter.
func oneFilter[K comparable, V any](subs []Sub[K, V]) bool {
	first := -1
	for i := range subs {
		if subs[i].Group != "" {
			continue
		}
		if first < 0 {
			first = i
		} else if subs[i].Filter != subs[first].Filter {
			return false
		}
	}
	return true
}
