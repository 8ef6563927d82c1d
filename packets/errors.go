package packets

import "fmt"

// Error is a decoding or validation failure. Code is the reason code the
// broker must answer with (5.0: CONNACK or DISCONNECT carries it; 3.1.1:
// the connection is closed, or CONNACK carries Code when it is a 3.1.1
// return code). Ref cites the spec statement that was broken, if any.
type Error struct {
	Code ReasonCode
	Ref  string
	Msg  string
	// Size is the frame's size in bytes of a PacketTooLarge error.
	Size int
}

func (e *Error) Error() string {
	if e.Ref != "" {
		return fmt.Sprintf("mqtt: %s (reason 0x%02X, %s)", e.Msg, byte(e.Code), e.Ref)
	}
	return fmt.Sprintf("mqtt: %s (reason 0x%02X)", e.Msg, byte(e.Code))
}

func malformed(ref, msg string) *Error { return &Error{Code: MalformedPacket, Ref: ref, Msg: msg} }

func protocolErr(ref, msg string) *Error { return &Error{Code: ProtocolError, Ref: ref, Msg: msg} }
