package auth

// Method is an enhanced authentication method (MQTT 5.0 §4.12): a
// challenge and response carried in AUTH packets, which the client asks
// for by naming it in the CONNECT's Authentication Method. It stands in
// for the Authenticator for the clients that use it.
type Method interface {
	// Name is the Authentication Method clients name, e.g. SCRAM-SHA-256.
	Name() string
	// Start begins an exchange for a client, at CONNECT or when it asks to
	// re-authenticate. The exchange's first Next gets the Authentication
	// Data the client sent then.
	Start(c ClientInfo) Exchange
}

// Exchange is one client's authentication in progress. The broker calls
// Next with each piece of Authentication Data the client sends, on the
// client's reader, one at a time, until done or an error.
type Exchange interface {
	// Next takes the client's data and returns the server's: with done
	// false, sent in an AUTH asking the client to go on; with done true,
	// the client is authenticated and out goes in the CONNACK (or the
	// AUTH ending a re-authentication). An error refuses the client:
	// ErrBadCredentials, ErrNotAuthorized or any other (not authorized).
	Next(data []byte) (out []byte, done bool, err error)
	// Username is the user the client proved it is, once done.
	Username() string
}
