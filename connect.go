package mqttd

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"mqttd/packets"
	"mqttd/session"
)

// client is the broker's record of one client id: its session, which
// outlives connections when it is persistent, and its current connection.
type client struct {
	id string

	// mu is the session lock: sess, conn, clean and dropped.
	mu    sync.Mutex
	sess  *session.Session
	conn  *conn // nil while offline
	clean bool  // the session ends with the connection
	// dropped is set when the session ended (clean close, or replaced by a
	// clean start): a reader still handling a SUBSCRIBE for it must not
	// put it back into the trie.
	dropped bool
}

// connectPacket handles the first packet, which must be CONNECT
// [MQTT-3.1.0-1], as read (or failed to read) within the connect timeout.
func (c *conn) connectPacket(p packets.Packet, err error) error {
	s := c.srv
	if err != nil {
		if cp, ok := p.(*packets.Connect); ok {
			c.refuseConnect(cp, err)
		}
		return c.readError(err)
	}
	cp := p.(*packets.Connect)
	c.version = cp.ProtocolVersion
	c.info.ProtocolVersion = byte(cp.ProtocolVersion)
	c.info.Username = cp.Username
	if code, err := c.checkConnect(cp); err != nil {
		c.refuse(code)
		return err
	}
	if err := s.opts.Authenticator.Authenticate(c.info, cp.Password); err != nil {
		c.refuse(authCode(c.version, err))
		return fmt.Errorf("authentication failed: %w", err)
	}
	c.keepAlive = time.Duration(cp.KeepAlive) * time.Second
	c.will = willMessage(cp, c.info.ClientID)
	c.noExpiry = cp.Properties.SessionExpiry == 0
	s.attach(c, cp)
	c.connected.Store(true)
	c.startKeepAlive()
	s.metrics.connects.Inc()
	c.fields(c.srv.log.Debug()).Uint8("version", byte(c.version)).Bool("clean", cp.CleanStart).Uint16("keepalive", cp.KeepAlive).Msg("client connected")
	return nil
}

// refuseConnect answers a CONNECT the codec rejected in the form the
// client's level can read: an unsupported level gets 0x01 for 3.x and
// 0x84 for 5.0 [MQTT-3.1.2-2]; any other error in a 5.0 CONNECT gets its
// own reason code, which the server MAY send before closing (§4.13.1). A
// wrong protocol name gets no answer [MQTT-3.1.2-1], nor does 3.x, which
// has no return code for a malformed CONNECT.
func (c *conn) refuseConnect(cp *packets.Connect, err error) {
	var pe *packets.Error
	if !errors.As(err, &pe) {
		return
	}
	switch {
	case pe.Code == packets.UnsupportedProtocolVersion:
		c.version = packets.V311
		code := packets.ConnRefusedProtocolVersion
		if cp.ProtocolVersion >= packets.V5 {
			c.version, code = packets.V5, packets.UnsupportedProtocolVersion
		}
		c.sendNow(&packets.Connack{ReasonCode: code})
	case cp.ProtocolVersion == packets.V5 && cp.ProtocolName == "MQTT":
		c.version = packets.V5
		c.sendNow(&packets.Connack{ReasonCode: pe.Code})
	}
}

// refuse sends a refusing CONNACK; the caller then closes the connection.
func (c *conn) refuse(code packets.ReasonCode) {
	c.srv.metrics.connectsRefused.Inc()
	c.sendNow(&packets.Connack{ReasonCode: code})
}

// checkConnect applies the broker's rules to a well-formed CONNECT and
// returns the refusing code in the client's version.
func (c *conn) checkConnect(cp *packets.Connect) (packets.ReasonCode, error) {
	lim := c.srv.opts.Limits
	v5 := c.version == packets.V5
	if cp.ClientID == "" {
		if !cp.CleanStart && !v5 {
			// [MQTT-3.1.3-8]
			return packets.ConnRefusedIdentifier, errors.New("empty client id with clean session 0")
		}
		c.info.ClientID = assignClientID()
	} else {
		c.info.ClientID = cp.ClientID
	}
	if len(cp.ClientID) > lim.MaxClientIDLength {
		code := packets.ConnRefusedIdentifier
		if v5 {
			code = packets.ClientIDNotValid
		}
		return code, fmt.Errorf("client id of %d bytes exceeds the limit of %d", len(cp.ClientID), lim.MaxClientIDLength)
	}
	if v5 && cp.Properties.Has(packets.PropAuthMethod) {
		// Enhanced authentication is not supported [MQTT-4.12.0-1].
		return packets.BadAuthenticationMethod, fmt.Errorf("authentication method %q is not supported", cp.Properties.AuthMethod)
	}
	if !v5 && (int(cp.KeepAlive) > lim.MaxKeepAlive || (cp.KeepAlive == 0 && lim.MaxKeepAlive < DefaultMaxKeepAlive)) {
		// 3.1.1 cannot tell the client another keepalive, so it is refused, as Mosquitto does.
		return packets.ConnRefusedIdentifier, fmt.Errorf("keepalive %d s is above the maximum of %d s", cp.KeepAlive, lim.MaxKeepAlive)
	}
	return 0, nil
}

