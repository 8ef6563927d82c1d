package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"mqttd"
	"mqttd/auth"
	"mqttd/auth/acl"
	"mqttd/auth/passwd"
	"mqttd/internal/fileperm"
	"mqttd/listeners"
)

// The files the metrics address reads besides the config: its certificate
// (metrics.tls) and, for logins to the API, the broker's password file
// (auth.password_file) and ACL file (auth.acl_file), whose "admin" lines
// name the users the API accepts with HTTP Basic credentials. Each is
// read again on SIGHUP, as the broker's own copies are.

// apiLoginWorkers and apiLoginQueue bound the hash checks of API logins:
// one at a time, so that someone guessing passwords at the API takes one
// core at most from the broker's own logins; past the queue a login is
// refused at once (503).
const (
	apiLoginWorkers = 1
	apiLoginQueue   = 16
)

// httpFiles are the metrics address's certificate and login files.
type httpFiles struct {
	tls    *listeners.ServerTLS // nil: plain HTTP
	logins *apiLogins           // nil: no Basic logins
}

// loadHTTPFiles loads what mc and the broker's auth name for the metrics
// address, as listeners/ loads a listener's certificate and the broker
// its password and ACL files.
func loadHTTPFiles(mc metricsConfig, ac mqttd.AuthConfig, reg prometheus.Registerer, log zerolog.Logger) (*httpFiles, error) {
	f := &httpFiles{}
	var errs []error
	if mc.Address != "" && mc.TLS.CertFile != "" {
		st, err := listeners.NewServerTLS(listeners.TLSConfig{CertFile: mc.TLS.CertFile, KeyFile: mc.TLS.KeyFile})
		if err != nil {
			errs = append(errs, fmt.Errorf("metrics.tls: %w", fileperm.Explain(err, mc.TLS.CertFile)))
		}
		f.tls = st
	}
	if mc.Address != "" && ac.PasswordFile != "" && ac.ACLFile != "" {
		l, err := newAPILogins(ac, reg, log)
		errs = append(errs, err)
		f.logins = l
	}
	return f, errors.Join(errs...)
}

// reload reads the files again; one that does not load keeps what was
// loaded before, and the error names it.
func (f *httpFiles) reload() error {
	if f == nil {
		return nil
	}
	var errs []error
	if f.tls != nil {
		if err := f.tls.Reload(); err != nil {
			errs = append(errs, fmt.Errorf("metrics.tls: %w", err))
		}
	}
	if f.logins != nil {
		errs = append(errs, f.logins.reload())
	}
	return errors.Join(errs...)
}

// apiLogins checks HTTP Basic credentials against the broker's password
// file, with the same hashing, the same delay for an address that failed
// (100 ms doubling up to 5 s) and a bounded pool of its own, and lets in
// only the users the ACL file makes admins.
type apiLogins struct {
	passwd *passwd.Authenticator
	acl    *acl.Authorizer
	failed prometheus.Counter
	log    zerolog.Logger
	// When a failure, and a login refused unchecked for the queue,
	// were last logged, unix nanoseconds.
	warned, warnedBusy atomic.Int64
}

func newAPILogins(ac mqttd.AuthConfig, reg prometheus.Registerer, log zerolog.Logger) (*apiLogins, error) {
	l := &apiLogins{log: log, failed: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "mqttd_api_login_failures_total",
		Help: "Logins to the management API refused: a wrong password or an unknown user.",
	})}
	pw, err := passwd.New(ac.PasswordFile, passwd.Options{Workers: apiLoginWorkers, MaxQueue: apiLoginQueue})
	if err != nil {
		return nil, fmt.Errorf("auth.password_file: %w", fileperm.Explain(err, ac.PasswordFile))
	}
	rules, err := acl.Open(ac.ACLFile)
	if err != nil {
		return nil, fmt.Errorf("auth.acl_file: %w", fileperm.Explain(err, ac.ACLFile))
	}
	l.passwd, l.acl = pw, rules
	busy := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "mqttd_api_logins_busy_total",
		Help: "Logins to the management API refused unchecked: as many were waiting for a password check as may.",
	}, func() float64 { return float64(pw.Stats().Busy) })
	if reg != nil {
		reg.MustRegister(l.failed, busy)
	}
	return l, nil
}

func (l *apiLogins) reload() error {
	var errs []error
	if err := l.passwd.Reload(); err != nil {
		errs = append(errs, fmt.Errorf("auth.password_file (the API's logins): %w", err))
	}
	if err := l.acl.Reload(); err != nil {
		errs = append(errs, fmt.Errorf("auth.acl_file (the API's admins): %w", err))
	}
	return errors.Join(errs...)
}

// login checks user and password for r: 0 for an admin, else the status
// to answer and why.
func (l *apiLogins) login(r *http.Request, user, password string) (status int, why string) {
	err := l.passwd.Authenticate(auth.ClientInfo{Username: user, Remote: remoteOf(r)}, []byte(password))
	switch {
	case errors.Is(err, passwd.ErrBusy):
		throttled(&l.warnedBusy, l.log.Warn().Str("remote", r.RemoteAddr).Str("username", user)).
			Msg("API login refused unchecked: too many are waiting for a password check (logged at most every 10 s; " +
				"mqttd_api_logins_busy_total counts them all)")
		return http.StatusServiceUnavailable, "too many logins under way: try again"
	case err != nil:
		l.failed.Inc()
		throttled(&l.warned, l.log.Warn().Str("remote", r.RemoteAddr).Str("username", user)).
			Msg("API login refused: wrong user name or password (logged at most every 10 s; " +
				"mqttd_api_login_failures_total counts them all)")
		return http.StatusUnauthorized, "wrong user name or password"
	case !l.acl.Admin(user):
		return http.StatusForbidden, fmt.Sprintf("user %q is not an admin: the ACL file (auth.acl_file) gives the role "+
			"with a line admin in the user's section", user)
	}
	return 0, ""
}

// throttled is e, or nil (which logs nothing) when a line was logged
// less than 10 s after *last; it then sets *last.
func throttled(last *atomic.Int64, e *zerolog.Event) *zerolog.Event {
	now := time.Now().UnixNano()
	was := last.Load()
	if now-was < int64(10*time.Second) || !last.CompareAndSwap(was, now) {
		return nil
	}
	return e
}

// remoteOf is the request's peer as the password file's failure delay
// keys it (by IP).
func remoteOf(r *http.Request) net.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return nil
	}
	return net.TCPAddrFromAddrPort(ap)
}

// basicAllowed reports whether Basic credentials may be used on a
// request: over TLS, or on a loopback address, never in clear across a
// network.
func basicAllowed(exposed bool, cs *tls.ConnectionState) bool { return cs != nil || !exposed }
