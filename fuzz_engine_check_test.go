package mqttd_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"mqttd/packets"
)

// streamEnd is how a stream ends as the broker's codec reads it, which
// decides how the harness ends the connection and what it may expect.
type streamEnd int

const (
	// endOpen: every frame is whole and accepted by the codec, and none
	// is a DISCONNECT.
	endOpen streamEnd = iota
	// endBroken: the first frame is not CONNECT, or a frame is rejected
	// by the codec (a malformed packet, a protocol error, too large).
	endBroken
	// endIncomplete: the stream stops inside a frame (or is empty).
	endIncomplete
	// endDisconnect: a DISCONNECT; nothing after it is read.
	endDisconnect
)

// clientStream is what the broker can have read from a stream: the
// frames the codec accepts, decoded as the broker decodes them, up to the
// first one it rejects or that is incomplete. The broker may stop earlier
// (its own checks refuse a CONNECT, a topic, a second CONNECT), so the
// packet ids and counts here bound what it may answer.
type clientStream struct {
	end streamEnd
	// connect is the first frame when it is a CONNECT the codec accepts.
	connect *packets.Connect
	// badConnect: the first frame is a CONNECT the codec rejects; the
	// broker may answer with a refusing CONNACK, in the form of 3.1.1 or
	// of 5.0, and nothing else.
	badConnect bool

	pub1, pub2, pubrec, pubrel map[uint16]bool  // ids of client PUBLISH QoS 1, 2, PUBREC, PUBREL
	subs, unsubs               map[uint16][]int // SUBSCRIBE, UNSUBSCRIBE ids: their filter counts
	pings                      int              // PINGREQs, the harness's own included
}

