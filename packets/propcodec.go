package packets

import (
	"fmt"
	"math/bits"
)

// propKind is the wire data type of a property value (§2.2.2.2).
type propKind byte

const (
	kindByte propKind = iota + 1
	kindUint16
	kindUint32
	kindVarInt
	kindString
	kindBinary
	kindPair
)

// propInfo describes one property: its data type, the packet types that
// may carry it (bit 1<<Type) and whether it belongs in Will Properties.
type propInfo struct {
	name  string
	kind  propKind
	types uint16
	will  bool
}

func typeBits(ts ...Type) uint16 {
	var m uint16
	for _, t := range ts {
		m |= 1 << t
	}
	return m
}

// propTable is the table of §2.2.2.2, indexed by PropID.
var propTable = [...]propInfo{
	PropPayloadFormat:        {"Payload Format Indicator", kindByte, typeBits(TypePublish), true},
	PropMessageExpiry:        {"Message Expiry Interval", kindUint32, typeBits(TypePublish), true},
	PropContentType:          {"Content Type", kindString, typeBits(TypePublish), true},
	PropResponseTopic:        {"Response Topic", kindString, typeBits(TypePublish), true},
	PropCorrelationData:      {"Correlation Data", kindBinary, typeBits(TypePublish), true},
	PropSubscriptionID:       {"Subscription Identifier", kindVarInt, typeBits(TypePublish, TypeSubscribe), false},
	PropSessionExpiry:        {"Session Expiry Interval", kindUint32, typeBits(TypeConnect, TypeConnack, TypeDisconnect), false},
	PropAssignedClientID:     {"Assigned Client Identifier", kindString, typeBits(TypeConnack), false},
	PropServerKeepAlive:      {"Server Keep Alive", kindUint16, typeBits(TypeConnack), false},
	PropAuthMethod:           {"Authentication Method", kindString, typeBits(TypeConnect, TypeConnack, TypeAuth), false},
	PropAuthData:             {"Authentication Data", kindBinary, typeBits(TypeConnect, TypeConnack, TypeAuth), false},
	PropRequestProblemInfo:   {"Request Problem Information", kindByte, typeBits(TypeConnect), false},
	PropWillDelay:            {"Will Delay Interval", kindUint32, 0, true},
	PropRequestResponseInfo:  {"Request Response Information", kindByte, typeBits(TypeConnect), false},
	PropResponseInfo:         {"Response Information", kindString, typeBits(TypeConnack), false},
	PropServerReference:      {"Server Reference", kindString, typeBits(TypeConnack, TypeDisconnect), false},
	PropReasonString:         {"Reason String", kindString, typeBits(TypeConnack, TypePuback, TypePubrec, TypePubrel, TypePubcomp, TypeSuback, TypeUnsuback, TypeDisconnect, TypeAuth), false},
	PropReceiveMaximum:       {"Receive Maximum", kindUint16, typeBits(TypeConnect, TypeConnack), false},
	PropTopicAliasMaximum:    {"Topic Alias Maximum", kindUint16, typeBits(TypeConnect, TypeConnack), false},
	PropTopicAlias:           {"Topic Alias", kindUint16, typeBits(TypePublish), false},
	PropMaximumQoS:           {"Maximum QoS", kindByte, typeBits(TypeConnack), false},
	PropRetainAvailable:      {"Retain Available", kindByte, typeBits(TypeConnack), false},
	PropUserProperty:         {"User Property", kindPair, 0xFFFF &^ typeBits(TypeReserved, TypePingreq, TypePingresp), true},
	PropMaximumPacketSize:    {"Maximum Packet Size", kindUint32, typeBits(TypeConnect, TypeConnack), false},
	PropWildcardSubAvailable: {"Wildcard Subscription Available", kindByte, typeBits(TypeConnack), false},
	PropSubIDAvailable:       {"Subscription Identifier Available", kindByte, typeBits(TypeConnack), false},
	PropSharedSubAvailable:   {"Shared Subscription Available", kindByte, typeBits(TypeConnack), false},
}

// sliceProps are the properties stored in slices rather than behind a
// Present bit alone: they are encoded when their slice is non-empty.
const sliceProps = 1<<PropUserProperty | 1<<PropSubscriptionID

