package mqttd

import (
	"errors"
	"fmt"
	"net"
	"sync/atomic"

	"mqttd/auth"
	"mqttd/auth/acl"
	"mqttd/auth/passwd"
	"mqttd/internal/fileperm"
)

// Authentication and authorization per listener: each listener has a
// gate (its password file, ACL file, anonymous policy and client id
// prefix), and a CONNECT passes its listener's gate.

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
	// A file that failed is not tried again for the next listener naming
	// it, so that its error is reported once.
	triedPasswd, triedACL := map[string]bool{}, map[string]bool{}
	for _, c := range cfgs {
		if p := c.PasswordFile; p != "" && !triedPasswd[p] {
			triedPasswd[p] = true
			a, err := passwd.New(p, passwd.Options{OnFailure: s.loginFailed})
			if err != nil {
				errs = append(errs, fmt.Errorf("auth.password_file: %w", fileperm.Explain(err, p)))
			} else {
				f.passwd[p] = a
				s.warnLegacy(p, a)
			}
		}
		if p := c.ACLFile; p != "" && !triedACL[p] {
			triedACL[p] = true
			a, err := acl.Open(p)
			if err != nil {
				errs = append(errs, fmt.Errorf("auth.acl_file: %w", fileperm.Explain(err, p)))
			} else {
				f.acl[p] = a
			}
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

// openGateLocked sets up how listener name, listening at addr, lets
// clients in; lc is its configuration, nil for one added with
// AddListener. It logs who may connect, and refuses a listener that lets
// nobody in unless auth.allow_closed says it is meant to. The caller
// holds s.mu.
func (s *Server) openGateLocked(name string, addr net.Addr, lc *ListenerConfig) error {
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
	if o.closed(c, g.local, g.identity) {
		return fmt.Errorf("listener %s %w", name, errClosed)
	}
	s.gates[name] = g
	s.logGate(name, g, c)
	return nil
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
		msg += " (auth.allow_closed: true)"
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
