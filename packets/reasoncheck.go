package packets

import (
	"fmt"
	"strings"
)

// Reason codes each packet type may carry (5.0 §2.4 and the reason code
// tables of §3), as strings of bytes so membership needs no allocation.
const (
	pubackReasons     = "\x00\x10\x80\x83\x87\x90\x91\x97\x99"
	pubrelReasons     = "\x00\x92"
	connackReasons    = "\x00\x80\x81\x82\x83\x84\x85\x86\x87\x88\x89\x8A\x8C\x90\x95\x97\x99\x9A\x9B\x9C\x9D\x9F"
	subackReasons     = "\x00\x01\x02\x80\x83\x87\x8F\x91\x97\x9E\xA1\xA2"
	unsubackReasons   = "\x00\x11\x80\x83\x87\x8F\x91"
	disconnectReasons = "\x00\x04\x80\x81\x82\x83\x87\x89\x8B\x8D\x8E\x8F\x90\x93\x94\x95\x96\x97\x98\x99\x9A\x9B\x9C\x9D\x9E\x9F\xA0\xA1\xA2"
	authReasons       = "\x00\x18\x19"
	connack311Reasons = "\x00\x01\x02\x03\x04\x05"
	suback311Reasons  = "\x00\x01\x02\x80"
)

// ValidReasonCode reports whether packet type t may carry reason code c in
// version v (for 3.1/3.1.1: CONNACK return codes and SUBACK return codes).
func ValidReasonCode(t Type, v Version, c ReasonCode) bool {
	var set string
	switch t {
	case TypePuback, TypePubrec:
		set = pubackReasons
	case TypePubrel, TypePubcomp:
		set = pubrelReasons
	case TypeConnack:
		set = pick(v == V5, connackReasons, connack311Reasons)
	case TypeSuback:
		set = pick(v == V5, subackReasons, suback311Reasons)
	case TypeUnsuback:
		set = unsubackReasons
	case TypeDisconnect:
		set = disconnectReasons
	case TypeAuth:
		set = authReasons
	}
	return strings.IndexByte(set, byte(c)) >= 0
}

// decodeReason reads a reason code and rejects one not defined for t.
// Policy: an undefined reason code is a Malformed Packet (§2.4: a packet
// holding a value not of its specified type).
func decodeReason(d *decoder, v Version, t Type) (ReasonCode, error) {
	c, err := d.byte1("reason code")
	if err != nil {
		return 0, err
	}
	if !ValidReasonCode(t, v, ReasonCode(c)) {
		return 0, malformed("§2.4", fmt.Sprintf("reason code 0x%02X is not valid in %s", c, t))
	}
	return ReasonCode(c), nil
}
