package mqttd

import (
	"errors"

	"mqttd/packets"
)

// CloseReason says why a connection ended. Each connection ends with
// exactly one: the first given. It is logged as the "reason" field and
// counted in mqttd_disconnects_total{reason}.
type CloseReason uint8

// Reasons a connection ends.
const (
	CloseClientDisconnect CloseReason = iota // the client sent DISCONNECT
	CloseClientClosed                        // the client closed the connection without DISCONNECT
	CloseReadError                           // reading failed (connection reset, ...)
	CloseConnectTimeout                      // no CONNECT within limits.connect_timeout
	CloseKeepAlive                           // nothing received for 1.5 x keepalive
	CloseConnectRefused                      // CONNECT refused with a CONNACK error code
	CloseAuthFailed                          // the Authenticator refused the client
	CloseMalformedPacket                     // a packet broke the encoding rules
	ClosePacketTooLarge                      // a packet exceeded limits.max_packet_size
	CloseProtocolError                       // a packet broke the protocol's rules
	CloseTakenOver                           // a new connection took over the client id
	CloseSlowConsumer                        // the client read nothing for limits.write_timeout
	CloseWriteError                          // writing failed
	CloseShutdown                            // the server shut down
	CloseInternalError                       // a handler panicked: a bug
	CloseFrameTimeout                        // a packet took longer than limits.frame_timeout to arrive
	CloseIncomingLimit                       // a packet would pass limits.max_incoming_bytes_total
	CloseStoreError                          // what an acknowledgement covered could not be stored
	CloseAuthRevoked                         // a reload took the user out of the password file
	CloseBridgeFull                          // a 3.1.1 publisher to a full block_publishers bridge
	CloseClusterCutOff                       // the node lost its cluster's store (cluster_will.go)
	CloseAdministrative                      // an operator ended it (Server.Disconnect)
	numCloseReasons
)

var closeReasonNames = [numCloseReasons]string{
	CloseClientDisconnect: "client_disconnect",
	CloseClientClosed:     "client_closed",
	CloseReadError:        "read_error",
	CloseConnectTimeout:   "connect_timeout",
	CloseKeepAlive:        "keepalive",
	CloseConnectRefused:   "connect_refused",
	CloseAuthFailed:       "auth_failed",
	CloseMalformedPacket:  "malformed_packet",
	ClosePacketTooLarge:   "packet_too_large",
	CloseProtocolError:    "protocol_error",
	CloseTakenOver:        "taken_over",
	CloseSlowConsumer:     "slow_consumer",
	CloseWriteError:       "write_error",
	CloseShutdown:         "shutdown",
	CloseInternalError:    "internal_error",
	CloseFrameTimeout:     "frame_timeout",
	CloseIncomingLimit:    "incoming_limit",
	CloseStoreError:       "store_error",
	CloseAuthRevoked:      "auth_revoked",
	CloseBridgeFull:       "bridge_full",
	CloseClusterCutOff:    "cluster_cut_off",
	CloseAdministrative:   "administrative",
}

// String returns the reason as it appears in logs and metric labels.
func (r CloseReason) String() string {
	if r < numCloseReasons {
		return closeReasonNames[r]
	}
	return "unknown"
}

// quiet reports whether a close is routine: logged at debug level only
// for a connection that never completed CONNECT.
func (r CloseReason) quiet() bool {
	switch r {
	case CloseClientDisconnect, CloseClientClosed, CloseTakenOver, CloseShutdown:
		return true
	}
	return false
}

// closeError is an error that ends a connection for a known reason.
type closeError struct {
	reason CloseReason
	err    error
}

func (e *closeError) Error() string { return e.err.Error() }
func (e *closeError) Unwrap() error { return e.err }

// closing wraps err with the reason it ends the connection for.
func closing(r CloseReason, err error) error { return &closeError{reason: r, err: err} }

var (
	errClosedByPeer   = closing(CloseClientClosed, errors.New("connection closed by client"))
	errDisconnect     = closing(CloseClientDisconnect, errors.New("client sent DISCONNECT"))
	errTakenOver      = closing(CloseTakenOver, errors.New("session taken over by a new connection"))
	errShutdown       = closing(CloseShutdown, errors.New("server shutting down"))
	errAdministrative = closing(CloseAdministrative, errors.New("disconnected by an operator (Server.Disconnect)"))
	errCutOff         = closing(CloseClusterCutOff, errors.New("this node lost its cluster's store: the client is to use another node"))
	errConnectTimeout = closing(CloseConnectTimeout, errors.New("no CONNECT within the connect timeout"))
	errKeepAlive      = closing(CloseKeepAlive, &packets.Error{Code: packets.KeepAliveTimeout,
		Msg: "no packet within 1.5 x keepalive", Ref: "MQTT-3.1.2-24"})
	errSlowConsumer  = closing(CloseSlowConsumer, errors.New("client did not read for the write timeout: slow consumer"))
	errRevoked       = closing(CloseAuthRevoked, errors.New("the reloaded password file no longer has the user"))
	errFrameTimeout  = closing(CloseFrameTimeout, errors.New("a packet did not arrive whole within the frame timeout"))
	errIncomingLimit = closing(CloseIncomingLimit,
		errors.New("the packets arriving on all connections hold limits.max_incoming_bytes_total"))
)

// reasonOf classifies the error a connection ends with. A codec or
// protocol error (*packets.Error) is classified by its reason code; an
// error of unknown origin came from reading the socket.
func reasonOf(err error) CloseReason {
	var ce *closeError
	if errors.As(err, &ce) {
		return ce.reason
	}
	var pe *packets.Error
	if errors.As(err, &pe) {
		switch pe.Code {
		case packets.MalformedPacket:
			return CloseMalformedPacket
		case packets.PacketTooLarge:
			return ClosePacketTooLarge
		}
		return CloseProtocolError
	}
	return CloseReadError
}
