// Package topictrie validates MQTT topic names and filters and matches topics
// against subscriptions (with + and # wildcards, the $-topic rule and $share
// groups) and retained topics against filters. It is generic over the
// subscriber key and imports nothing internal.
//
// # Validation
//
// ValidTopicName, ValidFilter and ParseFilter (and the same methods of
// Limits, which also caps the length and the number of levels) return one of
// the package's sentinel errors. Any error from a filter check maps to SUBACK
// 0x80 (3.1.1) or 0x8F (5.0); any error from a topic name check to 0x90.
// UTF-8 well-formedness is the codec's job and is not checked here.
//
// # Subscriptions
//
// A Trie[K, V] holds subscriptions: K identifies the subscriber (a client id
// or a pointer to the session), V carries the subscription's options. Match
// appends every matching subscription to a caller-supplied buffer without
// allocating; a share group contributes one member, picked by the Trie's
// Strategy. ForEachDelivery then groups a result into the copies to send:
// one per subscriber (with the maximum QoS, or all subscription identifiers)
// plus one per share group.
//
// Match runs under the trie's read lock and calls nothing of the caller's
// while holding it except Strategy.Choose, so the broker can collect matches,
// return, and only then take session locks to deliver.
//
// # Retained messages
//
// Retained[T] stores one value per topic name in a tree of levels; Match
// walks only the branches a filter can reach.
//
// # Cost
//
// Matching costs time in the depth of the topic and the number of matches,
// not in the number of subscriptions; a topic with thousands of levels is
// cheap because the walk stops where the trie ends, and filters and stored
// topic names are capped at Limits.MaxLevels levels, which bounds recursion.
// There is no match cache: an exact match over a million subscriptions
// already takes well under a microsecond (see docs/perf-log.md).
package topictrie
