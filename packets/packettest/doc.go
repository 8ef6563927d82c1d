// Package packettest holds annotated raw-byte fixtures, valid and invalid,
// for every packet type in every protocol version. Codec tests, fuzz seeds,
// session script tests and broker tests share them. It imports only packets.
package packettest