// checkSession checks the answer to a stream that starts with a CONNECT
// the codec accepts: a CONNACK first, then only packets a server may send
// in that version, each answering something the stream sent, and nothing
// after a refusing CONNACK or a DISCONNECT. It also checks the 5.0 limits
// the CONNECT set for what the server sends.
func (cs *clientStream) checkSession(reply []byte, reset bool) error {
	v := cs.connect.ProtocolVersion
	props := &cs.connect.Properties
	r := bytes.NewReader(reply)
	br := bufio.NewReader(r)
	offset := func() int { return len(reply) - r.Len() - br.Buffered() }
	serverQoS2 := map[uint16]bool{}
	pings := 0
	end := ""
	for i := 0; ; i++ {
		start := offset()
		p, err := packets.ReadPacket(br, v, 0)
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case errors.Is(err, io.ErrUnexpectedEOF) && reset:
			return nil // the reset may cut the last frame
		case err != nil:
			return fmt.Errorf("packet %d at byte %d does not decode as version %d: %w", i, start, v, err)
		}
		size := offset() - start
		at := fmt.Sprintf("packet %d (%T at byte %d)", i, p, start)
		if end != "" {
			return fmt.Errorf("%s comes after %s", at, end)
		}
		if _, ok := p.(*packets.Connack); ok != (i == 0) {
			return fmt.Errorf("%s: the first packet, and only it, must be CONNACK [MQTT-3.2.0-1]", at)
		}
		if ap := ackProperties(p); ap != nil && v == packets.V5 && props.Has(packets.PropRequestProblemInfo) &&
			props.RequestProblemInfo == 0 && (ap.Has(packets.PropReasonString) || ap.Has(packets.PropUserProperty)) {
			return fmt.Errorf("%s carries a reason string or user property the client asked not to get [MQTT-3.1.2-29]", at)
		}
		switch p := p.(type) {
		case *packets.Connack:
			if connackRefuses(p, v) {
				end = "a refusing CONNACK"
			}
		case *packets.Publish:
			if v == packets.V5 && props.Has(packets.PropMaximumPacketSize) && size > int(props.MaximumPacketSize) {
				return fmt.Errorf("%s of %d bytes exceeds the client's Maximum Packet Size %d [MQTT-3.1.2-24]", at, size, props.MaximumPacketSize)
			}
			if p.Properties.Has(packets.PropTopicAlias) && p.Properties.TopicAlias > props.TopicAliasMaximum {
				return fmt.Errorf("%s uses topic alias %d, above the client's maximum %d [MQTT-3.2.2-17]", at, p.Properties.TopicAlias, props.TopicAliasMaximum)
			}
			if p.QoS == 2 {
				serverQoS2[p.PacketID] = true
			}
		case *packets.Puback:
			if !cs.pub1[p.PacketID] {
				return fmt.Errorf("%s answers no QoS 1 PUBLISH with id %d", at, p.PacketID)
			}
		case *packets.Pubrec:
			if !cs.pub2[p.PacketID] {
				return fmt.Errorf("%s answers no QoS 2 PUBLISH with id %d", at, p.PacketID)
			}
		case *packets.Pubcomp:
			if !cs.pubrel[p.PacketID] {
				return fmt.Errorf("%s answers no PUBREL with id %d", at, p.PacketID)
			}
		case *packets.Pubrel:
			// Either the next step of the server's own QoS 2 delivery, or
			// the answer to a PUBREC for an id it does not know (5.0 with
			// 0x92; 3.1.1 brokers answer it too, so the client can move on).
			if !serverQoS2[p.PacketID] && !cs.pubrec[p.PacketID] {
				return fmt.Errorf("%s releases id %d, which no QoS 2 PUBLISH of the server nor PUBREC of the client used", at, p.PacketID)
			}
		case *packets.Suback:
			if !slices.Contains(cs.subs[p.PacketID], len(p.ReasonCodes)) {
				return fmt.Errorf("%s with %d codes answers no SUBSCRIBE with id %d and as many filters (sent: %v) [MQTT-3.9.3-1]",
					at, len(p.ReasonCodes), p.PacketID, cs.subs[p.PacketID])
			}
		case *packets.Unsuback:
			counts, ok := cs.unsubs[p.PacketID]
			if !ok || v == packets.V5 && !slices.Contains(counts, len(p.ReasonCodes)) {
				return fmt.Errorf("%s with %d codes answers no UNSUBSCRIBE with id %d and as many filters (sent: %v)",
					at, len(p.ReasonCodes), p.PacketID, counts)
			}
		case *packets.Pingresp:
			if pings++; pings > cs.pings {
				return fmt.Errorf("%s: more PINGRESPs than the %d PINGREQs sent", at, cs.pings)
			}
		case *packets.Disconnect:
			if v != packets.V5 {
				return fmt.Errorf("%s: a server sends DISCONNECT only in 5.0", at)
			}
			end = "a server DISCONNECT [MQTT-3.14.4-1]"
		default:
			// CONNECT, SUBSCRIBE, UNSUBSCRIBE, PINGREQ go only to a server;
			// AUTH only to a client that asked for enhanced authentication,
			// which this broker refuses [MQTT-4.12.0-6].
			return fmt.Errorf("%s is not a packet this server may send", at)
		}
	}
}

func parseStream(b []byte) *clientStream {
	cs := &clientStream{
		pub1: map[uint16]bool{}, pub2: map[uint16]bool{}, pubrec: map[uint16]bool{}, pubrel: map[uint16]bool{},
		subs: map[uint16][]int{}, unsubs: map[uint16][]int{},
	}
	fh, n, err := packets.ParseFixedHeader(b, 0, fuzzMaxPacket)
	switch {
	case err != nil:
		// Only a CONNECT gets past the first-packet check, so this is a
		// CONNECT declaring more than the packet limit, or not a CONNECT.
		cs.end = endBroken
		cs.badConnect = packets.Type(b[0]>>4) == packets.TypeConnect
		return cs
	case n == 0 || len(b) < n+fh.Remaining:
		cs.end = endIncomplete
		return cs
	}
	p, err := packets.Decode(fh, b[n:n+fh.Remaining], 0)
	if err != nil {
		cs.end, cs.badConnect = endBroken, true
		return cs
	}
	cs.connect = p.(*packets.Connect)
	v := cs.connect.ProtocolVersion
	for b = b[n+fh.Remaining:]; ; b = b[n+fh.Remaining:] {
		if len(b) == 0 {
			cs.end = endOpen
			return cs
		}
		fh, n, err = packets.ParseFixedHeader(b, v, fuzzMaxPacket)
		switch {
		case err != nil:
			cs.end = endBroken
			return cs
		case n == 0 || len(b) < n+fh.Remaining:
			cs.end = endIncomplete
			return cs
		}
		p, err := packets.Decode(fh, b[n:n+fh.Remaining], v)
		if err != nil {
			cs.end = endBroken
			return cs
		}
		switch p := p.(type) {
		case *packets.Publish:
			switch p.QoS {
			case 1:
				cs.pub1[p.PacketID] = true
			case 2:
				cs.pub2[p.PacketID] = true
			}
		case *packets.Pubrec:
			cs.pubrec[p.PacketID] = true
		case *packets.Pubrel:
			cs.pubrel[p.PacketID] = true
		case *packets.Subscribe:
			cs.subs[p.PacketID] = append(cs.subs[p.PacketID], len(p.Subscriptions))
		case *packets.Unsubscribe:
			cs.unsubs[p.PacketID] = append(cs.unsubs[p.PacketID], len(p.Filters))
		case *packets.Pingreq:
			cs.pings++
		case *packets.Disconnect:
			cs.end = endDisconnect
			return cs
		}
	}
}