// knownProps has the bit of every defined property identifier, so that a
// stray Present bit can never reach the encoder.
const knownProps = 1<<PropPayloadFormat | 1<<PropMessageExpiry | 1<<PropContentType |
	1<<PropResponseTopic | 1<<PropCorrelationData | 1<<PropSubscriptionID | 1<<PropSessionExpiry |
	1<<PropAssignedClientID | 1<<PropServerKeepAlive | 1<<PropAuthMethod | 1<<PropAuthData |
	1<<PropRequestProblemInfo | 1<<PropWillDelay | 1<<PropRequestResponseInfo | 1<<PropResponseInfo |
	1<<PropServerReference | 1<<PropReasonString | 1<<PropReceiveMaximum | 1<<PropTopicAliasMaximum |
	1<<PropTopicAlias | 1<<PropMaximumQoS | 1<<PropRetainAvailable | 1<<PropUserProperty |
	1<<PropMaximumPacketSize | 1<<PropWildcardSubAvailable | 1<<PropSubIDAvailable | 1<<PropSharedSubAvailable

// PropAllowed reports whether property id may appear in a packet of type t
// (will == false) or in the Will Properties of a CONNECT (will == true), per
// the table in §2.2.2.2. Unknown identifiers are never allowed.
func PropAllowed(id PropID, t Type, will bool) bool {
	if int(id) >= len(propTable) || propTable[id].kind == 0 {
		return false
	}
	if will {
		return propTable[id].will
	}
	return propTable[id].types&(1<<(t&0xF)) != 0
}

// String returns the property's name as the specification spells it.
func (id PropID) String() string {
	if int(id) < len(propTable) && propTable[id].kind != 0 {
		return propTable[id].name
	}
	return fmt.Sprintf("property 0x%02X", byte(id))
}

// Decode reads a property length and the properties it covers from the
// front of b, into p, for a packet of type t (or Will Properties when will
// is true), and returns how many bytes it consumed. Policy on errors: a
// property not allowed in this packet is a Malformed Packet, as §2.2.2.2
// says of an invalid identifier; a repeated property (other than User
// Property, and Subscription Identifier in PUBLISH) and out-of-range values
// are Protocol Errors, as the property definitions in §3 say. String and
// binary values alias b.
func (p *Properties) Decode(b []byte, t Type, will bool) (int, error) {
	d := decoder{b: b}
	err := p.decode(&d, t, will)
	return d.i, err
}

func (p *Properties) decode(d *decoder, t Type, will bool) error {
	n, err := d.varint("property length")
	if err != nil {
		return err
	}
	if n > d.left() {
		return malformed("§2.2.2.1", "property length exceeds the packet")
	}
	sub := decoder{b: d.b[d.i : d.i+n], maxUser: d.maxUser}
	d.i += n
	for sub.left() > 0 {
		if err := p.decodeOne(&sub, t, will); err != nil {
			return err
		}
	}
	return nil
}

func (p *Properties) decodeOne(d *decoder, t Type, will bool) error {
	raw, err := d.varint("property identifier")
	if err != nil {
		return err
	}
	if raw >= len(propTable) || propTable[raw].kind == 0 {
		return malformed("§2.2.2.2", fmt.Sprintf("unknown property identifier 0x%02X", raw))
	}
	id := PropID(raw)
	if !PropAllowed(id, t, will) {
		where := "Will Properties"
		if !will {
			where = t.String()
		}
		return malformed("§2.2.2.2", fmt.Sprintf("%s not allowed in %s", id, where))
	}
	repeatable := id == PropUserProperty || id == PropSubscriptionID && t == TypePublish
	if p.Has(id) && !repeatable {
		return protocolErr("§2.2.2.2", fmt.Sprintf("%s included more than once", id))
	}
	p.Set(id)
	return p.decodeValue(d, id)
}

// decodeValue reads the value of property id and stores it, range-checked.
func (p *Properties) decodeValue(d *decoder, id PropID) error {
	switch propTable[id].kind {
	case kindByte:
		v, err := d.byte1(id.String())
		if err != nil {
			return err
		}
		return p.setByte(id, v)
	case kindUint16:
		v, err := d.uint16(id.String())
		if err != nil {
			return err
		}
		return p.setUint16(id, v)
	case kindUint32:
		v, err := d.uint32(id.String())
		if err != nil {
			return err
		}
		return p.setUint32(id, v)
	case kindVarInt:
		v, err := d.varint(id.String())
		if err != nil {
			return err
		}
		if v == 0 {
			return protocolErr("§3.8.2.1.2", "Subscription Identifier 0")
		}
		p.SubscriptionIDs = append(p.SubscriptionIDs, uint32(v))
		return nil
	case kindBinary:
		v, err := d.binary(id.String())
		if err != nil {
			return err
		}
		p.setBinary(id, v)
		return nil
	case kindString:
		v, err := d.str(id.String())
		if err != nil {
			return err
		}
		p.setString(id, v)
		return nil
	default:
		return p.decodePair(d)
	}
}

