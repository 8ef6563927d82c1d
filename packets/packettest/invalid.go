package packettest

import "mqttd/packets"

// Invalid holds frames the codec must reject, each with the reason code of
// the *packets.Error. Names start with the docs/spec-checklist.md row they
// test. Codec-level rows covered: 1, 3-10, 13, 14, 17, 18, 20, 21, 23-29,
// 35, 36, 38-40, 43, 44, 47, 48. Rows 15, 26 (alias), 34 and 41 are valid
// at codec level and live in Valid; rows 2, 11, 12, 16, 19, 22, 30-33, 37,
// 42, 45, 46 and 49-55 are broker-level decisions on valid packets.
var Invalid = join(invalidConnect, invalidOther, invalidFlags)

var invalidConnect = []Fixture{
	{
		Name: "row01-publish-before-connect", Version: 0, Err: packets.ProtocolError,
		Desc: "the first packet must be CONNECT [MQTT-3.1.0-1]",
		Raw: []byte{
			0x30, 0x07, // fixed header: PUBLISH, QoS 0, remaining length 7
			0x00, 0x03, 'a', '/', 'b', // topic "a/b"
			'h', 'i', // payload "hi"
		},
	},
	{
		Name: "row01-pingreq-before-connect", Version: 0, Err: packets.ProtocolError,
		Desc: "the first packet must be CONNECT [MQTT-3.1.0-1]",
		Raw:  []byte{0xC0, 0x00}, // fixed header: PINGREQ, remaining length 0
	},
	{
		Name: "row01-huge-publish-before-connect", Version: 0, Err: packets.ProtocolError,
		Desc: "header only: rejected before the 256 MB body is awaited or allocated (CVE-2023-0809)",
		Raw: []byte{
			0x30,                   // fixed header: PUBLISH, QoS 0
			0xFF, 0xFF, 0xFF, 0x7F, // remaining length 268,435,455 (no body follows)
		},
	},
	{
		Name: "row03-v311-protocol-name-MQTX", Version: packets.V311, Err: packets.ProtocolError,
		Desc: "unknown protocol name [MQTT-3.1.2-1]",
		Raw: []byte{
			0x10, 0x0C, // fixed header: CONNECT, remaining length 12
			0x00, 0x04, 'M', 'Q', 'T', 'X', // protocol name "MQTX"
			0x04,       // protocol level 4
			0x02,       // connect flags: clean session
			0x00, 0x3C, // keep alive 60 s
			0x00, 0x00, // client id ""
		},
	},
	{
		Name: "row03-v311-protocol-name-lowercase", Version: packets.V311, Err: packets.ProtocolError,
		Desc: "the protocol name is case sensitive [MQTT-3.1.2-1]",
		Raw: []byte{
			0x10, 0x0C, // fixed header: CONNECT, remaining length 12
			0x00, 0x04, 'm', 'q', 't', 't', // protocol name "mqtt"
			0x04,       // protocol level 4
			0x02,       // connect flags: clean session
			0x00, 0x3C, // keep alive 60 s
			0x00, 0x00, // client id ""
		},
	},
	{
		Name: "row03-v311-MQIsdp-level-4", Version: packets.V311, Err: packets.UnsupportedProtocolVersion,
		Desc: "MQIsdp belongs to level 3 only [MQTT-3.1.2-1]: an unsupported level under that name",
		Raw: []byte{
			0x10, 0x0E, // fixed header: CONNECT, remaining length 14
			0x00, 0x06, 'M', 'Q', 'I', 's', 'd', 'p', // protocol name "MQIsdp"
			0x04,       // protocol level 4
			0x02,       // connect flags: clean session
			0x00, 0x3C, // keep alive 60 s
			0x00, 0x00, // client id ""
		},
	},
	{
		Name: "row03-v5-MQIsdp-level-5", Version: packets.V5, Err: packets.UnsupportedProtocolVersion,
		Desc: "MQIsdp belongs to level 3 only [MQTT-3.1.2-1]: an unsupported level under that name",
		Raw: []byte{
			0x10, 0x0F, // fixed header: CONNECT, remaining length 15
			0x00, 0x06, 'M', 'Q', 'I', 's', 'd', 'p', // protocol name "MQIsdp"
			0x05,       // protocol level 5
			0x02,       // connect flags: clean start
			0x00, 0x3C, // keep alive 60 s
			0x00,       // property length 0
			0x00, 0x00, // client id ""
		},
	},
	{
		Name: "row03-v31-MQTT-level-3", Version: packets.V31, Err: packets.UnsupportedProtocolVersion,
		Desc: "level 3 must be named MQIsdp [MQTT-3.1.2-1]: an unsupported level under MQTT (MQTT.js asked for 3.1)",
		Raw: []byte{
			0x10, 0x0C, // fixed header: CONNECT, remaining length 12
			0x00, 0x04, 'M', 'Q', 'T', 'T', // protocol name "MQTT"
			0x03,       // protocol level 3
			0x02,       // connect flags: clean session
			0x00, 0x3C, // keep alive 60 s
			0x00, 0x00, // client id ""
		},
	},
	{
		Name: "row04-protocol-level-2", Version: packets.V311, Err: packets.UnsupportedProtocolVersion,
		Desc: "unsupported level: CONNACK 0x01 (3.1.1) or 0x84 (5.0) [MQTT-3.1.2-2]",
		Raw: []byte{
			0x10, 0x0C, // fixed header: CONNECT, remaining length 12
			0x00, 0x04, 'M', 'Q', 'T', 'T', // protocol name "MQTT"
			0x02,       // protocol level 2
			0x02,       // connect flags: clean session
			0x00, 0x3C, // keep alive 60 s
			0x00, 0x00, // client id ""
		},
	},
	{
		Name: "row04-protocol-level-6", Version: packets.V5, Err: packets.UnsupportedProtocolVersion,
		Desc: "unsupported level: CONNACK 0x01 (3.1.1) or 0x84 (5.0) [MQTT-3.1.2-2]",
		Raw: []byte{
			0x10, 0x0D, // fixed header: CONNECT, remaining length 13
			0x00, 0x04, 'M', 'Q', 'T', 'T', // protocol name "MQTT"
			0x06,       // protocol level 6
			0x02,       // connect flags
			0x00, 0x3C, // keep alive 60 s
			0x00,       // property length 0 (if level 6 had one)
			0x00, 0x00, // client id ""
		},
	},
	{
		Name: "row05-v311-connect-reserved-flag", Version: packets.V311, Err: packets.MalformedPacket,
		Desc: "CONNECT flags bit 0 is reserved [MQTT-3.1.2-3]",
		Raw: []byte{
			0x10, 0x0C, // fixed header: CONNECT, remaining length 12
			0x00, 0x04, 'M', 'Q', 'T', 'T', // protocol name "MQTT"
			0x04,       // protocol level 4
			0x03,       // connect flags: clean session + RESERVED bit 0
			0x00, 0x3C, // keep alive 60 s
			0x00, 0x00, // client id ""
		},
	},
	{
		Name: "row05-v5-connect-reserved-flag", Version: packets.V5, Err: packets.MalformedPacket,
		Desc: "CONNECT flags bit 0 is reserved [MQTT-3.1.2-3]",
		Raw: []byte{
			0x10, 0x0D, // fixed header: CONNECT, remaining length 13
			0x00, 0x04, 'M', 'Q', 'T', 'T', // protocol name "MQTT"
			0x05,       // protocol level 5
			0x03,       // connect flags: clean start + RESERVED bit 0
			0x00, 0x3C, // keep alive 60 s
			0x00,       // property length 0
			0x00, 0x00, // client id ""
		},
	},
	{
		Name: "row06-v311-connect-header-flags", Version: packets.V311, Err: packets.MalformedPacket,
		Desc: "CONNECT fixed-header flags must be 0000 [MQTT-2.2.2-1]",
		Raw: []byte{
			0x11, 0x0C, // fixed header: CONNECT with flags 0001, remaining length 12
			0x00, 0x04, 'M', 'Q', 'T', 'T', // protocol name "MQTT"
			0x04,       // protocol level 4
			0x02,       // connect flags: clean session
			0x00, 0x3C, // keep alive 60 s
			0x00, 0x00, // client id ""
		},
	},
	{
		Name: "row06-v5-connect-header-flags", Version: packets.V5, Err: packets.MalformedPacket,
		Desc: "CONNECT fixed-header flags must be 0000 [MQTT-2.1.3-1]",
		Raw: []byte{
			0x18, 0x0D, // fixed header: CONNECT with flags 1000, remaining length 13
			0x00, 0x04, 'M', 'Q', 'T', 'T', // protocol name "MQTT"
			0x05,       // protocol level 5
			0x02,       // connect flags: clean start
			0x00, 0x3C, // keep alive 60 s
			0x00,       // property length 0
			0x00, 0x00, // client id ""
		},
	},
	{
		Name: "row07-v311-will-qos-without-will", Version: packets.V311, Err: packets.MalformedPacket,
		Desc: "will QoS must be 0 when the will flag is 0 [MQTT-3.1.2-13]",
		Raw: []byte{
			0x10, 0x0C, // fixed header: CONNECT, remaining length 12
			0x00, 0x04, 'M', 'Q', 'T', 'T', // protocol name "MQTT"
			0x04,       // protocol level 4
			0x0A,       // connect flags: will QoS 1 without will flag, clean session
			0x00, 0x3C, // keep alive 60 s
			0x00, 0x00, // client id ""
		},
	},
	{
		Name: "row07-v5-will-retain-without-will", Version: packets.V5, Err: packets.MalformedPacket,
		Desc: "will retain must be 0 when the will flag is 0 [MQTT-3.1.2-13]",
		Raw: []byte{
			0x10, 0x0D, // fixed header: CONNECT, remaining length 13
			0x00, 0x04, 'M', 'Q', 'T', 'T', // protocol name "MQTT"
			0x05,       // protocol level 5
			0x22,       // connect flags: will retain without will flag, clean start
			0x00, 0x3C, // keep alive 60 s
			0x00,       // property length 0
			0x00, 0x00, // client id ""
		},
	},
	{
		Name: "row08-v311-will-qos-3", Version: packets.V311, Err: packets.MalformedPacket,
		Desc: "will QoS 3 [MQTT-3.1.2-14]",
		Raw: []byte{
			0x10, 0x13, // fixed header: CONNECT, remaining length 19
			0x00, 0x04, 'M', 'Q', 'T', 'T', // protocol name "MQTT"
			0x04,       // protocol level 4
			0x1E,       // connect flags: will QoS 3, will, clean session
			0x00, 0x3C, // keep alive 60 s
			0x00, 0x00, // client id ""
			0x00, 0x01, 'w', // will topic "w"
			0x00, 0x02, 'b', 'y', // will payload "by"
		},
	},
	{
		Name: "row08-v5-will-qos-3", Version: packets.V5, Err: packets.MalformedPacket,
		Desc: "will QoS 3 [MQTT-3.1.2-12]",
		Raw: []byte{
			0x10, 0x15, // fixed header: CONNECT, remaining length 21
			0x00, 0x04, 'M', 'Q', 'T', 'T', // protocol name "MQTT"
			0x05,       // protocol level 5
			0x1E,       // connect flags: will QoS 3, will, clean start
			0x00, 0x3C, // keep alive 60 s
			0x00,       // property length 0
			0x00, 0x00, // client id ""
			0x00,            // will property length 0
			0x00, 0x01, 'w', // will topic "w"
			0x00, 0x02, 'b', 'y', // will payload "by"
		},
	},
	{
		Name: "row09-v311-password-without-username", Version: packets.V311, Err: packets.MalformedPacket,
		Desc: "3.1.1 forbids a password without a user name [MQTT-3.1.2-22]",
		Raw: []byte{
			0x10, 0x11, // fixed header: CONNECT, remaining length 17
			0x00, 0x04, 'M', 'Q', 'T', 'T', // protocol name "MQTT"
			0x04,       // protocol level 4
			0x42,       // connect flags: password, clean session
			0x00, 0x3C, // keep alive 60 s
			0x00, 0x01, 'c', // client id "c"
			0x00, 0x02, 'p', 'w', // password "pw"
		},
	},
	{
		Name: "row10-v311-missing-username", Version: packets.V311, Err: packets.MalformedPacket,
		Desc: "the user name flag promises a field that is not there (§3.1.3)",
		Raw: []byte{
			0x10, 0x0D, // fixed header: CONNECT, remaining length 13
			0x00, 0x04, 'M', 'Q', 'T', 'T', // protocol name "MQTT"
			0x04,       // protocol level 4
			0x82,       // connect flags: user name, clean session
			0x00, 0x3C, // keep alive 60 s
			0x00, 0x01, 'c', // client id "c"; the user name is missing
		},
	},
	{
		Name: "row10-v311-missing-will", Version: packets.V311, Err: packets.MalformedPacket,
		Desc: "the will flag promises a topic and payload that are not there (§3.1.3)",
		Raw: []byte{
			0x10, 0x10, // fixed header: CONNECT, remaining length 16
			0x00, 0x04, 'M', 'Q', 'T', 'T', // protocol name "MQTT"
			0x04,       // protocol level 4
			0x06,       // connect flags: will, clean session
			0x00, 0x3C, // keep alive 60 s
			0x00, 0x01, 'c', // client id "c"
			0x00, 0x01, 'w', // will topic "w"; the will payload is missing
		},
	},
	{
		Name: "row10-v5-missing-password", Version: packets.V5, Err: packets.MalformedPacket,
		Desc: "the password flag promises a field that is not there (§3.1.3)",
		Raw: []byte{
			0x10, 0x0F, // fixed header: CONNECT, remaining length 15
			0x00, 0x04, 'M', 'Q', 'T', 'T', // protocol name "MQTT"
			0x05,       // protocol level 5
			0x42,       // connect flags: password, clean start
			0x00, 0x3C, // keep alive 60 s
			0x00,            // property length 0
			0x00, 0x01, 'c', // client id "c"
			0x00, // one byte of the password length, then nothing
		},
	},
	{
		Name: "row13-v311-client-id-overlong", Version: packets.V311, Err: packets.MalformedPacket,
		Desc: "overlong UTF-8 C0 80 in the client id [MQTT-1.5.3-1]",
		Raw: []byte{
			0x10, 0x0E, // fixed header: CONNECT, remaining length 14
			0x00, 0x04, 'M', 'Q', 'T', 'T', // protocol name "MQTT"
			0x04,       // protocol level 4
			0x02,       // connect flags: clean session
			0x00, 0x3C, // keep alive 60 s
			0x00, 0x02, 0xC0, 0x80, // client id: overlong encoding of U+0000
		},
	},
	{
		Name: "row13-v5-username-truncated-utf8", Version: packets.V5, Err: packets.MalformedPacket,
		Desc: "truncated UTF-8 sequence E2 82 in the user name [MQTT-1.5.4-1]",
		Raw: []byte{
			0x10, 0x12, // fixed header: CONNECT, remaining length 18
			0x00, 0x04, 'M', 'Q', 'T', 'T', // protocol name "MQTT"
			0x05,       // protocol level 5
			0x82,       // connect flags: user name, clean start
			0x00, 0x3C, // keep alive 60 s
			0x00,            // property length 0
			0x00, 0x01, 'c', // client id "c"
			0x00, 0x02, 0xE2, 0x82, // user name: first two bytes of a three-byte sequence
		},
	},
	{
		Name: "row36-v5-connect-receive-maximum-0", Version: packets.V5, Err: packets.ProtocolError,
		Desc: "Receive Maximum 0 (§3.1.2.11.3)",
		Raw: []byte{
			0x10, 0x11, // fixed header: CONNECT, remaining length 17
			0x00, 0x04, 'M', 'Q', 'T', 'T', // protocol name "MQTT"
			0x05,       // protocol level 5
			0x02,       // connect flags: clean start
			0x00, 0x3C, // keep alive 60 s
			0x03,             // property length 3
			0x21, 0x00, 0x00, // Receive Maximum 0
			0x00, 0x01, 'c', // client id "c"
		},
	},
	{
		Name: "row36-v5-connect-maximum-packet-size-0", Version: packets.V5, Err: packets.ProtocolError,
		Desc: "Maximum Packet Size 0 (§3.1.2.11.4)",
		Raw: []byte{
			0x10, 0x13, // fixed header: CONNECT, remaining length 19
			0x00, 0x04, 'M', 'Q', 'T', 'T', // protocol name "MQTT"
			0x05,       // protocol level 5
			0x02,       // connect flags: clean start
			0x00, 0x3C, // keep alive 60 s
			0x05,                         // property length 5
			0x27, 0x00, 0x00, 0x00, 0x00, // Maximum Packet Size 0
			0x00, 0x01, 'c', // client id "c"
		},
	},
	{
		Name: "row36-v5-connect-request-problem-info-3", Version: packets.V5, Err: packets.ProtocolError,
		Desc: "Request Problem Information must be 0 or 1 (§3.1.2.11.7)",
		Raw: []byte{
			0x10, 0x10, // fixed header: CONNECT, remaining length 16
			0x00, 0x04, 'M', 'Q', 'T', 'T', // protocol name "MQTT"
			0x05,       // protocol level 5
			0x02,       // connect flags: clean start
			0x00, 0x3C, // keep alive 60 s
			0x02,       // property length 2
			0x17, 0x03, // Request Problem Information 3
			0x00, 0x01, 'c', // client id "c"
		},
	},
	{
		Name: "row36-v5-connect-property-length-beyond-packet", Version: packets.V5, Err: packets.MalformedPacket,
		Desc: "property length runs past the remaining length (§2.2.2.1)",
		Raw: []byte{
			0x10, 0x0D, // fixed header: CONNECT, remaining length 13
			0x00, 0x04, 'M', 'Q', 'T', 'T', // protocol name "MQTT"
			0x05,       // protocol level 5
			0x02,       // connect flags: clean start
			0x00, 0x3C, // keep alive 60 s
			0x20,       // property length 32, but only 2 bytes follow
			0x00, 0x00, // client id ""
		},
	},
	{
		Name: "row35-v5-will-property-not-allowed", Version: packets.V5, Err: packets.MalformedPacket,
		Desc: "Session Expiry Interval is not a will property (§2.2.2.2)",
		Raw: []byte{
			0x10, 0x18, // fixed header: CONNECT, remaining length 24
			0x00, 0x04, 'M', 'Q', 'T', 'T', // protocol name "MQTT"
			0x05,       // protocol level 5
			0x06,       // connect flags: will, clean start
			0x00, 0x3C, // keep alive 60 s
			0x00,       // property length 0
			0x00, 0x00, // client id ""
			0x05,                         // will property length 5
			0x11, 0x00, 0x00, 0x00, 0x01, // Session Expiry Interval 1: not allowed here
			0x00, 0x01, 'w', // will topic "w"
			0x00, 0x00, // will payload ""
		},
	},
}
