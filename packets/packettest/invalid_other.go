package packettest

import "mqttd/packets"

// invalidOther holds the invalid frames of every type but CONNECT.
var invalidOther = []Fixture{
	{
		Name: "row13-v311-topic-surrogate", Version: packets.V311, Err: packets.MalformedPacket,
		Desc: "UTF-16 surrogate U+D800 (ED A0 80) in a topic [MQTT-1.5.3-1]",
		Raw: []byte{
			0x30, 0x06, // fixed header: PUBLISH, QoS 0, remaining length 6
			0x00, 0x03, 0xED, 0xA0, 0x80, // topic: encoded surrogate U+D800
			'x', // payload "x"
		},
	},
	{
		Name: "row13-v5-property-string-ill-formed", Version: packets.V5, Err: packets.MalformedPacket,
		Desc: "byte FF in a Content Type property [MQTT-1.5.4-1]",
		Raw: []byte{
			0x30, 0x08, // fixed header: PUBLISH, QoS 0, remaining length 8
			0x00, 0x01, 't', // topic "t"
			0x04,                   // property length 4
			0x03, 0x00, 0x01, 0xFF, // Content Type: byte FF is never UTF-8
		},
	},
	{
		Name: "row14-v311-topic-nul", Version: packets.V311, Err: packets.MalformedPacket,
		Desc: "U+0000 in a topic [MQTT-1.5.3-2]",
		Raw: []byte{
			0x30, 0x05, // fixed header: PUBLISH, QoS 0, remaining length 5
			0x00, 0x03, 'a', 0x00, 'b', // topic "a\x00b"
		},
	},
	{
		Name: "row14-v5-topic-nul", Version: packets.V5, Err: packets.MalformedPacket,
		Desc: "U+0000 in a topic [MQTT-1.5.4-2]",
		Raw: []byte{
			0x30, 0x06, // fixed header: PUBLISH, QoS 0, remaining length 6
			0x00, 0x03, 'a', 0x00, 'b', // topic "a\x00b"
			0x00, // property length 0
		},
	},
	{
		Name: "row17-remaining-length-5-bytes", Version: packets.V311, Err: packets.MalformedPacket,
		Desc: "a remaining length has at most 4 bytes (§1.5.5); header only",
		Raw: []byte{
			0x30,                         // fixed header: PUBLISH, QoS 0
			0xFF, 0xFF, 0xFF, 0xFF, 0x7F, // remaining length with a 5th byte
		},
	},
	{
		Name: "row17-v5-remaining-length-5-bytes", Version: packets.V5, Err: packets.MalformedPacket,
		Desc: "a remaining length has at most 4 bytes (§1.5.5); header only",
		Raw: []byte{
			0xC0,                         // fixed header: PINGREQ
			0x80, 0x80, 0x80, 0x80, 0x01, // remaining length with a 5th byte
		},
	},
	{
		Name: "row18-v311-remaining-length-non-minimal", Version: packets.V311, Err: packets.MalformedPacket,
		Desc: "remaining length 0 spelled 80 00; policy: rejected in 3.1.1 as in 5.0 [MQTT-1.5.5-1]",
		Raw: []byte{
			0xC0,       // fixed header: PINGREQ
			0x80, 0x00, // remaining length 0, not minimally encoded
		},
	},
	{
		Name: "row18-v5-remaining-length-non-minimal", Version: packets.V5, Err: packets.MalformedPacket,
		Desc: "remaining length 3 spelled 83 00 [MQTT-1.5.5-1]",
		Raw: []byte{
			0x40,       // fixed header: PUBACK
			0x83, 0x00, // remaining length 3, not minimally encoded
			0x00, 0x01, // packet id 1
			0x10, // reason code No matching subscribers
		},
	},
	{
		Name: "row18-v5-property-length-non-minimal", Version: packets.V5, Err: packets.MalformedPacket,
		Desc: "property length 0 spelled 80 00 [MQTT-1.5.5-1]",
		Raw: []byte{
			0x40, 0x05, // fixed header: PUBACK, remaining length 5
			0x00, 0x01, // packet id 1
			0x10,       // reason code No matching subscribers
			0x80, 0x00, // property length 0, not minimally encoded
		},
	},
	{
		Name: "row20-v311-packet-too-large", Version: packets.V311, Err: packets.PacketTooLarge, MaxSize: 16,
		Desc: "a 25-byte frame against a 16-byte limit, refused from the fixed header",
		Raw: []byte{
			0x30, 0x17, // fixed header: PUBLISH, QoS 0, remaining length 23
			0x00, 0x01, 't', // topic "t"
			'0', '1', '2', '3', '4', '5', '6', '7', '8', '9', // payload, 20 bytes
			'0', '1', '2', '3', '4', '5', '6', '7', '8', '9',
		},
	},
	{
		Name: "row20-v5-packet-too-large-200MB", Version: packets.V5, Err: packets.PacketTooLarge, MaxSize: 1 << 20,
		Desc: "header only: claims 200 MB; refused before any body byte is read or allocated",
		Raw: []byte{
			0x30,                   // fixed header: PUBLISH, QoS 0
			0x80, 0x80, 0x80, 0x64, // remaining length 209,715,200
		},
	},
	{
		Name: "row21-v311-type-0", Version: packets.V311, Err: packets.MalformedPacket,
		Desc: "packet type 0 is reserved (§2.1.2)",
		Raw:  []byte{0x00, 0x00}, // fixed header: type 0, remaining length 0
	},
	{
		Name: "row21-v5-type-0", Version: packets.V5, Err: packets.MalformedPacket,
		Desc: "packet type 0 is reserved (§2.1.2)",
		Raw:  []byte{0x00, 0x00}, // fixed header: type 0, remaining length 0
	},
	{
		Name: "row21-v311-auth", Version: packets.V311, Err: packets.MalformedPacket,
		Desc: "type 15 (AUTH) is reserved before 5.0",
		Raw:  []byte{0xF0, 0x00}, // fixed header: AUTH, remaining length 0
	},
	{
		Name: "row23-v311-publish-qos-3", Version: packets.V311, Err: packets.MalformedPacket,
		Desc: "both QoS bits set [MQTT-3.3.1-4]",
		Raw: []byte{
			0x36, 0x05, // fixed header: PUBLISH, QoS 3, remaining length 5
			0x00, 0x01, 't', // topic "t"
			0x00, 0x01, // packet id 1
		},
	},
	{
		Name: "row23-v5-publish-qos-3", Version: packets.V5, Err: packets.MalformedPacket,
		Desc: "both QoS bits set [MQTT-3.3.1-4]",
		Raw: []byte{
			0x36, 0x06, // fixed header: PUBLISH, QoS 3, remaining length 6
			0x00, 0x01, 't', // topic "t"
			0x00, 0x01, // packet id 1
			0x00, // property length 0
		},
	},
	{
		Name: "row24-v311-publish-dup-qos-0", Version: packets.V311, Err: packets.MalformedPacket,
		Desc: "DUP on a QoS 0 PUBLISH; policy: malformed [MQTT-3.3.1-2]",
		Raw: []byte{
			0x38, 0x04, // fixed header: PUBLISH, DUP, QoS 0, remaining length 4
			0x00, 0x01, 't', // topic "t"
			'x', // payload "x"
		},
	},
	{
		Name: "row24-v5-publish-dup-qos-0", Version: packets.V5, Err: packets.MalformedPacket,
		Desc: "DUP on a QoS 0 PUBLISH; policy: malformed [MQTT-3.3.1-2]",
		Raw: []byte{
			0x38, 0x04, // fixed header: PUBLISH, DUP, QoS 0, remaining length 4
			0x00, 0x01, 't', // topic "t"
			0x00, // property length 0
		},
	},
	{
		Name: "row25-v311-publish-topic-plus", Version: packets.V311, Err: packets.TopicNameInvalid,
		Desc: "wildcard + in a topic name [MQTT-3.3.2-2]",
		Raw: []byte{
			0x30, 0x05, // fixed header: PUBLISH, QoS 0, remaining length 5
			0x00, 0x03, 'a', '/', '+', // topic "a/+"
		},
	},
	{
		Name: "row25-v5-publish-topic-hash", Version: packets.V5, Err: packets.TopicNameInvalid,
		Desc: "wildcard # in a topic name [MQTT-3.3.2-2]",
		Raw: []byte{
			0x30, 0x05, // fixed header: PUBLISH, QoS 0, remaining length 5
			0x00, 0x02, 'a', '#', // topic "a#"
			0x00, // property length 0
		},
	},
	{
		Name: "row26-v311-publish-empty-topic", Version: packets.V311, Err: packets.ProtocolError,
		Desc: "zero-length topic name [MQTT-4.7.3-1]",
		Raw: []byte{
			0x30, 0x03, // fixed header: PUBLISH, QoS 0, remaining length 3
			0x00, 0x00, // topic ""
			'x', // payload "x"
		},
	},
	{
		Name: "row26-v5-publish-empty-topic-no-alias", Version: packets.V5, Err: packets.ProtocolError,
		Desc: "zero-length topic name without a Topic Alias [MQTT-4.7.3-1]",
		Raw: []byte{
			0x30, 0x04, // fixed header: PUBLISH, QoS 0, remaining length 4
			0x00, 0x00, // topic ""
			0x00, // property length 0
			'x',  // payload "x"
		},
	},
	{
		Name: "row27-v311-publish-packet-id-0", Version: packets.V311, Err: packets.ProtocolError,
		Desc: "QoS 1 PUBLISH with packet id 0 [MQTT-2.3.1-1]",
		Raw: []byte{
			0x32, 0x05, // fixed header: PUBLISH, QoS 1, remaining length 5
			0x00, 0x01, 't', // topic "t"
			0x00, 0x00, // packet id 0
		},
	},
	{
		Name: "row27-v5-publish-packet-id-0", Version: packets.V5, Err: packets.ProtocolError,
		Desc: "QoS 2 PUBLISH with packet id 0 [MQTT-2.2.1-3]",
		Raw: []byte{
			0x34, 0x06, // fixed header: PUBLISH, QoS 2, remaining length 6
			0x00, 0x01, 't', // topic "t"
			0x00, 0x00, // packet id 0
			0x00, // property length 0
		},
	},
	{
		Name: "row28-v311-publish-truncated-packet-id", Version: packets.V311, Err: packets.MalformedPacket,
		Desc: "QoS 1 PUBLISH ending inside its packet id",
		Raw: []byte{
			0x32, 0x04, // fixed header: PUBLISH, QoS 1, remaining length 4
			0x00, 0x01, 't', // topic "t"
			0x00, // first byte of the packet id, then the frame ends
		},
	},
	{
		Name: "row28-v5-publish-truncated-properties", Version: packets.V5, Err: packets.MalformedPacket,
		Desc: "QoS 1 PUBLISH ending before its property length (mosquitto 13-malformed-publish-v5)",
		Raw: []byte{
			0x32, 0x05, // fixed header: PUBLISH, QoS 1, remaining length 5
			0x00, 0x01, 't', // topic "t"
			0x00, 0x01, // packet id 1; the property length is missing
		},
	},
	{
		Name: "row28-v311-publish-truncated-topic", Version: packets.V311, Err: packets.MalformedPacket,
		Desc: "topic length runs past the end of the frame",
		Raw: []byte{
			0x30, 0x03, // fixed header: PUBLISH, QoS 0, remaining length 3
			0x00, 0x05, 't', // topic length 5, but 1 byte follows
		},
	},
	{
		Name: "row29-v5-topic-alias-0", Version: packets.V5, Err: packets.TopicAliasInvalid,
		Desc: "Topic Alias 0 is not permitted [MQTT-3.3.2-8]; DISCONNECT 0x94 (checklist row 29)",
		Raw: []byte{
			0x30, 0x07, // fixed header: PUBLISH, QoS 0, remaining length 7
			0x00, 0x01, 't', // topic "t"
			0x03,             // property length 3
			0x23, 0x00, 0x00, // Topic Alias 0
		},
	},
	{
		Name: "row35-v5-message-expiry-twice", Version: packets.V5, Err: packets.ProtocolError,
		Desc: "Message Expiry Interval included twice (§2.2.2.2)",
		Raw: []byte{
			0x30, 0x0E, // fixed header: PUBLISH, QoS 0, remaining length 14
			0x00, 0x01, 't', // topic "t"
			0x0A,                         // property length 10
			0x02, 0x00, 0x00, 0x00, 0x01, // Message Expiry Interval 1
			0x02, 0x00, 0x00, 0x00, 0x02, // Message Expiry Interval 2: duplicate
		},
	},
	{
		Name: "row35-v5-session-expiry-in-publish", Version: packets.V5, Err: packets.MalformedPacket,
		Desc: "Session Expiry Interval is not allowed in PUBLISH; policy: malformed as §2.2.2.2 says",
		Raw: []byte{
			0x30, 0x09, // fixed header: PUBLISH, QoS 0, remaining length 9
			0x00, 0x01, 't', // topic "t"
			0x05,                         // property length 5
			0x11, 0x00, 0x00, 0x00, 0x01, // Session Expiry Interval 1
		},
	},
	{
		Name: "row35-v5-subscription-id-twice-in-subscribe", Version: packets.V5, Err: packets.ProtocolError,
		Desc: "only PUBLISH may repeat the Subscription Identifier (§3.8.2.1.2)",
		Raw: []byte{
			0x82, 0x0B, // fixed header: SUBSCRIBE, flags 0010, remaining length 11
			0x00, 0x01, // packet id 1
			0x04,       // property length 4
			0x0B, 0x01, // Subscription Identifier 1
			0x0B, 0x02, // Subscription Identifier 2: duplicate
			0x00, 0x01, 't', // filter "t"
			0x00, // options: QoS 0
		},
	},
	{
		Name: "row36-v5-publish-property-length-beyond-packet", Version: packets.V5, Err: packets.MalformedPacket,
		Desc: "property length runs past the remaining length (§2.2.2.1)",
		Raw: []byte{
			0x32, 0x07, // fixed header: PUBLISH, QoS 1, remaining length 7
			0x00, 0x01, 't', // topic "t"
			0x00, 0x01, // packet id 1
			0x05, // property length 5, but 1 byte follows
			0x01, // start of a Payload Format Indicator
		},
	},
	{
		Name: "row36-v5-payload-format-2", Version: packets.V5, Err: packets.ProtocolError,
		Desc: "Payload Format Indicator must be 0 or 1 (§3.3.2.3.2)",
		Raw: []byte{
			0x30, 0x06, // fixed header: PUBLISH, QoS 0, remaining length 6
			0x00, 0x01, 't', // topic "t"
			0x02,       // property length 2
			0x01, 0x02, // Payload Format Indicator 2
		},
	},
	{
		Name: "row36-v5-unknown-property", Version: packets.V5, Err: packets.MalformedPacket,
		Desc: "property identifier 0x7F does not exist (§2.2.2.2)",
		Raw: []byte{
			0x30, 0x06, // fixed header: PUBLISH, QoS 0, remaining length 6
			0x00, 0x01, 't', // topic "t"
			0x02,       // property length 2
			0x7F, 0x00, // unknown property 0x7F
		},
	},
}
