package mqttd

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"mqttd/auth"
	"mqttd/cluster"
	"mqttd/listeners"
	"mqttd/packets"
)

// CONNECT: checked [MQTT-3.1.2], authenticated (with a password, or by an
// enhanced authentication exchange of AUTH packets), attached to its
// session (registry.go) and answered with CONNACK.

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
	if a, ok := p.(*packets.Auth); ok {
		return c.continueAuth(a)
	}
	cp, ok := p.(*packets.Connect)
	if !ok || s.authOf(c) != nil {
		// Only AUTH may follow a CONNECT whose authentication goes on.
		c.refuse(packets.ProtocolError)
		return closing(CloseProtocolError, fmt.Errorf("%s during enhanced authentication", p.Type()))
	}
	c.version = cp.ProtocolVersion
	c.info.ProtocolVersion = byte(cp.ProtocolVersion)
	c.info.Bridge = cp.Bridge
	// Kept for the connection's life: copied, so that they do not pin
	// the CONNECT frame (a large password or will, say).
	c.info.Username = strings.Clone(cp.Username)
	g := s.gateOf(c.info.Listener)
	if g.identity {
		// The certificate the listener verified names the client.
		c.info.Username = listeners.PeerCommonName(c.nc)
		if c.info.Username == "" {
			c.refuse(authCode(c.version, auth.ErrNotAuthorized))
			return closing(CloseAuthFailed, errors.New("use_identity_as_username: the client certificate has no common name"))
		}
	}
	if code, err := c.checkConnect(cp); err != nil {
		if code == 0 {
			return err
		}
		c.refuse(code)
		return closing(CloseConnectRefused, err)
	}
	if ref := s.opts.Protocol.ServerReference; ref != "" {
		c.redirect(ref)
		return closing(CloseConnectRefused, fmt.Errorf("redirected to %s (protocol.server_reference)", ref))
	}
	if cp.Properties.Has(packets.PropAuthMethod) {
		return c.startAuth(cp)
	}
	var stamp uint32
	c.mayBlock(func() { stamp, err = s.authenticate(c, g, cp.Password) })
	if err != nil {
		c.refuse(authCode(c.version, err))
		return closing(CloseAuthFailed, fmt.Errorf("authentication failed: %w", err))
	}
	return c.acceptConnect(cp, stamp)
}

