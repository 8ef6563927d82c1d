// Package packettest holds annotated raw-byte fixtures, valid, tolerated
// (accepted but not written so) and invalid,
// for every packet type in every protocol version. The codec tests, the
// codec's fuzz seeds and the broker's spec tests (spec_test.go, which runs
// the invalid ones against a live broker) share them. It imports only
// packets.
package packettest
