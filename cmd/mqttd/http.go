package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"mqttd"
	"mqttd/dashboard"
)

// HTTP on the metrics address (metrics.address, --metrics): /metrics,
// /healthz and /readyz, open to whoever reaches the address, since
// Prometheus and orchestrators scrape them without credentials; and the
// JSON API under /api/v1/ (its reads in http_api.go, its actions in
// http_admin.go) and, with metrics.pprof, the profiles under
// /debug/pprof/, which show what clients do and cost the broker CPU, so
// they need metrics.token or an admin's password (http_login.go) unless
// the address is loopback. With metrics.tls all of it is served over
// HTTPS.

// Pages of the JSON API: ?limit=N items (defaultPage when not given, at
// most maxPage) after ?after=CURSOR.
const (
	defaultPage = 100
	maxPage     = 1000
)

// retainedPayloadMax is how much of each payload /api/v1/retained shows
// with ?payload=true: enough to recognise a message, and a page of 1,000
// stays around a megabyte.
const retainedPayloadMax = 1024

// httpOptions say what the handler serves besides the broker's state.
type httpOptions struct {
	pprof bool
	// token, when set, is required (Authorization: Bearer) by the API
	// and pprof.
	token string
	// exposed is set when the address is not a loopback one: without a
	// token, or an admin's password over TLS, the API and pprof are then
	// not served at all.
	exposed bool
	// logins checks admins' passwords (HTTP Basic); nil: none are taken.
	logins *apiLogins
	// reload does what SIGHUP does (POST /api/v1/reload); nil: the
	// action answers 501.
	reload func() error
	// log records every action taken through the API.
	log zerolog.Logger
	// stopping is closed when the HTTP server shuts down, which does not
	// wait for a watch's stream to end by itself; nil: never.
	stopping <-chan struct{}
}

// httpOptionsFor decides from the address listened on (the one bound,
// so that a host name or :port is judged by what it became) and the files
// loaded (nil: none), and returns a warning for the log when the API
// cannot be used as configured.
func httpOptionsFor(addr net.Addr, mc metricsConfig, f *httpFiles) (o httpOptions, warning string) {
	ta, ok := addr.(*net.TCPAddr)
	o = httpOptions{pprof: mc.PProf, token: mc.Token, exposed: !ok || !ta.IP.IsLoopback()}
	if f != nil {
		o.logins = f.logins
	}
	if !o.exposed || o.token != "" {
		return o, ""
	}
	switch {
	case o.logins == nil:
		warning = "the metrics address is not a loopback address and neither metrics.token nor auth.password_file " +
			"with auth.acl_file (admins) is set: /api/v1/ and /debug/pprof/ answer 403"
	case f.tls == nil:
		warning = "the metrics address is not a loopback address, metrics.token is not set and admins' passwords " +
			"are not taken over plain HTTP: /api/v1/ and /debug/pprof/ answer 403 until metrics.tls is set"
	case len(o.logins.acl.Admins()) == 0:
		warning = "the metrics address is not a loopback address, metrics.token is not set and auth.acl_file gives " +
			"nobody the admin role (a line admin in a user's section): nobody can use /api/v1/ and /debug/pprof/"
	default:
		return o, ""
	}
	return o, warning + "; /metrics, /healthz and /readyz are open to whoever can reach it"
}

// newHTTPHandler serves the endpoints of the metrics address.
func newHTTPHandler(srv *mqttd.Server, reg *prometheus.Registry, o httpOptions) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := srv.Ready(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready:\n%v\n", err)
			return
		}
		io.WriteString(w, "ready\n")
	})
	// The dashboard's files reveal nothing: every datum comes from the API,
	// behind its guard.
	dashboard.Register(mux)
	g := newGuard(o)
	api := &apiHandler{srv: srv, o: o}
	api.routes(mux, g)
	if o.pprof {
		pprofRoutes(mux, g)
	}
	return mux
}