// acceptConnect accepts a CONNECT whose client is authenticated (stamp: by the
// entry of its listener's password file with that stamp; 0: otherwise),
// unless its will or the session limit refuses it.
func (c *conn) acceptConnect(cp *packets.Connect, stamp uint32) error {
	s := c.srv
	if err := c.clientIDPrefix(cp); err != nil {
		code := packets.ConnRefusedIdentifier
		if c.version == packets.V5 {
			code = packets.ClientIDNotValid
		}
		c.refuse(code)
		return closing(CloseConnectRefused, err)
	}
	if cp.WillFlag && (isBrokerTopic(cp.WillTopic) || !s.authz.Authorize(*c.info, auth.Request{Action: auth.Will,
		Topic: cp.WillTopic, QoS: cp.WillQoS, Retain: cp.WillRetain})) {
		c.refuse(authCode(c.version, auth.ErrNotAuthorized))
		return closing(CloseAuthFailed, fmt.Errorf("will to %q not authorized", cp.WillTopic))
	}
	if cp.WillFlag && !c.userPropertiesFit(&cp.WillProperties) {
		c.refuse(packets.QuotaExceeded) // only 5.0 has user properties
		return closing(CloseConnectRefused, errors.New("will with too many user properties"))
	}
	c.keepAlive = cp.KeepAlive
	c.noProblemInfo = cp.Properties.Has(packets.PropRequestProblemInfo) && cp.Properties.RequestProblemInfo == 0
	if cp.Properties.Has(packets.PropMaximumPacketSize) {
		c.maxOut = cp.Properties.MaximumPacketSize
	}
	if n := cp.Properties.TopicAliasMaximum; n > 0 && c.version == packets.V5 {
		c.aliases.Store(&topicAliases{out: newOutAliases(n)})
	}
	c.expiry = s.sessionExpiry(c.version, cp)
	if c.maxOut > 0 && s.connackTooLarge(c, cp) {
		// No CONNACK fits: none is sent [MQTT-3.1.2-24].
		s.stats.connectsRefused.Add(1)
		return closing(CloseConnectRefused, fmt.Errorf("the client's Maximum Packet Size %d is smaller than the CONNACK", c.maxOut))
	}
	c.awaitPredecessor()
	if s.cluster != nil && c.info.Listener != bridgeListener {
		if err := c.claimInCluster(cp); errors.Is(err, cluster.ErrOtherUser) {
			return c.refuseOtherUser()
		} else if err != nil {
			return c.refuseUnclaimed(err)
		}
	}
	fresh, ok := s.claimSession(c, cp.CleanStart)
	if !ok {
		s.unclaim(c)
		return c.refuseOtherUser()
	}
	if cp.WillFlag {
		c.recordWill(cp)
	}
	switch s.attach(c, cp, fresh, stamp) {
	case attachOtherUser:
		s.unclaim(c)
		// Another user's session came meanwhile: the record stored for
		// this client is the other's now (attach stored it after), so
		// nothing is to be taken out.
		return c.refuseOtherUser()
	case attachNoRoom:
		s.unclaim(c)
		code := packets.ConnRefusedServerUnavailable
		if c.version == packets.V5 {
			code = packets.QuotaExceeded
		}
		s.forgetNewSession(c)
		s.stats.sessionsRefused.Add(1) // before the CONNACK the client sees
		c.refuse(code)
		if !s.sessionsWarned.limited() {
			c.fields(s.log.Warn()).Int("max_sessions", s.limits().MaxSessions).
				Msg("new session refused: the broker holds its maximum (logged at most every 10 s; mqttd_sessions_refused_total counts them all)")
		}
		return closing(CloseConnectRefused, errors.New("no room for a new session: limits.max_sessions"))
	}
	if !c.stillClaimed() {
		// Another node claimed the id while this one did: the later
		// claim wins, as a later connection does on one node.
		s.dropWillRecord(c.willRef)
		c.sendDisconnect(packets.SessionTakenOver)
		return errTakenOver
	}
	// Only now: a client refused above leaves no will.
	c.will = willMessage(cp, c.info.ClientID)
	c.willDelay = cp.WillProperties.WillDelay
	c.connected.Store(true)
	c.startKeepAlive()
	s.stats.connects.Add(1)
	c.fields(c.srv.log.Info()).Str("username", c.info.Username).Uint8("version", byte(c.version)).Bool("clean", cp.CleanStart).
		Uint32("session_expiry", c.expiry).Uint16("keepalive", cp.KeepAlive).Msg("client connected")
	// A reload between the password check and attach looked for this
	// client before it was attached: its entry is looked at again now.
	if stamp != 0 && c.staleEntry(stamp) {
		s.stats.clientsRevoked.Add(1)
		c.sendDisconnect(packets.NotAuthorized)
		return errRevoked
	}
	return nil
}

// clientIDPrefix applies auth.client_id_prefix once the username is
// known (after any enhanced authentication): an id the broker assigns
// gets the prefix, one the client chose must have it.
func (c *conn) clientIDPrefix(cp *packets.Connect) error {
	p := c.srv.opts.Auth.ClientIDPrefix
	if p == "" {
		return nil
	}
	want := strings.ReplaceAll(p, "%u", c.info.Username)
	switch {
	case cp.ClientID == "":
		c.info.ClientID = want + c.info.ClientID
	case !strings.HasPrefix(c.info.ClientID, want):
		return fmt.Errorf("client id %q does not start with %q (auth.client_id_prefix %q)", c.info.ClientID, want, p)
	}
	return nil
}

