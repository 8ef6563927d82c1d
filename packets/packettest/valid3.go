package packettest

import "mqttd/packets"

// Valid holds well-formed frames of every packet type in MQTT 3.1, 3.1.1
// and 5.0. Each decodes to Packet and encodes back to Raw.
var Valid = join(valid3, valid5)

// valid3 holds the MQTT 3.1 (MQIsdp) and 3.1.1 fixtures.
var valid3 = []Fixture{
	{
		Name: "v31-connect", Version: packets.V31, Desc: "3.1 CONNECT with protocol name MQIsdp, clean session",
		Raw: []byte{
			0x10, 0x13, // fixed header: CONNECT, remaining length 19
			0x00, 0x06, 'M', 'Q', 'I', 's', 'd', 'p', // protocol name "MQIsdp"
			0x03,       // protocol level 3
			0x02,       // connect flags: clean session
			0x00, 0x3C, // keep alive 60 s
			0x00, 0x05, 'm', 'q', 't', 't', 'd', // client id "mqttd"
		},
		Packet: &packets.Connect{ProtocolName: "MQIsdp", ProtocolVersion: packets.V31, CleanStart: true,
			KeepAlive: 60, ClientID: "mqttd"},
	},
	{
		Name: "v311-connect-minimal", Version: packets.V311, Desc: "3.1.1 CONNECT with an empty client id and clean session",
		Raw: []byte{
			0x10, 0x0C, // fixed header: CONNECT, remaining length 12
			0x00, 0x04, 'M', 'Q', 'T', 'T', // protocol name "MQTT"
			0x04,       // protocol level 4
			0x02,       // connect flags: clean session
			0x00, 0x00, // keep alive 0 (off)
			0x00, 0x00, // client id "" (server assigns one)
		},
		Packet: &packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V311, CleanStart: true},
	},
	{
		Name: "v311-connect-full", Version: packets.V311, Desc: "3.1.1 CONNECT with will (QoS 1, retained), user name and password",
		Raw: []byte{
			0x10, 0x22, // fixed header: CONNECT, remaining length 34
			0x00, 0x04, 'M', 'Q', 'T', 'T', // protocol name "MQTT"
			0x04,       // protocol level 4
			0xEE,       // connect flags: user name, password, will retain, will QoS 1, will, clean session
			0x00, 0x1E, // keep alive 30 s
			0x00, 0x02, 'c', '1', // client id "c1"
			0x00, 0x03, 'l', 'w', 't', // will topic "lwt"
			0x00, 0x03, 'b', 'y', 'e', // will payload "bye"
			0x00, 0x04, 'u', 's', 'e', 'r', // user name "user"
			0x00, 0x02, 'p', 'w', // password "pw"
		},
		Packet: &packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V311, CleanStart: true, KeepAlive: 30,
			ClientID: "c1", WillFlag: true, WillQoS: 1, WillRetain: true, WillTopic: "lwt", WillPayload: []byte("bye"),
			UsernameFlag: true, Username: "user", PasswordFlag: true, Password: []byte("pw")},
	},
	{
		Name: "v31-connack", Version: packets.V31, Desc: "3.1 CONNACK accepted",
		Raw: []byte{
			0x20, 0x02, // fixed header: CONNACK, remaining length 2
			0x00, // reserved (3.1 has no session present flag)
			0x00, // return code 0: accepted
		},
		Packet: &packets.Connack{},
	},
	{
		Name: "v311-connack-session-present", Version: packets.V311, Desc: "3.1.1 CONNACK accepted, session present",
		Raw: []byte{
			0x20, 0x02, // fixed header: CONNACK, remaining length 2
			0x01, // acknowledge flags: session present
			0x00, // return code 0: accepted
		},
		Packet: &packets.Connack{SessionPresent: true},
	},
	{
		Name: "v311-connack-refused", Version: packets.V311, Desc: "3.1.1 CONNACK refusing the protocol version (checklist row 4)",
		Raw: []byte{
			0x20, 0x02, // fixed header: CONNACK, remaining length 2
			0x00, // acknowledge flags: none
			0x01, // return code 1: unacceptable protocol version
		},
		Packet: &packets.Connack{ReasonCode: packets.ConnRefusedProtocolVersion},
	},
	{
		Name: "v31-publish-qos0", Version: packets.V31, Desc: "3.1 PUBLISH QoS 0",
		Raw: []byte{
			0x30, 0x07, // fixed header: PUBLISH, QoS 0, remaining length 7
			0x00, 0x03, 'a', '/', 'b', // topic "a/b"
			'h', 'i', // payload "hi"
		},
		Packet: &packets.Publish{Topic: "a/b", Payload: []byte("hi")},
	},
	{
		Name: "v311-publish-qos1", Version: packets.V311, Desc: "3.1.1 PUBLISH QoS 1",
		Raw: []byte{
			0x32, 0x0C, // fixed header: PUBLISH, QoS 1, remaining length 12
			0x00, 0x03, 'a', '/', 'b', // topic "a/b"
			0x00, 0x01, // packet id 1
			'h', 'e', 'l', 'l', 'o', // payload "hello"
		},
		Packet: &packets.Publish{QoS: 1, Topic: "a/b", PacketID: 1, Payload: []byte("hello")},
	},
	{
		Name: "v311-publish-qos2-dup-retain", Version: packets.V311, Desc: "3.1.1 PUBLISH QoS 2 with DUP and RETAIN, empty payload",
		Raw: []byte{
			0x3D,            // fixed header: PUBLISH, DUP, QoS 2, RETAIN
			0x05,            // remaining length 5
			0x00, 0x01, 't', // topic "t"
			0x0A, 0x0B, // packet id 2571
		},
		Packet: &packets.Publish{Dup: true, QoS: 2, Retain: true, Topic: "t", PacketID: 0x0A0B},
	},
	{
		Name: "row15-v311-publish-bom-topic", Version: packets.V311, Desc: "a BOM inside a topic is an ordinary character and is kept [MQTT-1.5.3-3]",
		Raw: []byte{
			0x30, 0x07, // fixed header: PUBLISH, QoS 0, remaining length 7
			0x00, 0x04, 0xEF, 0xBB, 0xBF, 't', // topic "\uFEFFt"
			'x', // payload "x"
		},
		Packet: &packets.Publish{Topic: "\uFEFFt", Payload: []byte("x")},
	},
	{
		Name: "v31-puback", Version: packets.V31, Desc: "3.1 PUBACK",
		Raw: []byte{
			0x40, 0x02, // fixed header: PUBACK, remaining length 2
			0x00, 0x01, // packet id 1
		},
		Packet: &packets.Puback{PacketID: 1},
	},
	{
		Name: "v311-puback", Version: packets.V311, Desc: "3.1.1 PUBACK",
		Raw: []byte{
			0x40, 0x02, // fixed header: PUBACK, remaining length 2
			0x00, 0x01, // packet id 1
		},
		Packet: &packets.Puback{PacketID: 1},
	},
	{
		Name: "v311-pubrec", Version: packets.V311, Desc: "3.1.1 PUBREC",
		Raw: []byte{
			0x50, 0x02, // fixed header: PUBREC, remaining length 2
			0x00, 0x02, // packet id 2
		},
		Packet: &packets.Pubrec{PacketID: 2},
	},
	{
		Name: "v311-pubrel", Version: packets.V311, Desc: "3.1.1 PUBREL (flags 0010)",
		Raw: []byte{
			0x62, 0x02, // fixed header: PUBREL, flags 0010, remaining length 2
			0x00, 0x03, // packet id 3
		},
		Packet: &packets.Pubrel{PacketID: 3},
	},
	{
		Name: "v31-pubrel", Version: packets.V31, Desc: "3.1 PUBREL (flags 0010)",
		Raw: []byte{
			0x62, 0x02, // fixed header: PUBREL, flags 0010, remaining length 2
			0x00, 0x03, // packet id 3
		},
		Packet: &packets.Pubrel{PacketID: 3},
	},
	{
		Name: "v311-pubcomp", Version: packets.V311, Desc: "3.1.1 PUBCOMP",
		Raw: []byte{
			0x70, 0x02, // fixed header: PUBCOMP, remaining length 2
			0x00, 0x04, // packet id 4
		},
		Packet: &packets.Pubcomp{PacketID: 4},
	},
	{
		Name: "v31-subscribe", Version: packets.V31, Desc: "3.1 SUBSCRIBE one filter",
		Raw: []byte{
			0x82, 0x08, // fixed header: SUBSCRIBE, flags 0010, remaining length 8
			0x00, 0x01, // packet id 1
			0x00, 0x03, 'a', '/', 'b', // filter "a/b"
			0x01, // requested QoS 1
		},
		Packet: &packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{
			{Filter: "a/b", Options: packets.SubOptions{QoS: 1}}}},
	},
	{
		Name: "v311-subscribe", Version: packets.V311, Desc: "3.1.1 SUBSCRIBE two filters with wildcards",
		Raw: []byte{
			0x82, 0x0C, // fixed header: SUBSCRIBE, flags 0010, remaining length 12
			0x00, 0x0A, // packet id 10
			0x00, 0x03, 'a', '/', '+', // filter "a/+"
			0x01,            // requested QoS 1
			0x00, 0x01, '#', // filter "#"
			0x02, // requested QoS 2
		},
		Packet: &packets.Subscribe{PacketID: 10, Subscriptions: []packets.Subscription{
			{Filter: "a/+", Options: packets.SubOptions{QoS: 1}},
			{Filter: "#", Options: packets.SubOptions{QoS: 2}}}},
	},
	{
		Name: "row41-v311-subscribe-bad-filter", Version: packets.V311,
		Desc: "a filter with # not last decodes; the broker answers SUBACK 0x80 for it (checklist row 41)",
		Raw: []byte{
			0x82, 0x0A, // fixed header: SUBSCRIBE, flags 0010, remaining length 10
			0x00, 0x01, // packet id 1
			0x00, 0x05, 'a', '/', '#', '/', 'b', // filter "a/#/b"
			0x00, // requested QoS 0
		},
		Packet: &packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{{Filter: "a/#/b"}}},
	},
	{
		Name: "v31-suback", Version: packets.V31, Desc: "3.1 SUBACK",
		Raw: []byte{
			0x90, 0x03, // fixed header: SUBACK, remaining length 3
			0x00, 0x01, // packet id 1
			0x01, // granted QoS 1
		},
		Packet: &packets.Suback{PacketID: 1, ReasonCodes: []packets.ReasonCode{packets.GrantedQoS1}},
	},
	{
		Name: "v311-suback", Version: packets.V311, Desc: "3.1.1 SUBACK with a failure code",
		Raw: []byte{
			0x90, 0x04, // fixed header: SUBACK, remaining length 4
			0x00, 0x0A, // packet id 10
			0x01, // granted QoS 1
			0x80, // failure
		},
		Packet: &packets.Suback{PacketID: 10, ReasonCodes: []packets.ReasonCode{packets.GrantedQoS1, packets.SubackFailure}},
	},
	{
		Name: "v31-unsubscribe", Version: packets.V31, Desc: "3.1 UNSUBSCRIBE",
		Raw: []byte{
			0xA2, 0x07, // fixed header: UNSUBSCRIBE, flags 0010, remaining length 7
			0x00, 0x01, // packet id 1
			0x00, 0x03, 'a', '/', 'b', // filter "a/b"
		},
		Packet: &packets.Unsubscribe{PacketID: 1, Filters: []string{"a/b"}},
	},
	{
		Name: "v311-unsubscribe", Version: packets.V311, Desc: "3.1.1 UNSUBSCRIBE two filters",
		Raw: []byte{
			0xA2, 0x0A, // fixed header: UNSUBSCRIBE, flags 0010, remaining length 10
			0x00, 0x0C, // packet id 12
			0x00, 0x03, 'a', '/', 'b', // filter "a/b"
			0x00, 0x01, '#', // filter "#"
		},
		Packet: &packets.Unsubscribe{PacketID: 12, Filters: []string{"a/b", "#"}},
	},
	{
		Name: "v31-unsuback", Version: packets.V31, Desc: "3.1 UNSUBACK",
		Raw: []byte{
			0xB0, 0x02, // fixed header: UNSUBACK, remaining length 2
			0x00, 0x01, // packet id 1
		},
		Packet: &packets.Unsuback{PacketID: 1},
	},
	{
		Name: "v311-unsuback", Version: packets.V311, Desc: "3.1.1 UNSUBACK",
		Raw: []byte{
			0xB0, 0x02, // fixed header: UNSUBACK, remaining length 2
			0x00, 0x0C, // packet id 12
		},
		Packet: &packets.Unsuback{PacketID: 12},
	},
	{
		Name: "v31-pingreq", Version: packets.V31, Desc: "3.1 PINGREQ",
		Raw:    []byte{0xC0, 0x00}, // fixed header: PINGREQ, remaining length 0
		Packet: &packets.Pingreq{},
	},
	{
		Name: "v311-pingreq", Version: packets.V311, Desc: "3.1.1 PINGREQ",
		Raw:    []byte{0xC0, 0x00}, // fixed header: PINGREQ, remaining length 0
		Packet: &packets.Pingreq{},
	},
	{
		Name: "v311-pingresp", Version: packets.V311, Desc: "3.1.1 PINGRESP",
		Raw:    []byte{0xD0, 0x00}, // fixed header: PINGRESP, remaining length 0
		Packet: &packets.Pingresp{},
	},
	{
		Name: "v31-disconnect", Version: packets.V31, Desc: "3.1 DISCONNECT",
		Raw:    []byte{0xE0, 0x00}, // fixed header: DISCONNECT, remaining length 0
		Packet: &packets.Disconnect{},
	},
	{
		Name: "v311-disconnect", Version: packets.V311, Desc: "3.1.1 DISCONNECT",
		Raw:    []byte{0xE0, 0x00}, // fixed header: DISCONNECT, remaining length 0
		Packet: &packets.Disconnect{},
	},
}