// guard lets a request through to the API or pprof, or answers it.
type guard struct {
	httpOptions
	tokenSum [sha256.Size]byte
}

func newGuard(o httpOptions) *guard {
	return &guard{httpOptions: o, tokenSum: sha256.Sum256([]byte(o.token))}
}

// whoKey is the context key of who a request let through is: the
// username, "token" or "loopback".
type whoKey struct{}

// who is who sent r, as admit named them.
func who(r *http.Request) string {
	w, _ := r.Context().Value(whoKey{}).(string)
	return w
}

func (g *guard) wrap(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		by, ok := g.admit(w, r)
		if !ok {
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), whoKey{}, by)))
	})
}

// admit decides whether r may use the API and says who sent it, or
// answers it: a token (metrics.token), an admin's password (HTTP Basic,
// over TLS or on loopback only), or, on a loopback address without a
// token set, nothing but a Host naming this machine.
func (g *guard) admit(w http.ResponseWriter, r *http.Request) (by string, ok bool) {
	scheme, _, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	basic := g.logins != nil && basicAllowed(g.exposed, r.TLS)
	switch {
	case strings.EqualFold(scheme, "Basic") && g.logins != nil:
		if !basic {
			writeError(w, http.StatusForbidden, "a password over plain HTTP on a network address is refused (it crosses the "+
				"network in clear): set metrics.tls (--metrics-tls-cert, --metrics-tls-key), or use metrics.token")
			return "", false
		}
		user, password, _ := r.BasicAuth()
		if code, why := g.logins.login(r, user, password); code != 0 {
			if code == http.StatusUnauthorized {
				g.challenge(w, basic)
			}
			writeError(w, code, "%s", why)
			return "", false
		}
		return user, true
	case g.token != "" && g.tokenGiven(r):
		return "token", true
	case g.token != "" || g.exposed && basic:
		g.challenge(w, basic)
		writeError(w, http.StatusUnauthorized, "this needs %s", g.credentials(basic))
		return "", false
	case g.exposed:
		why := "metrics.token (--metrics-token, MQTTD_METRICS_TOKEN) is not set"
		if g.logins != nil {
			why += ", and admins' passwords are taken only over TLS (metrics.tls)"
		}
		writeError(w, http.StatusForbidden, "not served: the metrics address is not a loopback address and %s", why)
		return "", false
	case !loopbackHost(r.Host):
		// A web page whose host name its DNS turns into 127.0.0.1
		// (DNS rebinding) would otherwise read the API through the
		// browser of someone on this machine.
		writeError(w, http.StatusForbidden, "Host %q is not localhost or a loopback address: "+
			"without metrics.token only requests to those are served", r.Host)
		return "", false
	}
	return "loopback", true
}

// challenge names the credentials a 401 asks for; a browser asks its
// user for a Basic one itself.
func (g *guard) challenge(w http.ResponseWriter, basic bool) {
	if g.token != "" {
		w.Header().Add("WWW-Authenticate", `Bearer realm="mqttd"`)
	}
	if basic {
		w.Header().Add("WWW-Authenticate", `Basic realm="mqttd", charset="UTF-8"`)
	}
}

// credentials says in words what a 401 asks for.
func (g *guard) credentials(basic bool) string {
	var what []string
	if g.token != "" {
		what = append(what, "the token of metrics.token: Authorization: Bearer TOKEN")
	}
	if basic {
		what = append(what, "the user name and password of an admin (auth.password_file, a line admin in auth.acl_file): HTTP Basic")
	}
	return strings.Join(what, ", or ")
}

// tokenGiven compares the request's bearer token with the configured one
// in time that does not depend on either: their hashes are compared, so
// not even the length leaks.
func (g *guard) tokenGiven(r *http.Request) bool {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(token)))
	return subtle.ConstantTimeCompare(sum[:], g.tokenSum[:]) == 1
}

// loopbackHost reports whether a Host header names this machine:
// localhost or a loopback address, with or without a port.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(host, ".")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && a.IsLoopback()
}

