package mqttd

import (
	"errors"
	"fmt"
	"strings"

	"mqttd/auth"
	"mqttd/packets"
)

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
	st := &authState{method: m, x: m.Start(*c.info), cp: cp}
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
