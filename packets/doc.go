// Package packets is the MQTT 3.1, 3.1.1 and 5.0 wire codec: one struct per
// control packet, properties, reason codes, strict validation of everything
// the specifications make malformed, and frame reading with the packet-size
// limit checked before any allocation.
//
// It imports nothing internal and nothing from net: it works on byte slices
// and a *bufio.Reader.
package packets