func (p *Properties) decodePair(d *decoder) error {
	k, err := d.str("User Property name")
	if err != nil {
		return err
	}
	v, err := d.str("User Property value")
	if err != nil {
		return err
	}
	if d.maxUser <= 0 || len(p.User) < d.maxUser {
		p.User = append(p.User, UserProperty{Key: k, Value: v})
	}
	return nil
}

// setByte stores a one-byte property; all of them are 0 or 1 except
// Maximum QoS, which is also 0 or 1 (2 is expressed by its absence).
func (p *Properties) setByte(id PropID, v byte) error {
	if v > 1 {
		return protocolErr("§2.2.2.2", fmt.Sprintf("%s value %d is not 0 or 1", id, v))
	}
	switch id {
	case PropPayloadFormat:
		p.PayloadFormat = v
	case PropRequestProblemInfo:
		p.RequestProblemInfo = v
	case PropRequestResponseInfo:
		p.RequestResponseInfo = v
	case PropMaximumQoS:
		p.MaximumQoS = v
	case PropRetainAvailable:
		p.RetainAvailable = v
	case PropWildcardSubAvailable:
		p.WildcardSubAvailable = v
	case PropSubIDAvailable:
		p.SubIDAvailable = v
	case PropSharedSubAvailable:
		p.SharedSubAvailable = v
	}
	return nil
}

func (p *Properties) setUint16(id PropID, v uint16) error {
	switch id {
	case PropServerKeepAlive:
		p.ServerKeepAlive = v
	case PropReceiveMaximum:
		if v == 0 {
			return protocolErr("§3.1.2.11.3", "Receive Maximum 0")
		}
		p.ReceiveMaximum = v
	case PropTopicAliasMaximum:
		p.TopicAliasMaximum = v
	case PropTopicAlias:
		if v == 0 {
			// Checklist row 29: the broker answers DISCONNECT 0x94.
			return &Error{Code: TopicAliasInvalid, Ref: "[MQTT-3.3.2-8]", Msg: "Topic Alias 0"}
		}
		p.TopicAlias = v
	}
	return nil
}

func (p *Properties) setUint32(id PropID, v uint32) error {
	switch id {
	case PropMessageExpiry:
		p.MessageExpiry = v
	case PropSessionExpiry:
		p.SessionExpiry = v
	case PropWillDelay:
		p.WillDelay = v
	case PropMaximumPacketSize:
		if v == 0 {
			return protocolErr("§3.1.2.11.4", "Maximum Packet Size 0")
		}
		p.MaximumPacketSize = v
	}
	return nil
}

func (p *Properties) setBinary(id PropID, v []byte) {
	if id == PropCorrelationData {
		p.CorrelationData = v
	} else {
		p.AuthData = v
	}
}

func (p *Properties) setString(id PropID, v string) {
	switch id {
	case PropContentType:
		p.ContentType = v
	case PropResponseTopic:
		p.ResponseTopic = v
	case PropAssignedClientID:
		p.AssignedClientID = v
	case PropAuthMethod:
		p.AuthMethod = v
	case PropResponseInfo:
		p.ResponseInfo = v
	case PropServerReference:
		p.ServerReference = v
	case PropReasonString:
		p.ReasonString = v
	}
}

// wireMask is the set of properties to encode, in ascending identifier
// order: scalar ones by their Present bit, slices when non-empty.
func (p *Properties) wireMask() uint64 {
	m := p.Present & knownProps &^ sliceProps
	if len(p.SubscriptionIDs) > 0 {
		m |= 1 << PropSubscriptionID
	}
	if len(p.User) > 0 {
		m |= 1 << PropUserProperty
	}
	return m
}

// bodyLen is the encoded size of the properties without the length prefix.
func (p *Properties) bodyLen() int {
	n := 0
	for m := p.wireMask(); m != 0; m &= m - 1 {
		id := PropID(bits.TrailingZeros64(m))
		switch propTable[id].kind {
		case kindByte:
			n += 2
		case kindUint16:
			n += 3
		case kindUint32:
			n += 5
		case kindVarInt:
			for _, s := range p.SubscriptionIDs {
				n += 1 + VarIntSize(int(s))
			}
		case kindString:
			n += 3 + len(p.stringValue(id))
		case kindBinary:
			n += 3 + len(p.binaryValue(id))
		case kindPair:
			for _, u := range p.User {
				n += 5 + len(u.Key) + len(u.Value)
			}
		}
	}
	return n
}

