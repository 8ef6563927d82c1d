package mqttd

import (
	"errors"
	"fmt"
	"net"
	"sort"
	"sync/atomic"
	"time"

	"mqttd/auth"
	"mqttd/auth/acl"
	"mqttd/auth/passwd"
	"mqttd/persistence"
	"mqttd/session"
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
	return c
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
	if files && o.Authenticator != nil {
		bad("auth.password_file", "set together with Options.Authenticator, which decides instead; keep one")
	}
	if acls && o.Authorizer != nil {
		bad("auth.acl_file", "set together with Options.Authorizer, which decides instead; keep one")
	}
}

// gate is how one listener lets clients in.
type gate struct {
	// passwd checks usernames; nil when the listener has no password file.
	passwd    *passwd.Authenticator
	anonymous bool // clients without a username are let in
	identity  bool // the username is the client certificate's common name
	// local: only this machine can reach the listener (not through a
	// proxy that others reach).
	local bool
}

// authFiles are the password and ACL files the broker loaded, each once
// whatever number of listeners name it, for Reload.
type authFiles struct {
	passwd map[string]*passwd.Authenticator
	acl    map[string]*acl.Authorizer
	// byListener is the ACL of each listener opened from Options.Listeners
	// whose ACL differs from the broker's, by listener name
	// (listenerAuthorizer).
	byListener atomic.Pointer[map[string]auth.Authorizer]
}