// pageOf reads ?after= and ?limit=, answering a bad limit itself.
func pageOf(w http.ResponseWriter, r *http.Request) (after string, limit int, ok bool) {
	q := r.URL.Query()
	limit = defaultPage
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, "limit: want a number from 1 to %d, got %q", maxPage, v)
			return "", 0, false
		}
		limit = min(n, maxPage)
	}
	return q.Get("after"), limit, true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, format string, args ...any) {
	writeJSON(w, code, struct {
		Error string `json:"error"`
	}{fmt.Sprintf(format, args...)})
}

// serveHTTP serves the metrics address, when one is configured, and
// returns the server (nil without an address) and the address it bound;
// f are the files loadHTTPFiles loaded (nil: none), and reload is what
// POST /api/v1/reload does.
func serveHTTP(mc metricsConfig, f *httpFiles, srv *mqttd.Server, reg *prometheus.Registry, log zerolog.Logger, reload func() error) (*http.Server, net.Addr, error) {
	l, err := listenMetrics(mc.Address, defaultMetricsAddress, log)
	if l == nil {
		return nil, nil, err
	}
	o, warning := httpOptionsFor(l.Addr(), mc, f)
	stopping := make(chan struct{})
	o.reload, o.log, o.stopping = reload, log, stopping
	if warning != "" {
		log.Warn().Str("address", l.Addr().String()).Msg(warning)
	}
	maxConns, idle := mc.MaxConnections, mc.IdleTimeout
	if maxConns == 0 {
		maxConns = defaultHTTPMaxConnections
	}
	if idle == 0 {
		idle = defaultHTTPIdleTimeout
	}
	var ll net.Listener = newLimitListener(l, maxConns, reg, log)
	if f != nil && f.tls != nil {
		// The server's ReadHeaderTimeout bounds the handshake too.
		ll = tls.NewListener(ll, f.tls.Config())
	}
	hs := &http.Server{
		Handler:           newHTTPHandler(srv, reg, o),
		ReadHeaderTimeout: httpReadTimeout,
		ReadTimeout:       httpReadTimeout,
		WriteTimeout:      httpWriteTimeout,
		IdleTimeout:       idle,
	}
	hs.RegisterOnShutdown(func() { close(stopping) })
	go func() {
		if err := hs.Serve(ll); !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("the metrics address stopped serving")
		}
	}()
	return hs, l.Addr(), nil
}

// applyMetrics applies the flags of the metrics address over the file.
func (f cliFlags) applyMetrics(mc *metricsConfig) error {
	var errs []error
	setIf(&mc.Address, f.metricsAddr)
	if mc.Address == "off" {
		mc.Address = ""
	}
	setIf(&mc.Token, f.metricsToken)
	setIf(&mc.TLS.CertFile, f.metricsTLSCert)
	setIf(&mc.TLS.KeyFile, f.metricsTLSKey)
	if f.pprof != "" {
		on, err := strconv.ParseBool(string(f.pprof))
		if err != nil {
			errs = append(errs, fmt.Errorf("--pprof (MQTTD_PPROF): want true or false, got %q", f.pprof))
		}
		mc.PProf = on
	}
	// A bearer token travels in a header as RFC 6750's b64token; any other
	// character would make a token nobody can send.
	if strings.ContainsFunc(mc.Token, func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("-._~+/=", r))
	}) {
		errs = append(errs, errors.New("metrics.token: use only letters, digits and -._~+/= (a bearer token is sent in a header)"))
	}
	return errors.Join(errs...)
}

// boolFlag is a flag that may be given bare (--pprof) or with a value
// (--pprof=false), and that remembers whether it was given at all, so
// that it overrides the config file only then; applyMetrics parses it.
type boolFlag string

func (b *boolFlag) String() string     { return string(*b) }
func (b *boolFlag) Set(v string) error { *b = boolFlag(v); return nil }
func (b *boolFlag) IsBoolFlag() bool   { return true }
