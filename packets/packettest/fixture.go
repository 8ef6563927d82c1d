package packettest

import "mqttd/packets"

// Fixture is one complete frame, as a client or server would put it on
// the wire, with the packet it must decode to or the reason code of the
// error it must be rejected with.
type Fixture struct {
	// Name identifies the fixture; invalid ones start with their
	// docs/spec-checklist.md row number ("row05-...").
	Name string
	// Version is the protocol version to decode with (0: before CONNECT,
	// as ReadPacket is called for a connection's first packet). CONNECT
	// fixtures carry the level that is in their bytes.
	Version packets.Version
	// Raw is the whole frame, fixed header included.
	Raw []byte
	// Packet is the expected decoded packet, nil for invalid fixtures.
	// Valid fixtures are in canonical form: Packet.Append(nil, Version)
	// gives Raw back byte for byte.
	Packet packets.Packet
	// Err is the reason code of the *packets.Error an invalid fixture
	// must be rejected with.
	Err packets.ReasonCode
	// MaxSize is the maxSize to pass to ReadPacket (0: no limit).
	MaxSize int
	// Desc says what the fixture exercises.
	Desc string
}

// All returns the valid fixtures, then the tolerated ones, then the
// invalid ones.
func All() []Fixture { return join(Valid, Tolerated, Invalid) }

func join(parts ...[]Fixture) []Fixture {
	var all []Fixture
	for _, p := range parts {
		all = append(all, p...)
	}
	return all
}
