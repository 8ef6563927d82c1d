// Package packets is the MQTT 3.1, 3.1.1 and 5.0 wire codec: one struct per
// control packet, properties, reason codes, strict validation of everything
// the specifications make malformed, and frame reading with the packet-size
// limit checked before any allocation.
//
// It imports nothing internal and nothing from net: it works on byte slices
// and a *bufio.Reader.
//
// # Reading and ownership
//
// ReadPacket reads one frame into a fresh slice and decodes it; Decode
// decodes a frame the caller already holds. Decoded strings (via
// unsafe.String) and byte slices alias that frame, which the packet then
// owns: nothing may write to it afterwards. Zero-length byte fields decode
// as nil.
//
// # Encoding
//
// Packet.Append writes the canonical form for a version: properties in
// ascending identifier order, and the shortest 5.0 forms of acknowledgements,
// DISCONNECT and AUTH. Encoding checks lengths and QoS values only; errors
// wrap ErrEncode. Properties are encoded only for 5.0.
//
// # Validation policies
//
// Where the specifications leave a choice, the codec decides as follows:
//   - Variable byte integers that are not minimally encoded are malformed in
//     every version, not just 5.0 [MQTT-1.5.5-1].
//   - A property not allowed in the packet (or in Will Properties) and an
//     unknown property identifier are Malformed Packet, as §2.2.2.2 says; a
//     repeated property and an out-of-range value are Protocol Error.
//   - Topic Alias 0 gives TopicAliasInvalid (0x94), the code the broker sends.
//   - A Subscription Identifier in a PUBLISH is not a decode error: a server
//     legitimately sends it, and a broker receiving one from a client sees
//     Properties.Has(PropSubscriptionID) and answers 0x82 [MQTT-3.3.4-6].
//   - DUP on a QoS 0 PUBLISH is malformed [MQTT-3.3.1-2].
//   - A reason code not defined for the packet type is malformed.
//   - Bytes after the last field of a packet are malformed.
//   - Topic filter syntax, client identifier rules, control characters in
//     strings and Payload Format Indicator checks are left to the broker:
//     they lead to per-filter failure codes or configurable policy rather
//     than a malformed packet.
package packets