// refuseOtherUser refuses a client whose client id names another user's
// session (auth.other_user_session: refuse).
func (c *conn) refuseOtherUser() error {
	err := fmt.Errorf("client id %q belongs to another user's session (auth.other_user_session: refuse): %w",
		c.info.ClientID, auth.ErrNotAuthorized)
	c.srv.loginFailed(*c.info, err)
	c.refuse(authCode(c.version, auth.ErrNotAuthorized))
	return closing(CloseAuthFailed, err)
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

// redirect refuses the client, telling a 5.0 one where to go (§4.11).
func (c *conn) redirect(ref string) {
	if c.version != packets.V5 {
		c.refuse(packets.ConnRefusedServerUnavailable)
		return
	}
	code := packets.UseAnotherServer
	if c.srv.opts.Protocol.ServerMoved {
		code = packets.ServerMoved
	}
	c.srv.stats.connectsRefused.Add(1)
	ack := &packets.Connack{ReasonCode: code}
	ack.Properties.ServerReference = ref
	ack.Properties.Set(packets.PropServerReference)
	c.sendNow(ack)
}

// refuse sends a refusing CONNACK; the caller then closes the connection.
func (c *conn) refuse(code packets.ReasonCode) {
	c.srv.stats.connectsRefused.Add(1)
	c.sendNow(&packets.Connack{ReasonCode: code})
}

// checkConnect applies the broker's rules to a well-formed CONNECT and
// returns the refusing code in the client's version, or 0 with the error
// when the client's version has none and the connection is closed
// without an answer.
func (c *conn) checkConnect(cp *packets.Connect) (packets.ReasonCode, error) {
	lim := c.srv.limits()
	v5 := c.version == packets.V5
	if cp.ClientID == "" {
		if c.version == packets.V31 {
			// 3.1 requires 1 to 23 characters; it knows nothing of assigned ids.
			return packets.ConnRefusedIdentifier, errors.New("empty client id in MQTT 3.1")
		}
		if !cp.CleanStart && !v5 {
			// [MQTT-3.1.3-8]
			return packets.ConnRefusedIdentifier, errors.New("empty client id with clean session 0")
		}
		c.info.ClientID = assignClientID()
	} else {
		c.info.ClientID = strings.Clone(cp.ClientID)
	}
	if strings.HasPrefix(c.info.ClientID, bridgeIDPrefix) {
		code := packets.ConnRefusedIdentifier
		if v5 {
			code = packets.ClientIDNotValid
		}
		return code, fmt.Errorf("client id %q: ids starting with %s are the bridges' sessions", cp.ClientID, bridgeIDPrefix)
	}
	if len(cp.ClientID) > lim.MaxClientIDLength {
		code := packets.ConnRefusedIdentifier
		if v5 {
			code = packets.ClientIDNotValid
		}
		return code, fmt.Errorf("client id of %d bytes exceeds the limit of %d", len(cp.ClientID), lim.MaxClientIDLength)
	}
	if len(cp.Username) > lim.MaxUsernameLength {
		code := packets.ConnRefusedBadCredentials
		if v5 {
			code = packets.BadUsernameOrPassword
		}
		return code, fmt.Errorf("username of %d bytes exceeds limits.max_username_length, %d", len(cp.Username), lim.MaxUsernameLength)
	}
	if v5 && cp.Properties.Has(packets.PropAuthMethod) && c.srv.methods[cp.Properties.AuthMethod] == nil {
		// [MQTT-4.12.0-1]
		return packets.BadAuthenticationMethod, fmt.Errorf("authentication method %q is not offered", cp.Properties.AuthMethod)
	}
	if most := c.srv.maxKeepAlive(); !v5 && lim.RefuseKeepAliveV311 && (int(cp.KeepAlive) > most || cp.KeepAlive == 0) {
		// 3.1.1 cannot tell the client another keepalive: refused, when the
		// operator asked for it.
		return packets.ConnRefusedIdentifier, fmt.Errorf("keepalive %d s is 0 or above the maximum, %d s", cp.KeepAlive, most)
	}
	if cp.WillFlag {
		if err := c.srv.topics.ValidTopicName(cp.WillTopic); err != nil {
			// As a PUBLISH to that topic would be; 3.1.1 has no code for it.
			err = fmt.Errorf("will topic %q: %w", cp.WillTopic, err)
			if !v5 {
				return 0, closing(CloseProtocolError, err)
			}
			return packets.TopicNameInvalid, err
		}
	}
	return 0, nil
}

// sessionExpiry is the expiry interval, in seconds, of the session a
// CONNECT asks for: a 5.0 client's Session Expiry Interval capped by
// limits.max_session_expiry; for 3.1/3.1.1, limits.persistent_session_expiry
// for clean session 0; 0 for a clean session.
func (s *Server) sessionExpiry(v packets.Version, cp *packets.Connect) uint32 {
	lim := s.limits()
	if v == packets.V5 {
		return min(cp.Properties.SessionExpiry, uint32(lim.MaxSessionExpiry/time.Second))
	}
	if cp.CleanStart {
		return 0
	}
	return uint32(lim.PersistentSessionExpiry / time.Second)
}

// authCode maps an Authenticator's error to the CONNACK code.
func authCode(v packets.Version, err error) packets.ReasonCode {
	bad := errors.Is(err, auth.ErrBadCredentials)
	switch {
	case errors.Is(err, errLoginRateLimited) && v == packets.V5:
		return packets.ConnectionRateExceeded
	case errors.Is(err, errLoginRateLimited):
		return packets.ConnRefusedServerUnavailable
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

// connackTooLarge reports whether c's CONNACK would be larger than its
// client's Maximum Packet Size. Apart, and not inlined, so that the
// CONNACK it builds takes room on the reader's stack only for the call:
// in acceptConnect's frame it made every idle TLS and WebSocket reader's
// stack 8 KiB (TestReaderStacksStay4KiB).
//
//go:noinline
func (s *Server) connackTooLarge(c *conn, cp *packets.Connect) bool {
	var ack packets.Connack
	s.connackProperties(c, cp, &ack.Properties)
	return ack.Size(c.version) > int(c.maxOut)
}

// sendConnack queues the CONNACK accepting cp, encoded into the outbox
// from the stack: a Connack on the heap (288 bytes, most of them its
// properties) was garbage at every connect, left as holes among the
// connections' live objects. Not inlined, for the reason connackTooLarge
// is not.
//
//go:noinline
func (c *conn) sendConnack(present bool, cp *packets.Connect) {
	ack := packets.Connack{SessionPresent: present}
	c.srv.connackProperties(c, cp, &ack.Properties)
	c.enqueue(deferred, func(b []byte) []byte {
		b, err := ack.Append(b, c.version)
		if err != nil {
			c.fields(c.srv.log.Error()).Err(err).Msg("cannot encode CONNACK")
		}
		return b
	})
}

// connackProperties sets in p, empty, what the CONNACK tells a 5.0
// client the broker assigned or limits. Filled in place: returned, the
// properties took a copy's room on the reader's stack, past 4 KiB.
func (s *Server) connackProperties(c *conn, cp *packets.Connect, p *packets.Properties) {
	if c.version != packets.V5 {
		return
	}
	if cp.ClientID == "" {
		p.AssignedClientID = c.info.ClientID
		p.Set(packets.PropAssignedClientID)
	}
	p.MaximumPacketSize = uint32(s.opts.Limits.MaxPacketSize)
	p.Set(packets.PropMaximumPacketSize)
	p.TopicAliasMaximum = uint16(s.opts.Limits.MaxTopicAlias)
	p.Set(packets.PropTopicAliasMaximum)
	// QoS 1 is acknowledged at once, so only QoS 2 messages awaiting PUBREL
	// count against the Receive Maximum: the client must know the limit
	// past which it gets DISCONNECT 0x93 (§3.2.2.3.3, §3.3.4).
	if n := s.opts.Limits.MaxAwaitingRel; n < 65535 {
		p.ReceiveMaximum = uint16(n)
		p.Set(packets.PropReceiveMaximum)
	}
	if st := s.authOf(c); st != nil {
		p.AuthMethod, p.AuthData = st.method.Name(), st.out
		p.Set(packets.PropAuthMethod)
		if st.out != nil {
			p.Set(packets.PropAuthData)
		}
	}
	if info := s.opts.Protocol.ResponseInformation; cp.Properties.RequestResponseInfo == 1 && info != "-" {
		p.ResponseInfo = info + c.info.ClientID + "/"
		p.Set(packets.PropResponseInfo)
	}
	if cp.Properties.SessionExpiry > c.expiry {
		// Capped by limits.max_session_expiry: the client is told (§3.2.2.3.2).
		p.SessionExpiry = c.expiry
		p.Set(packets.PropSessionExpiry)
	}
	if most := s.maxKeepAlive(); cp.KeepAlive == 0 || int(cp.KeepAlive) > most {
		p.ServerKeepAlive = uint16(most)
		p.Set(packets.PropServerKeepAlive)
		c.keepAlive = uint16(most)
	}
}

// Enhanced authentication (MQTT 5.0 §4.12): a CONNECT naming one of
// Options.AuthMethods starts an exchange of AUTH packets, which the
// connection's reader drives; the CONNECT is admitted when the method is
// done. A client authenticated so may re-authenticate later with AUTH
// 0x19 and the same method. All of it runs on the connection's reader;
// the state lives in a map on the server rather than in every
// connection, which would pay for it idle.

// authState is a connection's enhanced authentication.
type authState struct {
	method auth.Method
	x      auth.Exchange    // the exchange in progress; nil between them
	cp     *packets.Connect // the CONNECT waiting for its exchange to end
	out    []byte           // the method's last data, for the CONNACK
}

func (s *Server) authOf(c *conn) *authState {
	s.authsMu.Lock()
	defer s.authsMu.Unlock()
	return s.auths[c]
}

// forgetAuth drops the connection's state when it ends.
func (s *Server) forgetAuth(c *conn) {
	s.authsMu.Lock()
	delete(s.auths, c)
	s.authsMu.Unlock()
}

// startAuth begins the exchange of a CONNECT naming an offered method
// (checkConnect refused the others with 0x8C).
func (c *conn) startAuth(cp *packets.Connect) error {
	// An exchange is a login like a password's: it draws on the
	// source's bucket, and only success gives the token back.
	var admitted bool
	c.mayBlock(func() { admitted = c.srv.admitLogin(c) })
	if !admitted {
		c.refuse(authCode(c.version, errLoginRateLimited))
		return closing(CloseAuthFailed, errLoginRateLimited)
	}
	m := c.srv.methods[cp.Properties.AuthMethod]
	kept := *cp // cp goes back to its pool once this frame is handled
	st := &authState{method: m, x: m.Start(*c.info), cp: &kept}
	c.srv.authsMu.Lock()
	c.srv.auths[c] = st
	c.srv.authsMu.Unlock()
	return c.connectStep(st, cp.Properties.AuthData)
}

// continueAuth takes a client's AUTH before its CONNECT is admitted: the
// next step of the exchange its CONNECT started.
func (c *conn) continueAuth(a *packets.Auth) error {
	st := c.srv.authOf(c)
	switch {
	case st == nil:
		return c.protocolError("[MQTT-3.1.0-1]", "AUTH before CONNECT")
	case a.ReasonCode != packets.ContinueAuthentication || a.Properties.AuthMethod != st.method.Name():
		c.refuse(packets.ProtocolError)
		return closing(CloseProtocolError, fmt.Errorf("AUTH %#x with method %q while authenticating with %s [MQTT-4.12.0-5]",
			byte(a.ReasonCode), a.Properties.AuthMethod, st.method.Name()))
	}
	return c.connectStep(st, a.Properties.AuthData)
}

// connectStep gives the method the client's data: the client is refused,
// asked to go on, or, authenticated, admitted.
func (c *conn) connectStep(st *authState, data []byte) error {
	var out []byte
	var done bool
	var err error
	c.mayBlock(func() { out, done, err = st.x.Next(data) })
	if err != nil {
		c.srv.loginFailed(*c.info, fmt.Errorf("%s: %w", st.method.Name(), err))
		c.refuse(authCode(c.version, err))
		return closing(CloseAuthFailed, fmt.Errorf("%s authentication failed: %w", st.method.Name(), err))
	}
	if !done {
		c.sendAuth(packets.ContinueAuthentication, st.method.Name(), out)
		return nil
	}
	cp := st.cp
	user := st.x.Username()
	if c.srv.gateOf(c.info.Listener).identity {
		// The certificate names the client there; a method must not
		// name it otherwise.
		c.refuse(authCode(c.version, auth.ErrNotAuthorized))
		return closing(CloseAuthFailed, errors.New("enhanced authentication on a use_identity_as_username listener"))
	}
	if max := c.srv.limits().MaxUsernameLength; len(user) > max {
		c.refuse(authCode(c.version, auth.ErrBadCredentials))
		return closing(CloseAuthFailed, fmt.Errorf("%s named a username of %d bytes, over limits.max_username_length %d",
			st.method.Name(), len(user), max))
	}
	c.info.Username = strings.Clone(user)
	st.x, st.cp, st.out = nil, nil, out
	c.srv.loginSucceeded(c)
	return c.acceptConnect(cp, 0)
}

// reauth handles an AUTH once the client is connected: a new exchange
// (0x19) or its next step (0x18), with the method the CONNECT named. A
// failure, or the client proving it is someone else, ends the connection
// with 0x87; success is AUTH 0x00 [MQTT-4.12.1].
func (c *conn) reauth(a *packets.Auth) error {
	st := c.srv.authOf(c)
	switch {
	case st == nil:
		return c.protocolError("[MQTT-4.12.0-7]", "AUTH without an authentication method in CONNECT")
	case a.Properties.AuthMethod != st.method.Name():
		return c.protocolError("[MQTT-4.12.1-1]", "re-authentication with another method than the CONNECT's")
	case a.ReasonCode == packets.ReAuthenticate && st.x == nil:
		var admitted bool
		c.mayBlock(func() { admitted = c.srv.admitLogin(c) })
		if !admitted {
			return c.fail(&packets.Error{Code: packets.ConnectionRateExceeded, Ref: "§4.12.1",
				Msg: "re-authentication refused: too many refused logins from this address"})
		}
		st.x = st.method.Start(*c.info)
	case a.ReasonCode != packets.ContinueAuthentication || st.x == nil:
		return c.protocolError("§4.12.1", fmt.Sprintf("AUTH %#x out of turn", byte(a.ReasonCode)))
	}
	var out []byte
	var done bool
	var err error
	c.mayBlock(func() { out, done, err = st.x.Next(a.Properties.AuthData) })
	switch {
	case err != nil:
		c.srv.loginFailed(*c.info, fmt.Errorf("%s re-authentication: %w", st.method.Name(), err))
		return c.fail(&packets.Error{Code: packets.NotAuthorized, Ref: "§4.12.1", Msg: "re-authentication failed"})
	case !done:
		c.sendAuth(packets.ContinueAuthentication, st.method.Name(), out)
		return nil
	case st.x.Username() != c.info.Username:
		c.srv.loginFailed(*c.info, fmt.Errorf("%s re-authentication as %q: %w", st.method.Name(), st.x.Username(), auth.ErrNotAuthorized))
		return c.fail(&packets.Error{Code: packets.NotAuthorized, Ref: "§4.12.1", Msg: "re-authenticated as another user"})
	}
	c.srv.loginSucceeded(c)
	st.x = nil
	c.sendAuth(packets.Success, st.method.Name(), out)
	return nil
}

// sendAuth queues an AUTH with the method's data.
func (c *conn) sendAuth(code packets.ReasonCode, method string, data []byte) {
	a := &packets.Auth{ReasonCode: code}
	a.Properties.AuthMethod = method
	a.Properties.Set(packets.PropAuthMethod)
	if data != nil {
		a.Properties.AuthData = data
		a.Properties.Set(packets.PropAuthData)
	}
	c.send(a)
}
