// Package topictrie validates MQTT topic names and filters and matches topics
// against subscriptions (with + and # wildcards, the $-topic rule and $share
// groups) and retained topics against filters. It is generic over the
// subscriber key and imports nothing internal.
package topictrie
