// Package session holds the per-client protocol state of the broker: the
// outbound QoS 1/2 window with its packet ids, the queue of messages
// waiting for the window or for the client to come back (with message
// expiry), redelivery with DUP on reconnect, inbound QoS 2 packet ids
// awaiting PUBREL (a packet-id space of its own), and the subscription
// list. It is pure: no network, no goroutines, the clock is passed in;
// methods say what to send and the broker encodes and writes it. It
// imports only packets.
package session
