package packettest

import "mqttd/packets"

// invalidFlags holds invalid SUBSCRIBE, UNSUBSCRIBE, acknowledgement,
// PINGREQ, DISCONNECT and AUTH frames.
var invalidFlags = []Fixture{
	{
		Name: "row38-v311-subscribe-flags-0000", Version: packets.V311, Err: packets.MalformedPacket,
		Desc: "SUBSCRIBE fixed-header flags must be 0010 [MQTT-3.8.1-1]",
		Raw: []byte{
			0x80, 0x06, // fixed header: SUBSCRIBE with flags 0000, remaining length 6
			0x00, 0x01, // packet id 1
			0x00, 0x01, 't', // filter "t"
			0x00, // options: QoS 0
		},
	},
	{
		Name: "row38-v5-unsubscribe-flags-0000", Version: packets.V5, Err: packets.MalformedPacket,
		Desc: "UNSUBSCRIBE fixed-header flags must be 0010 [MQTT-3.10.1-1]",
		Raw: []byte{
			0xA0, 0x06, // fixed header: UNSUBSCRIBE with flags 0000, remaining length 6
			0x00, 0x01, // packet id 1
			0x00,            // property length 0
			0x00, 0x01, 't', // filter "t"
		},
	},
	{
		Name: "row39-v311-subscribe-no-filters", Version: packets.V311, Err: packets.ProtocolError,
		Desc: "SUBSCRIBE needs at least one filter [MQTT-3.8.3-3]",
		Raw: []byte{
			0x82, 0x02, // fixed header: SUBSCRIBE, flags 0010, remaining length 2
			0x00, 0x01, // packet id 1; no payload
		},
	},
	{
		Name: "row39-v5-subscribe-no-filters", Version: packets.V5, Err: packets.ProtocolError,
		Desc: "SUBSCRIBE needs at least one filter [MQTT-3.8.3-2]",
		Raw: []byte{
			0x82, 0x03, // fixed header: SUBSCRIBE, flags 0010, remaining length 3
			0x00, 0x01, // packet id 1
			0x00, // property length 0; no payload
		},
	},
	{
		Name: "row39-v311-unsubscribe-no-filters", Version: packets.V311, Err: packets.ProtocolError,
		Desc: "UNSUBSCRIBE needs at least one filter [MQTT-3.10.3-2]",
		Raw: []byte{
			0xA2, 0x02, // fixed header: UNSUBSCRIBE, flags 0010, remaining length 2
			0x00, 0x01, // packet id 1; no payload
		},
	},
	{
		Name: "row39-v5-unsubscribe-no-filters", Version: packets.V5, Err: packets.ProtocolError,
		Desc: "UNSUBSCRIBE needs at least one filter [MQTT-3.10.3-2]",
		Raw: []byte{
			0xA2, 0x03, // fixed header: UNSUBSCRIBE, flags 0010, remaining length 3
			0x00, 0x01, // packet id 1
			0x00, // property length 0; no payload
		},
	},
	{
		Name: "row40-v311-subscribe-qos-3", Version: packets.V311, Err: packets.MalformedPacket,
		Desc: "requested QoS 3 [MQTT-3-8.3-4]",
		Raw: []byte{
			0x82, 0x06, // fixed header: SUBSCRIBE, flags 0010, remaining length 6
			0x00, 0x01, // packet id 1
			0x00, 0x01, 't', // filter "t"
			0x03, // requested QoS 3
		},
	},
	{
		Name: "row40-v311-subscribe-reserved-bits", Version: packets.V311, Err: packets.MalformedPacket,
		Desc: "3.1.1 requested-QoS byte bits 7-2 are reserved [MQTT-3-8.3-4]",
		Raw: []byte{
			0x82, 0x06, // fixed header: SUBSCRIBE, flags 0010, remaining length 6
			0x00, 0x01, // packet id 1
			0x00, 0x01, 't', // filter "t"
			0x04, // reserved bit 2 set (No Local exists only in 5.0)
		},
	},
	{
		Name: "row40-v5-subscribe-qos-3", Version: packets.V5, Err: packets.MalformedPacket,
		Desc: "requested QoS 3 (§3.8.3.1)",
		Raw: []byte{
			0x82, 0x07, // fixed header: SUBSCRIBE, flags 0010, remaining length 7
			0x00, 0x01, // packet id 1
			0x00,            // property length 0
			0x00, 0x01, 't', // filter "t"
			0x03, // options: QoS 3
		},
	},
	{
		Name: "row40-v5-subscribe-reserved-bits", Version: packets.V5, Err: packets.MalformedPacket,
		Desc: "subscription options bits 7-6 are reserved [MQTT-3.8.3-5]",
		Raw: []byte{
			0x82, 0x07, // fixed header: SUBSCRIBE, flags 0010, remaining length 7
			0x00, 0x01, // packet id 1
			0x00,            // property length 0
			0x00, 0x01, 't', // filter "t"
			0x41, // options: reserved bit 6, QoS 1
		},
	},
	{
		Name: "row40-v5-subscribe-retain-handling-3", Version: packets.V5, Err: packets.ProtocolError,
		Desc: "Retain Handling 3 is a Protocol Error (§3.8.3.1)",
		Raw: []byte{
			0x82, 0x07, // fixed header: SUBSCRIBE, flags 0010, remaining length 7
			0x00, 0x01, // packet id 1
			0x00,            // property length 0
			0x00, 0x01, 't', // filter "t"
			0x30, // options: retain handling 3, QoS 0
		},
	},
	{
		Name: "row43-v5-subscription-id-0", Version: packets.V5, Err: packets.ProtocolError,
		Desc: "Subscription Identifier 0 (§3.8.2.1.2)",
		Raw: []byte{
			0x82, 0x09, // fixed header: SUBSCRIBE, flags 0010, remaining length 9
			0x00, 0x01, // packet id 1
			0x02,       // property length 2
			0x0B, 0x00, // Subscription Identifier 0
			0x00, 0x01, 't', // filter "t"
			0x00, // options: QoS 0
		},
	},
	{
		Name: "row44-v311-pubrel-flags-0000", Version: packets.V311, Err: packets.MalformedPacket,
		Desc: "PUBREL fixed-header flags must be 0010 [MQTT-3.6.1-1]",
		Raw: []byte{
			0x60, 0x02, // fixed header: PUBREL with flags 0000, remaining length 2
			0x00, 0x01, // packet id 1
		},
	},
	{
		Name: "row44-v311-pubrel-flags-1010", Version: packets.V311, Err: packets.MalformedPacket,
		Desc: "PUBREL fixed-header flags must be 0010, DUP included, from 3.1.1 on [MQTT-3.6.1-1] (3.1 allowed DUP)",
		Raw: []byte{
			0x6A, 0x02, // fixed header: PUBREL with flags 1010, remaining length 2
			0x00, 0x01, // packet id 1
		},
	},
	{
		Name: "row44-v5-pubrel-flags-0011", Version: packets.V5, Err: packets.MalformedPacket,
		Desc: "PUBREL fixed-header flags must be 0010 [MQTT-3.6.1-1]",
		Raw: []byte{
			0x63, 0x02, // fixed header: PUBREL with flags 0011, remaining length 2
			0x00, 0x01, // packet id 1
		},
	},
	{
		Name: "row47-v311-pingreq-extra-byte", Version: packets.V311, Err: packets.MalformedPacket,
		Desc: "PINGREQ has no body (§3.12)",
		Raw: []byte{
			0xC0, 0x01, // fixed header: PINGREQ, remaining length 1
			0x00, // unexpected byte
		},
	},
	{
		Name: "row47-v5-pingreq-flags", Version: packets.V5, Err: packets.MalformedPacket,
		Desc: "PINGREQ fixed-header flags must be 0000 [MQTT-2.1.3-1]",
		Raw:  []byte{0xC1, 0x00}, // fixed header: PINGREQ with flags 0001, remaining length 0
	},
	{
		Name: "row47-v311-puback-flags", Version: packets.V311, Err: packets.MalformedPacket,
		Desc: "PUBACK fixed-header flags must be 0000 [MQTT-2.2.2-1]",
		Raw: []byte{
			0x42, 0x02, // fixed header: PUBACK with flags 0010, remaining length 2
			0x00, 0x01, // packet id 1
		},
	},
	{
		Name: "row47-v311-puback-extra-byte", Version: packets.V311, Err: packets.MalformedPacket,
		Desc: "a 3.1.1 PUBACK is exactly 2 bytes long (§3.4)",
		Raw: []byte{
			0x40, 0x03, // fixed header: PUBACK, remaining length 3
			0x00, 0x01, // packet id 1
			0x00, // unexpected byte
		},
	},
	{
		Name: "row47-v5-puback-trailing-bytes", Version: packets.V5, Err: packets.MalformedPacket,
		Desc: "bytes after the PUBACK properties",
		Raw: []byte{
			0x40, 0x05, // fixed header: PUBACK, remaining length 5
			0x00, 0x01, // packet id 1
			0x00, // reason code Success
			0x00, // property length 0
			0xFF, // unexpected byte
		},
	},
	{
		Name: "row47-v5-puback-unknown-reason", Version: packets.V5, Err: packets.MalformedPacket,
		Desc: "reason code 0x05 is not defined for PUBACK; policy: malformed (§2.4)",
		Raw: []byte{
			0x40, 0x03, // fixed header: PUBACK, remaining length 3
			0x00, 0x01, // packet id 1
			0x05, // undefined reason code
		},
	},
	{
		Name: "row47-v5-pubcomp-packet-id-0", Version: packets.V5, Err: packets.ProtocolError,
		Desc: "acknowledgement with packet id 0 [MQTT-2.2.1-3]",
		Raw: []byte{
			0x70, 0x02, // fixed header: PUBCOMP, remaining length 2
			0x00, 0x00, // packet id 0
		},
	},
	{
		Name: "row47-v311-pingresp-extra-byte", Version: packets.V311, Err: packets.MalformedPacket,
		Desc: "PINGRESP has no body (§3.13)",
		Raw: []byte{
			0xD0, 0x01, // fixed header: PINGRESP, remaining length 1
			0x00, // unexpected byte
		},
	},
	{
		Name: "row48-v311-disconnect-flags", Version: packets.V311, Err: packets.MalformedPacket,
		Desc: "DISCONNECT fixed-header flags must be 0000 [MQTT-3.14.1-1]; the will is published",
		Raw:  []byte{0xE1, 0x00}, // fixed header: DISCONNECT with flags 0001, remaining length 0
	},
	{
		Name: "row48-v5-disconnect-flags", Version: packets.V5, Err: packets.MalformedPacket,
		Desc: "DISCONNECT fixed-header flags must be 0000 [MQTT-3.14.1-1]; the will is published",
		Raw:  []byte{0xE8, 0x00}, // fixed header: DISCONNECT with flags 1000, remaining length 0
	},
	{
		Name: "row48-v311-disconnect-extra-byte", Version: packets.V311, Err: packets.MalformedPacket,
		Desc: "a 3.1.1 DISCONNECT has no body (§3.14)",
		Raw: []byte{
			0xE0, 0x01, // fixed header: DISCONNECT, remaining length 1
			0x00, // unexpected byte
		},
	},
	{
		Name: "row48-v5-disconnect-unknown-reason", Version: packets.V5, Err: packets.MalformedPacket,
		Desc: "reason code 0x01 is not defined for DISCONNECT; policy: malformed (§2.4)",
		Raw: []byte{
			0xE0, 0x01, // fixed header: DISCONNECT, remaining length 1
			0x01, // undefined reason code
		},
	},
	{
		Name: "row47-v311-connack-reserved-flags", Version: packets.V311, Err: packets.MalformedPacket,
		Desc: "CONNACK acknowledge flags bits 7-1 are reserved (§3.2.2.1)",
		Raw: []byte{
			0x20, 0x02, // fixed header: CONNACK, remaining length 2
			0x02, // acknowledge flags: reserved bit 1
			0x00, // return code 0
		},
	},
	{
		Name: "row47-v311-connack-unknown-return-code", Version: packets.V311, Err: packets.MalformedPacket,
		Desc: "3.1.1 CONNACK return codes stop at 5 (§3.2.2.3)",
		Raw: []byte{
			0x20, 0x02, // fixed header: CONNACK, remaining length 2
			0x00, // acknowledge flags: none
			0x06, // return code 6: undefined
		},
	},
	{
		Name: "row47-v5-connack-truncated-properties", Version: packets.V5, Err: packets.MalformedPacket,
		Desc: "5.0 CONNACK without its property length",
		Raw: []byte{
			0x20, 0x02, // fixed header: CONNACK, remaining length 2
			0x00, // acknowledge flags: none
			0x00, // reason code Success; the property length is missing
		},
	},
	{
		Name: "row47-v311-suback-unknown-code", Version: packets.V311, Err: packets.MalformedPacket,
		Desc: "3.1.1 SUBACK return codes are 0, 1, 2 and 0x80 (§3.9.3)",
		Raw: []byte{
			0x90, 0x03, // fixed header: SUBACK, remaining length 3
			0x00, 0x01, // packet id 1
			0x8F, // 5.0-only code
		},
	},
	{
		Name: "row47-v5-suback-no-codes", Version: packets.V5, Err: packets.ProtocolError,
		Desc: "SUBACK carries one reason code per filter (§3.9.3)",
		Raw: []byte{
			0x90, 0x03, // fixed header: SUBACK, remaining length 3
			0x00, 0x01, // packet id 1
			0x00, // property length 0; no reason codes
		},
	},
	{
		Name: "row47-v311-suback-packet-id-0", Version: packets.V311, Err: packets.ProtocolError,
		Desc: "SUBACK with packet id 0 [MQTT-2.3.1-1]",
		Raw: []byte{
			0x90, 0x03, // fixed header: SUBACK, remaining length 3
			0x00, 0x00, // packet id 0
			0x00, // granted QoS 0
		},
	},
	{
		Name: "row47-v5-unsuback-unknown-code", Version: packets.V5, Err: packets.MalformedPacket,
		Desc: "0x01 is not an UNSUBACK reason code (§3.11.3)",
		Raw: []byte{
			0xB0, 0x04, // fixed header: UNSUBACK, remaining length 4
			0x00, 0x01, // packet id 1
			0x00, // property length 0
			0x01, // undefined reason code
		},
	},
	{
		Name: "row47-v311-unsuback-extra-byte", Version: packets.V311, Err: packets.MalformedPacket,
		Desc: "a 3.1.1 UNSUBACK is exactly 2 bytes long (§3.11)",
		Raw: []byte{
			0xB0, 0x03, // fixed header: UNSUBACK, remaining length 3
			0x00, 0x01, // packet id 1
			0x00, // unexpected byte
		},
	},
	{
		Name: "row47-v5-unsuback-flags", Version: packets.V5, Err: packets.MalformedPacket,
		Desc: "UNSUBACK fixed-header flags must be 0000 [MQTT-2.1.3-1]",
		Raw: []byte{
			0xB2, 0x04, // fixed header: UNSUBACK with flags 0010, remaining length 4
			0x00, 0x01, // packet id 1
			0x00, // property length 0
			0x00, // Success
		},
	},
	{
		Name: "row47-v5-auth-unknown-reason", Version: packets.V5, Err: packets.MalformedPacket,
		Desc: "AUTH reason codes are 0x00, 0x18 and 0x19 (§3.15.2.1)",
		Raw: []byte{
			0xF0, 0x01, // fixed header: AUTH, remaining length 1
			0x80, // undefined for AUTH
		},
	},
	{
		Name: "row21-v5-auth-flags", Version: packets.V5, Err: packets.MalformedPacket,
		Desc: "AUTH fixed-header flags must be 0000 [MQTT-3.15.1-1]",
		Raw:  []byte{0xF1, 0x00}, // fixed header: AUTH with flags 0001, remaining length 0
	},
	{
		Name: "row35-v5-auth-property-not-allowed", Version: packets.V5, Err: packets.MalformedPacket,
		Desc: "Topic Alias is not allowed in AUTH (§2.2.2.2)",
		Raw: []byte{
			0xF0, 0x05, // fixed header: AUTH, remaining length 5
			0x18,             // reason code Continue authentication
			0x03,             // property length 3
			0x23, 0x00, 0x01, // Topic Alias 1: not allowed here
		},
	},
}
