package mqttd

import (
	"errors"
	"fmt"
	"net"
	"time"

	"mqttd/listeners"
)

// AuthConfig says who may connect and what they may do, with Mosquitto's
// files: people moving from Mosquitto bring theirs unchanged.
type AuthConfig struct {
	// PasswordFile is a password file as mosquitto_passwd (or mqttd
	// passwd) writes it: clients with a username must give its password.
	// Empty: usernames are not checked (then only AllowAnonymous lets
	// anyone in).
	PasswordFile string `yaml:"password_file"`
	// ACLFile is an ACL file in Mosquitto's acl_file syntax, asked for
	// every publish, subscription, will and delivered message. Empty:
	// every client may use every topic except $SYS/, which only the
	// broker writes.
	ACLFile string `yaml:"acl_file"`
	// AllowAnonymous lets clients without a username in. Unset, they are
	// let in only on a listener no other machine can reach (a loopback
	// address or a unix socket) that has no password file, as Mosquitto 2
	// does: a broker opened to the network or given passwords refuses
	// them until this says true.
	AllowAnonymous *bool `yaml:"allow_anonymous"`
	// AllowClosed accepts a listener that lets nobody in: no password
	// file, anonymous clients refused (allow_anonymous: false, or unset
	// on a listener other machines reach), no certificate identity and no
	// Authenticator or enhanced method to decide instead. Without it such
	// a listener is an error at start, since it is nearly always a
	// forgotten password file.
	AllowClosed bool `yaml:"allow_closed"`
}

// Auth is the broker's authentication and authorization settings: the
// files for every listener (a listener's own auth block overrides them
// key by key), and what a client reusing another user's client id gets.
type Auth struct {
	AuthConfig `yaml:",inline"`
	// OtherUserSession decides for a CONNECT whose client id names a
	// session another username created (or an anonymous client's, or one
	// an anonymous client reaches for): "refuse" (the default) refuses it
	// with not authorized (5.0 0x87, 3.1.1 5), so nobody can take over or
	// kick another user's device by its client id; "replace" ends the old
	// session (its connection is closed, its subscriptions and messages
	// dropped) and starts a fresh one. The new client never inherits the
	// old session.
	OtherUserSession string `yaml:"other_user_session"`
	// ClientIDPrefix, when set, is the prefix every client id must start
	// with, %u standing for the client's username (empty for anonymous
	// clients): "%u:" lets alice use only "alice:..." ids, so no user can
	// create a session under another's device id (which other_user_session
	// would then keep from its owner). An id the client leaves to the
	// broker gets it. Without %u it is Mosquitto's clientid_prefixes.
	// Pick a separator no username contains (no password-file username
	// has ':'): with "%u-", user "al" could take "al-ice-..." ids.
	ClientIDPrefix string `yaml:"client_id_prefix"`
	// LoginBurst is how many refused logins a source (an IPv4 address,
	// an IPv6 /64) may have in a row before it must wait LoginInterval
	// for each next attempt (default 10); LoginInterval is that wait
	// (default 10s). A successful login gives its own attempt back and
	// nothing else. Loopback is not limited.
	LoginBurst    int           `yaml:"login_burst"`
	LoginInterval time.Duration `yaml:"login_interval"`
	// LoginAddresses bounds how many sources' attempts are remembered
	// (default 10,000); past it those whose bucket refilled go first,
	// then an arbitrary tenth (mqttd_login_sources_evicted_total).
	LoginAddresses int `yaml:"login_addresses"`
}

// The values of Auth.OtherUserSession.
const (
	OtherUserRefuse  = "refuse"
	OtherUserReplace = "replace"
)

