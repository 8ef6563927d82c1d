package mqttd

import (
	"errors"
	"net"
)

// ClientInfo describes a connected client to an Authenticator or Authorizer.
type ClientInfo struct {
	ClientID string
	Username string
	Listener string
	Remote   net.Addr
	// ProtocolVersion is the CONNECT protocol level: 3, 4 or 5.
	ProtocolVersion byte
}

// Errors an Authenticator returns to refuse a client; any other non-nil
// error refuses it as not authorized.
var (
	ErrBadCredentials = errors.New("mqttd: bad user name or password")
	ErrNotAuthorized  = errors.New("mqttd: not authorized")
)

// Authenticator decides whether a client may connect. It is called from
// the connection's own goroutine and may block (e.g. on a lookup).
type Authenticator interface {
	Authenticate(c ClientInfo, password []byte) error
}

// Authorizer decides what a connected client may publish and subscribe to.
type Authorizer interface {
	CanPublish(c ClientInfo, topic string) bool
	CanSubscribe(c ClientInfo, filter string) bool
}

// AllowAll authenticates everyone and authorizes everything: the default.
type AllowAll struct{}

// Authenticate allows every client.
func (AllowAll) Authenticate(ClientInfo, []byte) error { return nil }

// CanPublish allows every topic.
func (AllowAll) CanPublish(ClientInfo, string) bool { return true }

// CanSubscribe allows every filter.
func (AllowAll) CanSubscribe(ClientInfo, string) bool { return true }