// authCode maps an Authenticator's error to the CONNACK code.
func authCode(v packets.Version, err error) packets.ReasonCode {
	bad := errors.Is(err, ErrBadCredentials)
	switch {
	case v == packets.V5 && bad:
		return packets.BadUsernameOrPassword
	case v == packets.V5:
		return packets.NotAuthorized
	case bad:
		return packets.ConnRefusedBadCredentials
	}
	return packets.ConnRefusedNotAuthorized
}

// assignClientID makes an id for a client that sent none [MQTT-3.1.3-6].
func assignClientID() string {
	var b [12]byte
	rand.Read(b[:])
	return "mqttd-" + hex.EncodeToString(b[:])
}

// willMessage is the will of a CONNECT, published as client id.
func willMessage(cp *packets.Connect, id string) *session.Message {
	if !cp.WillFlag {
		return nil
	}
	return newMessage(cp.WillTopic, cp.WillPayload, cp.WillQoS, cp.WillRetain, &cp.WillProperties, id)
}

// attach binds the connection to its session in one step under the
// registry lock: an older connection with the same client id is marked
// taken over and closed [MQTT-3.1.4-2], and its later cleanup sees it no
// longer owns the session. The CONNACK is queued before the connection
// becomes visible to publishers, so it is the first packet on the wire.
func (s *Server) attach(c *conn, cp *packets.Connect) {
	id := c.info.ClientID
	clean := cp.CleanStart
	persistent := !clean
	if c.version == packets.V5 {
		persistent = cp.Properties.SessionExpiry > 0
	}
	s.mu.Lock()
	old := s.clients[id]
	var oldConn *conn
	if old != nil {
		old.mu.Lock()
		oldConn = old.conn
		old.conn = nil
		old.mu.Unlock()
	}
	cl, present := old, old != nil
	if clean || old == nil || old.clean {
		if old != nil {
			s.dropSubscriptions(old)
		}
		cl = &client{id: id, sess: session.New(id, s.sessCfg)}
		s.clients[id] = cl
		present = false
	}
	cl.mu.Lock()
	c.cl = cl
	c.send(&packets.Connack{SessionPresent: present, Properties: s.connackProperties(c, cp)})
	cl.conn, cl.clean = c, !persistent
	cl.sess.SetReceiveMaximum(int(cp.Properties.ReceiveMaximum))
	cl.sess.Resume(func(o session.Outbound) { c.writeOutboundLocked(o, false) })
	cl.mu.Unlock()
	s.mu.Unlock()
	if oldConn != nil {
		// On its own goroutine: telling a 5.0 client may wait for its
		// outbox to drain, and the new client's CONNACK must not wait.
		go func() {
			oldConn.sendDisconnectAsync(packets.SessionTakenOver)
			oldConn.closeWith(errTakenOver)
		}()
	}
	c.pump()
}

// connackProperties tells a 5.0 client what the broker assigned or limits.
func (s *Server) connackProperties(c *conn, cp *packets.Connect) packets.Properties {
	var p packets.Properties
	if c.version != packets.V5 {
		return p
	}
	if cp.ClientID == "" {
		p.AssignedClientID = c.info.ClientID
		p.Set(packets.PropAssignedClientID)
	}
	p.MaximumPacketSize = uint32(s.opts.Limits.MaxPacketSize)
	p.Set(packets.PropMaximumPacketSize)
	// QoS 1 is acknowledged at once, so only QoS 2 messages awaiting PUBREL
	// count against the Receive Maximum: the client must know the limit
	// past which it gets DISCONNECT 0x93 (§3.2.2.3.3, §3.3.4).
	if n := s.opts.Limits.MaxAwaitingRel; n < 65535 {
		p.ReceiveMaximum = uint16(n)
		p.Set(packets.PropReceiveMaximum)
	}
	if int(cp.KeepAlive) > s.opts.Limits.MaxKeepAlive || (cp.KeepAlive == 0 && s.opts.Limits.MaxKeepAlive < DefaultMaxKeepAlive) {
		p.ServerKeepAlive = uint16(s.opts.Limits.MaxKeepAlive)
		p.Set(packets.PropServerKeepAlive)
		c.keepAlive = time.Duration(s.opts.Limits.MaxKeepAlive) * time.Second
	}
	return p
}

// detach releases the session when its connection ends, unless another
// connection took it over; a clean session ends here.
func (s *Server) detach(c *conn) {
	cl := c.cl
	s.mu.Lock()
	defer s.mu.Unlock()
	cl.mu.Lock()
	owner := cl.conn == c
	if owner {
		cl.conn = nil
	}
	clean := cl.clean
	cl.mu.Unlock()
	if owner && clean && s.clients[cl.id] == cl {
		delete(s.clients, cl.id)
		s.dropSubscriptions(cl)
	}
}

// dropSubscriptions removes a session's subscriptions from the trie. The
// caller holds the registry lock.
func (s *Server) dropSubscriptions(cl *client) {
	cl.mu.Lock()
	cl.dropped = true
	var filters []string
	cl.sess.Subscriptions(func(sub session.Subscription) { filters = append(filters, sub.Filter) })
	cl.mu.Unlock()
	for _, f := range filters {
		s.subs.Unsubscribe(f, cl)
	}
}
