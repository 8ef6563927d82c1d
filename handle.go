package mqttd

import (
	"fmt"
	"time"

	"mqttd/packets"
)

// Acting on the packets of a connected client: handle dispatches each
// to its handler (handle_connect.go, handle_publish.go, handle_ack.go,
// handle_subscribe.go), and the answers and refusals they share are here.

// handle acts on one packet from a connected client.
func (c *conn) handle(p packets.Packet) error {
	if b := c.cl.bridge.Load(); b != nil {
		return c.handleRemote(b, p)
	}
	switch p := p.(type) {
	case *packets.Publish:
		return c.handlePublish(p, false)
	case *packets.Subscribe:
		return c.handleSubscribe(p)
	case *packets.Unsubscribe:
		c.handleUnsubscribe(p)
	case *packets.Pingreq:
		c.send(&packets.Pingresp{})
	case *packets.Disconnect:
		return c.handleDisconnect(p)
	case *packets.Connect:
		return c.protocolError("[MQTT-3.1.0-2]", "second CONNECT on one connection")
	case *packets.Auth:
		return c.reauth(p)
	default:
		return c.protocolError("CVE-2021-28166", fmt.Sprintf("client sent %s, which only a server sends", p.Type()))
	}
	return nil
}

// protocolError ends the connection: 5.0 with DISCONNECT 0x82 first.
func (c *conn) protocolError(ref, msg string) error {
	return c.fail(&packets.Error{Code: packets.ProtocolError, Ref: ref, Msg: msg})
}

// fail tells a 5.0 client the reason code of err and returns err.
func (c *conn) fail(err *packets.Error) error {
	c.sendDisconnectWhy(err.Code, err.Msg)
	return err
}

// verdict is the answer to an acknowledged PUBLISH: its reason code and,
// for a refusal, why, which a 5.0 client is told unless it asked for no
// problem information.
type verdict struct {
	code packets.ReasonCode
	why  string
}

// reasonString is a Reason String property saying why, for a packet of
// size bytes without it: none for 3.1.1, for an empty why, or when the
// string would take the packet past the client's Maximum Packet Size,
// which a Reason String must not [MQTT-3.1.2-25].
func (c *conn) reasonString(why string, size int) packets.Properties {
	var p packets.Properties
	if c.version != packets.V5 || why == "" || (c.maxOut != 0 && int64(size+4+len(why)) > int64(c.maxOut)) {
		return p
	}
	p.ReasonString = why
	p.Set(packets.PropReasonString)
	return p
}

// ackProblem is the Reason String of an acknowledgement refusing
// something, when the client wants problem information.
func (c *conn) ackProblem(v verdict) packets.Properties {
	if c.noProblemInfo || v.code < 0x80 {
		return packets.Properties{}
	}
	return c.reasonString(v.why, 6)
}

// handleDisconnect ends the connection normally: the will is discarded
// [MQTT-3.1.2-10], except for 5.0 reason 0x04 [MQTT-3.14.4-3].
func (c *conn) handleDisconnect(p *packets.Disconnect) error {
	if p.Properties.Has(packets.PropSessionExpiry) {
		if c.expiry == 0 && p.Properties.SessionExpiry != 0 {
			// A session that was to end with the connection cannot be kept
			// by DISCONNECT (§3.14.2.2.2); the close is then abnormal.
			return c.protocolError("§3.14.2.2.2", "DISCONNECT sets a Session Expiry Interval after CONNECT had none")
		}
		c.expiry = min(p.Properties.SessionExpiry, uint32(c.srv.limits().MaxSessionExpiry/time.Second))
		if c.expiry == 0 {
			c.cl.mu.Lock()
			if c.cl.conn == c { // not if a newer connection took the session over
				c.cl.clean = true // the session ends with this connection
			}
			c.cl.mu.Unlock()
		}
	}
	c.graceful = p.ReasonCode != packets.DisconnectWithWill
	return errDisconnect
}