// Size reports the encoded size of the properties including the property
// length prefix: the number of bytes Append adds.
func (p *Properties) Size() int {
	n := p.bodyLen()
	return VarIntSize(n) + n
}

// Append appends the property length and the properties in ascending
// identifier order (repeated ones in slice order). Scalar, string and
// binary properties are written when their Present bit is set; User
// Properties and Subscription Identifiers when their slice is non-empty.
// Values are not range-checked: encoding trusts the caller.
func (p *Properties) Append(dst []byte) ([]byte, error) {
	n := p.bodyLen()
	if n > MaxRemainingLength {
		return dst, encodeErr("properties are %d bytes", n)
	}
	dst = AppendVarInt(dst, n)
	for m := p.wireMask(); m != 0; m &= m - 1 {
		id := PropID(bits.TrailingZeros64(m))
		var err error
		if dst, err = p.appendOne(dst, id); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

func (p *Properties) appendOne(dst []byte, id PropID) ([]byte, error) {
	switch propTable[id].kind {
	case kindByte:
		return append(dst, byte(id), p.byteValue(id)), nil
	case kindUint16:
		return appendUint16(append(dst, byte(id)), p.uint16Value(id)), nil
	case kindUint32:
		return appendUint32(append(dst, byte(id)), p.uint32Value(id)), nil
	case kindVarInt:
		for _, s := range p.SubscriptionIDs {
			dst = AppendVarInt(append(dst, byte(id)), int(s))
		}
		return dst, nil
	case kindString:
		s := p.stringValue(id)
		if err := checkLen(id.String(), len(s)); err != nil {
			return dst, err
		}
		return appendString(append(dst, byte(id)), s), nil
	case kindBinary:
		b := p.binaryValue(id)
		if err := checkLen(id.String(), len(b)); err != nil {
			return dst, err
		}
		return appendBinary(append(dst, byte(id)), b), nil
	default:
		for _, u := range p.User {
			if err := checkLen("User Property", max(len(u.Key), len(u.Value))); err != nil {
				return dst, err
			}
			dst = appendString(appendString(append(dst, byte(id)), u.Key), u.Value)
		}
		return dst, nil
	}
}

func (p *Properties) byteValue(id PropID) byte {
	switch id {
	case PropPayloadFormat:
		return p.PayloadFormat
	case PropRequestProblemInfo:
		return p.RequestProblemInfo
	case PropRequestResponseInfo:
		return p.RequestResponseInfo
	case PropMaximumQoS:
		return p.MaximumQoS
	case PropRetainAvailable:
		return p.RetainAvailable
	case PropWildcardSubAvailable:
		return p.WildcardSubAvailable
	case PropSubIDAvailable:
		return p.SubIDAvailable
	default:
		return p.SharedSubAvailable
	}
}

func (p *Properties) uint16Value(id PropID) uint16 {
	switch id {
	case PropServerKeepAlive:
		return p.ServerKeepAlive
	case PropReceiveMaximum:
		return p.ReceiveMaximum
	case PropTopicAliasMaximum:
		return p.TopicAliasMaximum
	default:
		return p.TopicAlias
	}
}

func (p *Properties) uint32Value(id PropID) uint32 {
	switch id {
	case PropMessageExpiry:
		return p.MessageExpiry
	case PropSessionExpiry:
		return p.SessionExpiry
	case PropWillDelay:
		return p.WillDelay
	default:
		return p.MaximumPacketSize
	}
}

func (p *Properties) binaryValue(id PropID) []byte {
	if id == PropCorrelationData {
		return p.CorrelationData
	}
	return p.AuthData
}

func (p *Properties) stringValue(id PropID) string {
	switch id {
	case PropContentType:
		return p.ContentType
	case PropResponseTopic:
		return p.ResponseTopic
	case PropAssignedClientID:
		return p.AssignedClientID
	case PropAuthMethod:
		return p.AuthMethod
	case PropResponseInfo:
		return p.ResponseInfo
	case PropServerReference:
		return p.ServerReference
	default:
		return p.ReasonString
	}
}
