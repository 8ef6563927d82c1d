// Package session holds the per-client protocol state machines: inbound and
// outbound QoS 1/2 windows with separate packet-id spaces, the offline queue,
// redelivery on reconnect, expiry and wills. It is pure: no network, no
// goroutines, the clock is passed in; methods return what to send, route or
// persist. It imports only packets.
package session
