package packets

import (
	"bytes"
	"slices"
	"strings"
)

// PropID is an MQTT 5.0 property identifier (§2.2.2.2).
type PropID byte

// Property identifiers.
const (
	PropPayloadFormat        PropID = 0x01
	PropMessageExpiry        PropID = 0x02
	PropContentType          PropID = 0x03
	PropResponseTopic        PropID = 0x08
	PropCorrelationData      PropID = 0x09
	PropSubscriptionID       PropID = 0x0B
	PropSessionExpiry        PropID = 0x11
	PropAssignedClientID     PropID = 0x12
	PropServerKeepAlive      PropID = 0x13
	PropAuthMethod           PropID = 0x15
	PropAuthData             PropID = 0x16
	PropRequestProblemInfo   PropID = 0x17
	PropWillDelay            PropID = 0x18
	PropRequestResponseInfo  PropID = 0x19
	PropResponseInfo         PropID = 0x1A
	PropServerReference      PropID = 0x1C
	PropReasonString         PropID = 0x1F
	PropReceiveMaximum       PropID = 0x21
	PropTopicAliasMaximum    PropID = 0x22
	PropTopicAlias           PropID = 0x23
	PropMaximumQoS           PropID = 0x24
	PropRetainAvailable      PropID = 0x25
	PropUserProperty         PropID = 0x26
	PropMaximumPacketSize    PropID = 0x27
	PropWildcardSubAvailable PropID = 0x28
	PropSubIDAvailable       PropID = 0x29
	PropSharedSubAvailable   PropID = 0x2A
)

// Properties holds every MQTT 5.0 property as a value. Present has bit
// (1 << id) set for each property that was (or is to be) on the wire, so a
// zero value is distinguishable from an absent one without allocation.
type Properties struct {
	Present uint64

	PayloadFormat        byte
	MessageExpiry        uint32
	ContentType          string
	ResponseTopic        string
	CorrelationData      []byte
	SubscriptionIDs      []uint32 // may repeat in PUBLISH; one in SUBSCRIBE
	SessionExpiry        uint32
	AssignedClientID     string
	ServerKeepAlive      uint16
	AuthMethod           string
	AuthData             []byte
	RequestProblemInfo   byte
	WillDelay            uint32
	RequestResponseInfo  byte
	ResponseInfo         string
	ServerReference      string
	ReasonString         string
	ReceiveMaximum       uint16
	TopicAliasMaximum    uint16
	TopicAlias           uint16
	MaximumQoS           byte
	RetainAvailable      byte
	User                 []UserProperty // may repeat
	MaximumPacketSize    uint32
	WildcardSubAvailable byte
	SubIDAvailable       byte
	SharedSubAvailable   byte
}

// IsZero reports whether every field of p is zero.
func (p *Properties) IsZero() bool {
	return p.Present == 0 && p.PayloadFormat == 0 && p.MessageExpiry == 0 && p.ContentType == "" &&
		p.ResponseTopic == "" && p.CorrelationData == nil && p.SubscriptionIDs == nil &&
		p.SessionExpiry == 0 && p.AssignedClientID == "" && p.ServerKeepAlive == 0 &&
		p.AuthMethod == "" && p.AuthData == nil && p.RequestProblemInfo == 0 && p.WillDelay == 0 &&
		p.RequestResponseInfo == 0 && p.ResponseInfo == "" && p.ServerReference == "" &&
		p.ReasonString == "" && p.ReceiveMaximum == 0 && p.TopicAliasMaximum == 0 &&
		p.TopicAlias == 0 && p.MaximumQoS == 0 && p.RetainAvailable == 0 && p.User == nil &&
		p.MaximumPacketSize == 0 && p.WildcardSubAvailable == 0 && p.SubIDAvailable == 0 &&
		p.SharedSubAvailable == 0
}

// Has reports whether property id is present.
func (p *Properties) Has(id PropID) bool { return p.Present&(1<<id) != 0 }

// Set marks property id as present; the caller sets the value field.
func (p *Properties) Set(id PropID) { p.Present |= 1 << id }

// Clone returns a copy of p that shares no memory with it: a decoded
// packet's strings and slices alias its frame, and a value kept past the
// packet must not pin the whole frame.
func (p *Properties) Clone() Properties {
	c := *p
	c.ContentType = strings.Clone(p.ContentType)
	c.ResponseTopic = strings.Clone(p.ResponseTopic)
	c.CorrelationData = bytes.Clone(p.CorrelationData)
	c.SubscriptionIDs = slices.Clone(p.SubscriptionIDs)
	c.AssignedClientID = strings.Clone(p.AssignedClientID)
	c.AuthMethod = strings.Clone(p.AuthMethod)
	c.AuthData = bytes.Clone(p.AuthData)
	c.ResponseInfo = strings.Clone(p.ResponseInfo)
	c.ServerReference = strings.Clone(p.ServerReference)
	c.ReasonString = strings.Clone(p.ReasonString)
	if p.User != nil {
		c.User = make([]UserProperty, len(p.User))
		for i, u := range p.User {
			c.User[i] = UserProperty{Key: strings.Clone(u.Key), Value: strings.Clone(u.Value)}
		}
	}
	return c
}
