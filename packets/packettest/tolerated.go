package packettest

import "mqttd/packets"

// Tolerated holds frames the codec must accept that are not canonical: a
// sender of that version may write them, but Packet.Append writes the
// packet differently, so they cannot be Valid fixtures.
var Tolerated = []Fixture{
	{
		Name: "v31-pubrel-dup", Version: packets.V31,
		Desc: "3.1 PUBREL sent again with DUP set (flags 1010), which 3.1 allows and 3.1.1 does not",
		Raw: []byte{
			0x6A, 0x02, // fixed header: PUBREL, flags 1010 (DUP, QoS 1), remaining length 2
			0x00, 0x03, // packet id 3
		},
		Packet: &packets.Pubrel{PacketID: 3},
	},
}
