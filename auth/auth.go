// Package auth defines what mqttd asks before it lets a client in or acts
// for it: an Authenticator for each CONNECT and an Authorizer for each
// publish, subscription and will. The broker depends on these interfaces
// only; the password and ACL files (Mosquitto's formats) implement them
// here, and programs embedding mqttd can plug in their own.
//
// It imports nothing of mqttd's, so implementations need not import the
// broker.
package auth

import (
	"errors"
	"net"
)

// ClientInfo describes a client to an Authenticator or Authorizer.
type ClientInfo struct {
	ClientID string
	Username string
	// Listener is the name of the listener the client connected to.
	Listener string
	Remote   net.Addr
	// ProtocolVersion is the CONNECT protocol level: 3, 4 or 5.
	ProtocolVersion byte
	// Bridge is set for a 3.1 or 3.1.1 client that said it is a bridge
	// (protocol level | 0x80, Mosquitto's try_private): the broker sends
	// it nothing it published itself.
	Bridge bool
}

// Errors an Authenticator returns to refuse a client; any other non-nil
// error refuses it as not authorized.
var (
	ErrBadCredentials = errors.New("auth: bad user name or password")
	ErrNotAuthorized  = errors.New("auth: not authorized")
)

// Authenticator decides whether a client may connect. It is called from
// the connection's reader and may block (on a lookup, say); the client
// waits meanwhile, and its reader does not count against the broker's
// bound on readers, so other clients are read as usual.
type Authenticator interface {
	Authenticate(c ClientInfo, password []byte) error
}

// Action is what a client asks to do.
type Action uint8

// Actions an Authorizer is asked about.
const (
	// Publish: a PUBLISH from the client.
	Publish Action = iota + 1
	// Subscribe: one topic filter of a SUBSCRIBE.
	Subscribe
	// Will: the will message of a CONNECT, asked before the client is
	// accepted; refused, the connection is refused.
	Will
	// Read: delivery of a message on Topic to the client, asked for each
	// retained or queued message the broker is about to send it, so that
	// a subscription granted on its filter still delivers only the topics
	// the client may read (and rules changed by a reload apply to messages
	// already queued).
	Read
)

// String names the action.
func (a Action) String() string {
	switch a {
	case Publish:
		return "publish"
	case Subscribe:
		return "subscribe"
	case Will:
		return "will"
	case Read:
		return "read"
	}
	return "unknown"
}

// Request is one question to an Authorizer.
type Request struct {
	Action Action
	// Topic is the topic name of a publish, will or delivered message
	// (Read), or, for a subscribe, the topic filter without any
	// $share/{group}/ prefix: a shared subscription is asked about the
	// topics it would receive. It may point into the packet being read,
	// so it is valid only until Authorize returns: an Authorizer that
	// keeps it (a cache keyed by topic) keeps a copy (strings.Clone).
	Topic string
	// Group is the share group of a shared subscription
	// ($share/{group}/{filter}); empty otherwise.
	Group string
	// QoS is the QoS of the message, or the QoS the subscription asks for.
	QoS byte
	// Retain says a publish or will is to be retained.
	Retain bool
}

// Authorizer decides what a connected client may do. It is called on the
// client's reader for every request, so it should answer from memory.
type Authorizer interface {
	Authorize(c ClientInfo, r Request) bool
}

// AllowAll authenticates everyone and authorizes everything: the broker's
// default without configuration, which only listens on the loopback
// address.
type AllowAll struct{}

// Authenticate allows every client.
func (AllowAll) Authenticate(ClientInfo, []byte) error { return nil }

// Authorize allows every request.
func (AllowAll) Authorize(ClientInfo, Request) bool { return true }