// countPingresps counts the whole PINGRESP frames in b. A bad frame header
// ends the wait at once: no PINGRESP can be told apart after it, and
// checkReply reports it.
func countPingresps(b []byte) int {
	n := 0
	for len(b) > 0 {
		fh, hn, err := packets.ParseFixedHeader(b, packets.V5, 0)
		if err != nil {
			return math.MaxInt // nothing to wait for
		}
		if hn == 0 || len(b) < hn+fh.Remaining {
			return n
		}
		if fh.Type == packets.TypePingresp {
			n++
		}
		b = b[hn+fh.Remaining:]
	}
	return n
}

// checkReply checks what the broker wrote back against the stream.
func checkReply(cs *clientStream, reply []byte, reset bool) error {
	switch {
	case cs.connect != nil:
		return cs.checkSession(reply, reset)
	case cs.badConnect:
		if len(reply) == 0 {
			return nil
		}
		// The level may be unknown or unsupported, so either form will do.
		var errs []error
		for _, v := range []packets.Version{packets.V311, packets.V5} {
			err := checkRefusal(reply, v, reset)
			if err == nil {
				return nil
			}
			errs = append(errs, fmt.Errorf("as version %d: %w", v, err))
		}
		return fmt.Errorf("the stream starts with a CONNECT the codec rejects: the answer may only be one refusing CONNACK:\n%w", errors.Join(errs...))
	case len(reply) > 0:
		return errors.New("the stream does not start with a whole CONNECT: nothing may be sent [MQTT-3.1.0-1]")
	}
	return nil
}

func checkRefusal(reply []byte, v packets.Version, reset bool) error {
	br := bufio.NewReader(bytes.NewReader(reply))
	p, err := packets.ReadPacket(br, v, 0)
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF) && reset:
		return nil // the reset may cut the last frame
	case err != nil:
		return err
	}
	ack, ok := p.(*packets.Connack)
	switch {
	case !ok:
		return fmt.Errorf("%T, not a CONNACK", p)
	case !connackRefuses(ack, v):
		return fmt.Errorf("CONNACK accepts it: %+v", ack)
	case br.Buffered() > 0:
		return fmt.Errorf("%d bytes after the refusing CONNACK", br.Buffered())
	}
	return nil
}

// connackRefuses reports a CONNACK that refuses the connection: the server must
// then close it, sending nothing more [MQTT-3.2.2-5] [MQTT-3.2.2-7].
func connackRefuses(ack *packets.Connack, v packets.Version) bool {
	if v == packets.V5 {
		return ack.ReasonCode >= 0x80
	}
	return ack.ReasonCode != 0
}

// ackProperties returns the properties of the packets that may carry a
// reason string or user properties only when the client allows it.
func ackProperties(p packets.Packet) *packets.Properties {
	switch p := p.(type) {
	case *packets.Puback:
		return &p.Properties
	case *packets.Pubrec:
		return &p.Properties
	case *packets.Pubrel:
		return &p.Properties
	case *packets.Pubcomp:
		return &p.Properties
	case *packets.Suback:
		return &p.Properties
	case *packets.Unsuback:
		return &p.Properties
	}
	return nil
}
