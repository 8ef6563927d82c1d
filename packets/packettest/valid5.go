package packettest

import "mqttd/packets"

// props returns p with the Present bit of each id set, as the decoder
// leaves it.
func props(p packets.Properties, ids ...packets.PropID) packets.Properties {
	for _, id := range ids {
		p.Set(id)
	}
	return p
}

var userKV = []packets.UserProperty{{Key: "k", Value: "v"}}

// valid5 holds the MQTT 5.0 fixtures.
var valid5 = []Fixture{
	{
		Name: "v5-connect-full", Version: packets.V5, Desc: "5.0 CONNECT with properties, will with properties, user name and password",
		Raw: []byte{
			0x10, 0x46, // fixed header: CONNECT, remaining length 70
			0x00, 0x04, 'M', 'Q', 'T', 'T', // protocol name "MQTT"
			0x05,       // protocol level 5
			0xC6,       // connect flags: user name, password, will (QoS 0, not retained), clean start
			0x00, 0x0A, // keep alive 10 s
			0x17,                         // property length 23
			0x11, 0x00, 0x00, 0x0E, 0x10, // Session Expiry Interval 3600
			0x21, 0x00, 0x14, // Receive Maximum 20
			0x22, 0x00, 0x0A, // Topic Alias Maximum 10
			0x26, 0x00, 0x01, 'k', 0x00, 0x01, 'v', // User Property k=v
			0x27, 0x00, 0x00, 0x10, 0x00, // Maximum Packet Size 4096
			0x00, 0x02, 'c', '5', // client id "c5"
			0x0E,       // will property length 14
			0x01, 0x01, // Payload Format Indicator 1 (UTF-8)
			0x03, 0x00, 0x04, 't', 'e', 'x', 't', // Content Type "text"
			0x18, 0x00, 0x00, 0x00, 0x05, // Will Delay Interval 5
			0x00, 0x03, 'w', '/', 't', // will topic "w/t"
			0x00, 0x04, 'g', 'o', 'n', 'e', // will payload "gone"
			0x00, 0x01, 'u', // user name "u"
			0x00, 0x01, 'p', // password "p"
		},
		Packet: &packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V5, CleanStart: true, KeepAlive: 10,
			Properties: props(packets.Properties{SessionExpiry: 3600, ReceiveMaximum: 20, TopicAliasMaximum: 10,
				User: userKV, MaximumPacketSize: 4096}, packets.PropSessionExpiry, packets.PropReceiveMaximum,
				packets.PropTopicAliasMaximum, packets.PropUserProperty, packets.PropMaximumPacketSize),
			ClientID: "c5", WillFlag: true,
			WillProperties: props(packets.Properties{PayloadFormat: 1, ContentType: "text", WillDelay: 5},
				packets.PropPayloadFormat, packets.PropContentType, packets.PropWillDelay),
			WillTopic: "w/t", WillPayload: []byte("gone"),
			UsernameFlag: true, Username: "u", PasswordFlag: true, Password: []byte("p")},
	},
	{
		Name: "row09-v5-connect-password-only", Version: packets.V5, Desc: "5.0 allows a password without a user name (§3.1.2.9)",
		Raw: []byte{
			0x10, 0x12, // fixed header: CONNECT, remaining length 18
			0x00, 0x04, 'M', 'Q', 'T', 'T', // protocol name "MQTT"
			0x05,       // protocol level 5
			0x42,       // connect flags: password, clean start
			0x00, 0x3C, // keep alive 60 s
			0x00,            // property length 0
			0x00, 0x01, 'c', // client id "c"
			0x00, 0x02, 'p', 'w', // password "pw"
		},
		Packet: &packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V5, CleanStart: true, KeepAlive: 60,
			ClientID: "c", PasswordFlag: true, Password: []byte("pw")},
	},
	{
		Name: "v5-connack", Version: packets.V5, Desc: "5.0 CONNACK with properties",
		Raw: []byte{
			0x20, 0x0E, // fixed header: CONNACK, remaining length 14
			0x00,                            // acknowledge flags: none
			0x00,                            // reason code Success
			0x0B,                            // property length 11
			0x12, 0x00, 0x03, 'i', 'd', '1', // Assigned Client Identifier "id1"
			0x21, 0x00, 0x0A, // Receive Maximum 10
			0x24, 0x01, // Maximum QoS 1
		},
		Packet: &packets.Connack{Properties: props(packets.Properties{AssignedClientID: "id1", ReceiveMaximum: 10, MaximumQoS: 1},
			packets.PropAssignedClientID, packets.PropReceiveMaximum, packets.PropMaximumQoS)},
	},
	{
		Name: "v5-connack-refused", Version: packets.V5, Desc: "5.0 CONNACK 0x84 Unsupported Protocol Version (checklist row 4)",
		Raw: []byte{
			0x20, 0x03, // fixed header: CONNACK, remaining length 3
			0x00, // acknowledge flags: none
			0x84, // reason code Unsupported Protocol Version
			0x00, // property length 0
		},
		Packet: &packets.Connack{ReasonCode: packets.UnsupportedProtocolVersion},
	},
	{
		Name: "v5-publish-qos0", Version: packets.V5, Desc: "5.0 PUBLISH QoS 0 without properties",
		Raw: []byte{
			0x30, 0x08, // fixed header: PUBLISH, QoS 0, remaining length 8
			0x00, 0x03, 'a', '/', 'b', // topic "a/b"
			0x00,     // property length 0
			'h', 'i', // payload "hi"
		},
		Packet: &packets.Publish{Topic: "a/b", Payload: []byte("hi")},
	},
	{
		Name: "v5-publish-qos1-props", Version: packets.V5, Desc: "5.0 PUBLISH QoS 1 with request/response properties",
		Raw: []byte{
			0x32, 0x21, // fixed header: PUBLISH, QoS 1, remaining length 33
			0x00, 0x03, 'a', '/', 'b', // topic "a/b"
			0x00, 0x07, // packet id 7
			0x17,       // property length 23
			0x01, 0x01, // Payload Format Indicator 1 (UTF-8)
			0x02, 0x00, 0x00, 0x00, 0x3C, // Message Expiry Interval 60
			0x08, 0x00, 0x01, 'r', // Response Topic "r"
			0x09, 0x00, 0x02, 0x01, 0x02, // Correlation Data 01 02
			0x26, 0x00, 0x01, 'k', 0x00, 0x01, 'v', // User Property k=v
			'{', '}', // payload "{}"
		},
		Packet: &packets.Publish{QoS: 1, Topic: "a/b", PacketID: 7, Payload: []byte("{}"),
			Properties: props(packets.Properties{PayloadFormat: 1, MessageExpiry: 60, ResponseTopic: "r",
				CorrelationData: []byte{1, 2}, User: userKV}, packets.PropPayloadFormat, packets.PropMessageExpiry,
				packets.PropResponseTopic, packets.PropCorrelationData, packets.PropUserProperty)},
	},
	{
		Name: "row26-v5-publish-alias-empty-topic", Version: packets.V5, Desc: "an empty topic is valid with a Topic Alias (§3.3.2.3.4)",
		Raw: []byte{
			0x30, 0x07, // fixed header: PUBLISH, QoS 0, remaining length 7
			0x00, 0x00, // topic "" (the alias stands for it)
			0x03,             // property length 3
			0x23, 0x00, 0x01, // Topic Alias 1
			'x', // payload "x"
		},
		Packet: &packets.Publish{Payload: []byte("x"),
			Properties: props(packets.Properties{TopicAlias: 1}, packets.PropTopicAlias)},
	},
	{
		Name: "row34-v5-publish-subscription-ids", Version: packets.V5,
		Desc: "Subscription Identifiers decode (server to client); a broker receiving one from a client answers 0x82 [MQTT-3.3.4-6]",
		Raw: []byte{
			0x30, 0x09, // fixed header: PUBLISH, QoS 0, remaining length 9
			0x00, 0x01, 't', // topic "t"
			0x05,       // property length 5
			0x0B, 0x01, // Subscription Identifier 1
			0x0B, 0x80, 0x01, // Subscription Identifier 128
		},
		Packet: &packets.Publish{Topic: "t",
			Properties: props(packets.Properties{SubscriptionIDs: []uint32{1, 128}}, packets.PropSubscriptionID)},
	},
	{
		Name: "v5-puback", Version: packets.V5, Desc: "5.0 PUBACK short form: Success, no properties",
		Raw: []byte{
			0x40, 0x02, // fixed header: PUBACK, remaining length 2
			0x00, 0x01, // packet id 1
		},
		Packet: &packets.Puback{PacketID: 1},
	},
	{
		Name: "v5-puback-reason", Version: packets.V5, Desc: "5.0 PUBACK with a reason code and no properties",
		Raw: []byte{
			0x40, 0x03, // fixed header: PUBACK, remaining length 3
			0x00, 0x01, // packet id 1
			0x10, // reason code No matching subscribers
		},
		Packet: &packets.Puback{PacketID: 1, ReasonCode: packets.NoMatchingSubscribers},
	},
	{
		Name: "v5-puback-props", Version: packets.V5, Desc: "5.0 PUBACK with a reason string",
		Raw: []byte{
			0x40, 0x0A, // fixed header: PUBACK, remaining length 10
			0x00, 0x01, // packet id 1
			0x80,                            // reason code Unspecified error
			0x06,                            // property length 6
			0x1F, 0x00, 0x03, 'b', 'a', 'd', // Reason String "bad"
		},
		Packet: &packets.Puback{PacketID: 1, ReasonCode: packets.UnspecifiedError,
			Properties: props(packets.Properties{ReasonString: "bad"}, packets.PropReasonString)},
	},
	{
		Name: "v5-pubrec", Version: packets.V5, Desc: "5.0 PUBREC with a reason code",
		Raw: []byte{
			0x50, 0x03, // fixed header: PUBREC, remaining length 3
			0x00, 0x02, // packet id 2
			0x10, // reason code No matching subscribers
		},
		Packet: &packets.Pubrec{PacketID: 2, ReasonCode: packets.NoMatchingSubscribers},
	},
	{
		Name: "v5-pubrel", Version: packets.V5, Desc: "5.0 PUBREL Packet Identifier not found",
		Raw: []byte{
			0x62, 0x03, // fixed header: PUBREL, flags 0010, remaining length 3
			0x00, 0x03, // packet id 3
			0x92, // reason code Packet Identifier not found
		},
		Packet: &packets.Pubrel{PacketID: 3, ReasonCode: packets.PacketIDNotFound},
	},
	{
		Name: "v5-pubcomp-props", Version: packets.V5, Desc: "5.0 PUBCOMP Success with a user property",
		Raw: []byte{
			0x70, 0x0B, // fixed header: PUBCOMP, remaining length 11
			0x00, 0x04, // packet id 4
			0x00,                                   // reason code Success
			0x07,                                   // property length 7
			0x26, 0x00, 0x01, 'k', 0x00, 0x01, 'v', // User Property k=v
		},
		Packet: &packets.Pubcomp{PacketID: 4, Properties: props(packets.Properties{User: userKV}, packets.PropUserProperty)},
	},
	{
		Name: "v5-subscribe", Version: packets.V5, Desc: "5.0 SUBSCRIBE with a Subscription Identifier and every option",
		Raw: []byte{
			0x82, 0x0B, // fixed header: SUBSCRIBE, flags 0010, remaining length 11
			0x00, 0x0B, // packet id 11
			0x02,       // property length 2
			0x0B, 0x05, // Subscription Identifier 5
			0x00, 0x03, 'a', '/', '#', // filter "a/#"
			0x2D, // options: retain handling 2, retain as published, no local, QoS 1
		},
		Packet: &packets.Subscribe{PacketID: 11,
			Properties: props(packets.Properties{SubscriptionIDs: []uint32{5}}, packets.PropSubscriptionID),
			Subscriptions: []packets.Subscription{{Filter: "a/#", Options: packets.SubOptions{
				QoS: 1, NoLocal: true, RetainAsPublished: true, RetainHandling: 2}}}},
	},
	{
		Name: "v5-suback", Version: packets.V5, Desc: "5.0 SUBACK granting QoS 1 and refusing a filter",
		Raw: []byte{
			0x90, 0x05, // fixed header: SUBACK, remaining length 5
			0x00, 0x0B, // packet id 11
			0x00, // property length 0
			0x01, // Granted QoS 1
			0x8F, // Topic Filter invalid
		},
		Packet: &packets.Suback{PacketID: 11, ReasonCodes: []packets.ReasonCode{packets.GrantedQoS1, packets.TopicFilterInvalid}},
	},
	{
		Name: "v5-unsubscribe", Version: packets.V5, Desc: "5.0 UNSUBSCRIBE",
		Raw: []byte{
			0xA2, 0x06, // fixed header: UNSUBSCRIBE, flags 0010, remaining length 6
			0x00, 0x0D, // packet id 13
			0x00,            // property length 0
			0x00, 0x01, 't', // filter "t"
		},
		Packet: &packets.Unsubscribe{PacketID: 13, Filters: []string{"t"}},
	},
	{
		Name: "v5-unsuback", Version: packets.V5, Desc: "5.0 UNSUBACK with two reason codes",
		Raw: []byte{
			0xB0, 0x05, // fixed header: UNSUBACK, remaining length 5
			0x00, 0x0D, // packet id 13
			0x00, // property length 0
			0x00, // Success
			0x11, // No subscription existed
		},
		Packet: &packets.Unsuback{PacketID: 13, ReasonCodes: []packets.ReasonCode{packets.Success, packets.NoSubscriptionExisted}},
	},
	{
		Name: "v5-pingreq", Version: packets.V5, Desc: "5.0 PINGREQ",
		Raw:    []byte{0xC0, 0x00}, // fixed header: PINGREQ, remaining length 0
		Packet: &packets.Pingreq{},
	},
	{
		Name: "v5-pingresp", Version: packets.V5, Desc: "5.0 PINGRESP",
		Raw:    []byte{0xD0, 0x00}, // fixed header: PINGRESP, remaining length 0
		Packet: &packets.Pingresp{},
	},
	{
		Name: "v5-disconnect", Version: packets.V5, Desc: "5.0 DISCONNECT short form: Normal disconnection",
		Raw:    []byte{0xE0, 0x00}, // fixed header: DISCONNECT, remaining length 0
		Packet: &packets.Disconnect{},
	},
	{
		Name: "v5-disconnect-with-will", Version: packets.V5, Desc: "5.0 DISCONNECT 0x04: publish the will",
		Raw: []byte{
			0xE0, 0x01, // fixed header: DISCONNECT, remaining length 1
			0x04, // reason code Disconnect with Will Message
		},
		Packet: &packets.Disconnect{ReasonCode: packets.DisconnectWithWill},
	},
	{
		Name: "v5-disconnect-props", Version: packets.V5, Desc: "5.0 DISCONNECT setting Session Expiry Interval 0",
		Raw: []byte{
			0xE0, 0x07, // fixed header: DISCONNECT, remaining length 7
			0x00,                         // reason code Normal disconnection
			0x05,                         // property length 5
			0x11, 0x00, 0x00, 0x00, 0x00, // Session Expiry Interval 0
		},
		Packet: &packets.Disconnect{Properties: props(packets.Properties{}, packets.PropSessionExpiry)},
	},
	{
		Name: "v5-auth", Version: packets.V5, Desc: "5.0 AUTH short form: Success",
		Raw:    []byte{0xF0, 0x00}, // fixed header: AUTH, remaining length 0
		Packet: &packets.Auth{},
	},
	{
		Name: "v5-auth-continue", Version: packets.V5, Desc: "5.0 AUTH continuing a SCRAM exchange",
		Raw: []byte{
			0xF0, 0x10, // fixed header: AUTH, remaining length 16
			0x18,                                      // reason code Continue authentication
			0x0E,                                      // property length 14
			0x15, 0x00, 0x05, 'S', 'C', 'R', 'A', 'M', // Authentication Method "SCRAM"
			0x16, 0x00, 0x03, 0x01, 0x02, 0x03, // Authentication Data 01 02 03
		},
		Packet: &packets.Auth{ReasonCode: packets.ContinueAuthentication,
			Properties: props(packets.Properties{AuthMethod: "SCRAM", AuthData: []byte{1, 2, 3}},
				packets.PropAuthMethod, packets.PropAuthData)},
	},
}