// loadAuthFiles opens every password and ACL file the options name and
// sets up the broker's Authorizer.
func (s *Server) loadAuthFiles() error {
	f := &authFiles{passwd: map[string]*passwd.Authenticator{}, acl: map[string]*acl.Authorizer{}}
	s.authFiles = f
	o := s.opts
	cfgs := []AuthConfig{o.Auth.AuthConfig}
	for _, lc := range o.Listeners {
		cfgs = append(cfgs, o.Auth.merge(lc.Auth))
	}
	var errs []error
	for _, c := range cfgs {
		if p := c.PasswordFile; p != "" && f.passwd[p] == nil {
			a, err := passwd.New(p, passwd.Options{OnFailure: s.loginFailed})
			if err != nil {
				errs = append(errs, fmt.Errorf("auth.password_file: %w", err))
				continue
			}
			f.passwd[p] = a
			s.warnLegacy(p, a)
		}
		if p := c.ACLFile; p != "" && f.acl[p] == nil {
			a, err := acl.Open(p)
			if err != nil {
				errs = append(errs, fmt.Errorf("auth.acl_file: %w", err))
				continue
			}
			f.acl[p] = a
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	switch {
	case o.Authorizer != nil:
		s.authz = o.Authorizer
	case o.Auth.ACLFile != "":
		s.authz = f.acl[o.Auth.ACLFile]
	default:
		s.authz = auth.AllowAll{}
	}
	for _, lc := range o.Listeners {
		if c := o.Auth.merge(lc.Auth); c.ACLFile != o.Auth.ACLFile {
			s.authz = &listenerAuthorizer{files: f, def: s.authz}
			break
		}
	}
	_, allowAll := s.authz.(auth.AllowAll)
	s.readCheck = !allowAll
	return nil
}

// listenerAuthorizer asks the ACL of the client's listener where
// listeners have ACLs of their own, and def for the others.
type listenerAuthorizer struct {
	files *authFiles
	def   auth.Authorizer
}

// Authorize answers r from the ACL of c's listener.
func (l *listenerAuthorizer) Authorize(c auth.ClientInfo, r auth.Request) bool {
	if m := l.files.byListener.Load(); m != nil {
		if a, ok := (*m)[c.Listener]; ok {
			return a.Authorize(c, r)
		}
	}
	return l.def.Authorize(c, r)
}

// openGate sets up how listener name, listening at addr, lets clients in;
// lc is its configuration, nil for one added with AddListener. It logs
// who may connect. The caller holds s.mu.
func (s *Server) openGateLocked(name string, addr net.Addr, lc *ListenerConfig) {
	o := s.opts
	c := o.Auth.AuthConfig
	g := &gate{local: localOnly(addr)}
	if lc != nil && (lc.ProxyProtocol || len(lc.ProxyTrusted) > 0) {
		// Behind a load balancer or reverse proxy on this machine, the
		// clients are whoever reaches the proxy.
		g.local = false
	}
	if lc != nil {
		c = o.Auth.merge(lc.Auth)
		g.identity = lc.UseIdentityAsUsername
		if c.ACLFile != o.Auth.ACLFile {
			s.setListenerACL(name, s.authFiles.acl[c.ACLFile])
		}
	}
	if c.PasswordFile != "" {
		g.passwd = s.authFiles.passwd[c.PasswordFile]
	}
	g.anonymous = g.local && c.PasswordFile == ""
	if c.AllowAnonymous != nil {
		g.anonymous = *c.AllowAnonymous
	}
	s.gates[name] = g
	s.logGate(name, g, c)
}

// setListenerACL records the ACL of a listener whose ACL differs from the
// broker's; none means every topic.
func (s *Server) setListenerACL(name string, a *acl.Authorizer) {
	f := s.authFiles
	m := map[string]auth.Authorizer{}
	if old := f.byListener.Load(); old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	m[name] = auth.AllowAll{}
	if a != nil {
		m[name] = a
	}
	f.byListener.Store(&m)
}

// localOnly reports whether only this machine can reach a listener at
// addr: a loopback IP address or a unix socket. Anything else, a name
// included, counts as reachable from elsewhere: the default must fail
// closed.
func localOnly(addr net.Addr) bool {
	switch a := addr.(type) {
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	case *net.UnixAddr:
		return true
	case nil:
		return false
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// logGate says at start who may connect to a listener, and warns about a
// listener open to every machine that reaches it, or closed to everyone.
func (s *Server) logGate(name string, g *gate, c AuthConfig) {
	var who string
	switch {
	case s.opts.Authenticator != nil:
		who = "clients the program's Authenticator accepts"
	case g.identity:
		who = "clients with a certificate, named by its common name"
	case g.passwd != nil && g.anonymous:
		who = "users of " + c.PasswordFile + " and anonymous clients"
	case g.passwd != nil:
		who = "users of " + c.PasswordFile + " only"
	case g.anonymous:
		who = "anyone, with any username"
	default:
		who = "nobody"
	}
	acls := "every topic but $SYS/"
	switch {
	case c.ACLFile != "":
		acls = "the topics " + c.ACLFile + " allows"
	case s.opts.Authorizer != nil:
		acls = "what the program's Authorizer allows"
	}
	e := s.log.Info()
	msg := "listener open to " + who + ", for " + acls
	switch {
	case who == "nobody":
		e = s.log.Warn()
		msg += ": anonymous clients are refused on a listener other machines reach, and there is no password file; " +
			"set auth.password_file, or auth.allow_anonymous: true"
	case g.anonymous && !g.local && s.opts.Authenticator == nil:
		e = s.log.Warn()
		msg += ": any machine that reaches it may connect without a password (auth.allow_anonymous: true)"
	}
	e.Str("listener", name).Msg(msg)
}

// closedGate lets nobody in without a password file: the gate of a
// connection whose listener has none, which only a test's newConn makes.
var closedGate = &gate{}

// gateOf returns the gate of a listener by name.
func (s *Server) gateOf(name string) *gate {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.gates[name]; g != nil {
		return g
	}
	return closedGate
}

// authenticate checks a CONNECT's credentials for its listener: a custom
// Authenticator decides alone; otherwise the listener's gate (the
// certificate's name, the password file, anonymous clients). stamp is
// that of the password-file entry that let the client in, 0 when none
// did.
func (s *Server) authenticate(c *conn, g *gate, password []byte) (stamp uint32, err error) {
	if !s.admitLogin(c) {
		return 0, errLoginRateLimited
	}
	stamp, err = s.checkLogin(c, g, password)
	if err == nil {
		s.loginSucceeded(c)
	}
	return stamp, err
}

// checkLogin is authenticate once the source's bucket let the login in.
func (s *Server) checkLogin(c *conn, g *gate, password []byte) (stamp uint32, err error) {
	if a := s.opts.Authenticator; a != nil {
		err := a.Authenticate(*c.info, password)
		if err != nil {
			s.loginFailed(*c.info, err)
		}
		return 0, err
	}
	if g.passwd == nil && !g.identity && c.info.Username != "" && len(s.authFiles.passwd) > 0 {
		// Usernames are checked on other listeners: one that cannot be
		// checked here is taken as anonymous, so that it cannot pass for
		// a user there (their sessions, their ACL rules).
		c.info.Username = ""
	}
	switch {
	case g.identity:
		// A certificate verified by the listener names the client; the
		// password is not asked for.
		return 0, nil
	case c.info.Username == "":
		if !g.anonymous {
			err = fmt.Errorf("anonymous clients are not allowed on this listener: %w", auth.ErrNotAuthorized)
		}
	case g.passwd != nil:
		return g.passwd.AuthenticateEntry(*c.info, password) // it reports failures itself
	case !g.anonymous:
		// Without a password file a username proves nothing.
		err = fmt.Errorf("no password file to check usernames with, and anonymous clients are not allowed: %w",
			auth.ErrNotAuthorized)
	}
	if err != nil {
		s.loginFailed(*c.info, err)
	}
	return 0, err
}

// loginFailed counts and logs a refused login, never its password: each
// at info level, up to loginLogBurst a warnInterval, then a summary.
func (s *Server) loginFailed(c auth.ClientInfo, err error) {
	s.stats.authFailures.Add(1)
	if !s.loginLog.allow() {
		return
	}
	remote := ""
	if c.Remote != nil {
		remote = c.Remote.String()
	}
	s.log.Info().Str("client_id", c.ClientID).Str("username", c.Username).Str("remote", remote).
		Str("listener", c.Listener).Err(err).
		Msg("login refused (at most 20 lines every 10 s; mqttd_auth_failures_total counts them all)")
}

// loginLogBurst is how many refused logins are logged each warnInterval.
const loginLogBurst = 20

// burstLimit lets loginLogBurst events through each warnInterval.
type burstLimit struct {
	window atomic.Int64 // unix nanos the current window started
	n      atomic.Int64 // events in it
}

func (b *burstLimit) allow() bool {
	now := time.Now().UnixNano()
	start := b.window.Load()
	if now-start >= int64(warnInterval) && b.window.CompareAndSwap(start, now) {
		b.n.Store(0)
	}
	return b.n.Add(1) <= loginLogBurst
}

// reloadAuth reads every password and ACL file again. A file that fails
// keeps its old contents (never allowing all instead); the error names
// it.
func (s *Server) reloadAuth() error {
	f := s.authFiles
	if f == nil {
		return nil
	}
	var errs []error
	for _, p := range sortedKeys(f.passwd) {
		if err := f.passwd[p].Reload(); err != nil {
			errs = append(errs, fmt.Errorf("password file kept as it was: %w", err))
			continue
		}
		s.warnLegacy(p, f.passwd[p])
	}
	for _, p := range sortedKeys(f.acl) {
		if err := f.acl[p].Reload(); err != nil {
			errs = append(errs, fmt.Errorf("ACL file kept as it was: %w", err))
		}
	}
	return errors.Join(errs...)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// recheckSubscriptions asks the Authorizer again about every subscription
// after a reload, and takes away those it no longer grants, from the trie,
// the session and the store. Messages already queued are checked as they
// are sent (pumpFrom). It returns how many it took away.
func (s *Server) recheckSubscriptions() int {
	if !s.readCheck {
		return 0
	}
	s.mu.Lock()
	cls := make([]*client, 0, len(s.clients))
	for _, cl := range s.clients {
		cls = append(cls, cl)
	}
	s.mu.Unlock()
	revoked := 0
	for _, cl := range cls {
		gone := s.revokeDenied(cl)
		for _, f := range gone {
			if s.subs.Unsubscribe(f, cl) {
				s.stats.subscriptions.Add(-1)
			}
			s.log.Debug().Str("client_id", cl.id).Str("filter", f).Msg("subscription revoked: the reloaded rules no longer grant it")
		}
		revoked += len(gone)
	}
	s.stats.subsRevoked.Add(uint64(revoked))
	return revoked
}

// revokeDenied takes the subscriptions the Authorizer no longer grants out
// of cl's session (and the store), and returns their filters for the
// caller to take out of the trie.
func (s *Server) revokeDenied(cl *client) []string {
	who := cl.who.Load()
	if who == nil {
		return nil
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.dropped {
		return nil
	}
	var gone []string
	cl.sess.Subscriptions(func(sub session.Subscription) {
		f, err := s.topics.ParseFilter(sub.Filter)
		if err != nil || !s.authz.Authorize(*who, auth.Request{Action: auth.Subscribe, Topic: f.Topic, Group: f.Group,
			QoS: sub.Options.QoS}) {
			gone = append(gone, sub.Filter)
		}
	})
	for _, f := range gone {
		if cl.sess.Unsubscribe(f) && cl.stored {
			s.dur.oneLocked(persistence.DeleteSubscription(cl.id, f), nil)
		}
	}
	return gone
}
