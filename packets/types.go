package packets

// Type is the MQTT control packet type, the high nibble of the first byte.
type Type byte

// Control packet types (MQTT 5.0 §2.1.2; types 1-14 also in 3.1 and 3.1.1).
const (
	TypeReserved    Type = 0
	TypeConnect     Type = 1
	TypeConnack     Type = 2
	TypePublish     Type = 3
	TypePuback      Type = 4
	TypePubrec      Type = 5
	TypePubrel      Type = 6
	TypePubcomp     Type = 7
	TypeSubscribe   Type = 8
	TypeSuback      Type = 9
	TypeUnsubscribe Type = 10
	TypeUnsuback    Type = 11
	TypePingreq     Type = 12
	TypePingresp    Type = 13
	TypeDisconnect  Type = 14
	TypeAuth        Type = 15
)

// Version is the protocol level carried in CONNECT.
type Version byte

// Protocol levels.
const (
	V31  Version = 3 // MQTT 3.1, protocol name "MQIsdp"
	V311 Version = 4 // MQTT 3.1.1, protocol name "MQTT"
	V5   Version = 5 // MQTT 5.0, protocol name "MQTT"
)

// Packet is one decoded MQTT control packet.
type Packet interface {
	// Type reports the control packet type.
	Type() Type
	// Append appends the complete wire form (fixed header included) for
	// protocol version v to dst and returns the extended slice.
	Append(dst []byte, v Version) ([]byte, error)
	// Size reports how many bytes Append would add for version v.
	Size(v Version) int
}

// FixedHeader is the first 2-5 bytes of every packet.
type FixedHeader struct {
	Type      Type
	Flags     byte // low nibble of the first byte
	Remaining int  // remaining length: variable header plus payload
}

// UserProperty is one MQTT 5.0 User Property (a UTF-8 string pair).
type UserProperty struct {
	Key, Value string
}

// SubOptions are the per-filter options of a SUBSCRIBE (5.0 §3.8.3.1;
// 3.1/3.1.1 carry only QoS).
type SubOptions struct {
	QoS               byte
	NoLocal           bool
	RetainAsPublished bool
	RetainHandling    byte // 0 send at subscribe, 1 only if new, 2 never
}

// Subscription is one topic filter with its options.
type Subscription struct {
	Filter  string
	Options SubOptions
}

// Connect is the CONNECT packet.
type Connect struct {
	ProtocolName    string // "MQTT" or "MQIsdp"
	ProtocolVersion Version
	CleanStart      bool // Clean Session in 3.1/3.1.1
	KeepAlive       uint16
	ClientID        string
	UsernameFlag    bool
	Username        string
	PasswordFlag    bool
	Password        []byte
	WillFlag        bool
	WillQoS         byte
	WillRetain      bool
	WillTopic       string
	WillPayload     []byte
	WillProperties  Properties // 5.0 only
	Properties      Properties // 5.0 only
	// Bridge is set when the protocol level carries bit 0x80, by which a
	// 3.1 or 3.1.1 bridge (Mosquitto's try_private) tells the server it
	// is one: the server then sends it nothing it published itself, and
	// retained flags as published.
	Bridge bool
}

// Connack is the CONNACK packet. In 3.1/3.1.1 ReasonCode holds the return code.
type Connack struct {
	SessionPresent bool
	ReasonCode     ReasonCode
	Properties     Properties
}

// Publish is the PUBLISH packet.
type Publish struct {
	Dup        bool
	QoS        byte
	Retain     bool
	Topic      string
	PacketID   uint16 // only for QoS 1 and 2
	Properties Properties
	Payload    []byte
}

// Puback is the PUBACK packet.
type Puback struct {
	PacketID   uint16
	ReasonCode ReasonCode
	Properties Properties
}

// Pubrec is the PUBREC packet.
type Pubrec struct {
	PacketID   uint16
	ReasonCode ReasonCode
	Properties Properties
}

// Pubrel is the PUBREL packet.
type Pubrel struct {
	PacketID   uint16
	ReasonCode ReasonCode
	Properties Properties
}

// Pubcomp is the PUBCOMP packet.
type Pubcomp struct {
	PacketID   uint16
	ReasonCode ReasonCode
	Properties Properties
}

// Subscribe is the SUBSCRIBE packet.
type Subscribe struct {
	PacketID      uint16
	Properties    Properties
	Subscriptions []Subscription
}

// Suback is the SUBACK packet. ReasonCodes holds one code per filter
// (3.1.1 return codes 0x00-0x02 and 0x80 are the same values).
type Suback struct {
	PacketID    uint16
	Properties  Properties
	ReasonCodes []ReasonCode
}

// Unsubscribe is the UNSUBSCRIBE packet.
type Unsubscribe struct {
	PacketID   uint16
	Properties Properties
	Filters    []string
}

// Unsuback is the UNSUBACK packet. ReasonCodes is empty before 5.0.
type Unsuback struct {
	PacketID    uint16
	Properties  Properties
	ReasonCodes []ReasonCode
}

// Pingreq is the PINGREQ packet.
type Pingreq struct{}

// Pingresp is the PINGRESP packet.
type Pingresp struct{}

// Disconnect is the DISCONNECT packet. Reason code and properties are 5.0 only.
type Disconnect struct {
	ReasonCode ReasonCode
	Properties Properties
}

// Auth is the 5.0 AUTH packet.
type Auth struct {
	ReasonCode ReasonCode
	Properties Properties
}