// merge is c with the keys o sets replacing c's.
func (c AuthConfig) merge(o *AuthConfig) AuthConfig {
	if o == nil {
		return c
	}
	if o.PasswordFile != "" {
		c.PasswordFile = o.PasswordFile
	}
	if o.ACLFile != "" {
		c.ACLFile = o.ACLFile
	}
	if o.AllowAnonymous != nil {
		c.AllowAnonymous = o.AllowAnonymous
	}
	c.AllowClosed = c.AllowClosed || o.AllowClosed
	return c
}

// errClosed explains a listener that lets nobody in.
var errClosed = errors.New("lets nobody in: there is no password file to check usernames with, and clients " +
	"without one are refused; set auth.password_file (mqttd passwd -c FILE USER makes one), or " +
	"auth.allow_anonymous: true, or auth.allow_closed: true if it is meant to refuse everyone")

// closed reports whether a listener with auth c, which only this machine
// reaches when local, lets nobody in without saying so (AllowClosed):
// the broker's rule in openGateLocked.
func (o Options) closed(c AuthConfig, local, identity bool) bool {
	if c.AllowClosed || c.PasswordFile != "" || identity || o.Authenticator != nil || len(o.AuthMethods) > 0 {
		return false
	}
	if c.AllowAnonymous != nil {
		return !*c.AllowAnonymous
	}
	return !local
}

// ClosedListeners returns the indexes of the Listeners that would let
// nobody in and do not say so with auth.allow_closed, as far as their
// configuration tells: a listener on a host name is judged when it listens,
// by the address it gets.
func (o Options) ClosedListeners() []int {
	var closed []int
	for i, lc := range o.Listeners {
		if local, known := lc.localByConfig(); known && o.closed(o.Auth.merge(lc.Auth), local, lc.UseIdentityAsUsername) {
			closed = append(closed, i)
		}
	}
	return closed
}

// localByConfig reports whether only this machine can reach lc, and
// whether that can be told before it listens: an IP address or a unix
// socket can, a host name only once resolved.
func (lc ListenerConfig) localByConfig() (local, known bool) {
	if lc.ProxyProtocol || len(lc.ProxyTrusted) > 0 {
		return false, true
	}
	if lc.Type == listeners.Unix {
		return true, true
	}
	host, _, err := net.SplitHostPort(lc.Address)
	if err != nil {
		return false, false
	}
	if host == "" {
		return false, true // every address
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return false, false
	}
	return ip.IsLoopback(), true
}

// validateAuth adds the problems with the auth settings to errs.
func (o Options) validateAuth(bad func(key, format string, args ...any)) {
	switch o.Auth.OtherUserSession {
	case "", OtherUserRefuse, OtherUserReplace:
	default:
		bad("auth.other_user_session", "unknown value %q (want refuse or replace)", o.Auth.OtherUserSession)
	}
	if o.Auth.LoginBurst < 0 {
		bad("auth.login_burst", "must not be negative")
	}
	if o.Auth.LoginInterval < 0 {
		bad("auth.login_interval", "must not be negative")
	}
	if o.Auth.LoginAddresses < 0 {
		bad("auth.login_addresses", "must not be negative")
	}
	files := o.Auth.PasswordFile != ""
	acls := o.Auth.ACLFile != ""
	for i, lc := range o.Listeners {
		if lc.Auth != nil {
			files = files || lc.Auth.PasswordFile != ""
			acls = acls || lc.Auth.ACLFile != ""
		}
		if lc.UseIdentityAsUsername && !lc.RequireClientCert {
			bad(fmt.Sprintf("listeners[%d].use_identity_as_username", i),
				"needs require_client_cert: the username is the client certificate's common name")
		}
	}
	for _, i := range o.ClosedListeners() {
		bad(fmt.Sprintf("listeners[%d]", i), "%v", errClosed)
	}
	if files && o.Authenticator != nil {
		bad("auth.password_file", "set together with Options.Authenticator, which decides instead; keep one")
	}
	if acls && o.Authorizer != nil {
		bad("auth.acl_file", "set together with Options.Authorizer, which decides instead; keep one")
	}
}
