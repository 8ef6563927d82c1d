package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"mqttd"
)

// config is the YAML file: the broker's Options plus what only the command
// has (logging, metrics, the garbage collector's policy).
type config struct {
	mqttd.Options `yaml:",inline"`
	Log           logConfig     `yaml:"log"`
	Metrics       metricsConfig `yaml:"metrics"`
	GC            gcConfig      `yaml:"gc"`
}

type logConfig struct {
	// Level is trace, debug, info, warn or error.
	Level string `yaml:"level"`
	// Format is console (for people) or json (for log collectors).
	Format string `yaml:"format"`
}

type metricsConfig struct {
	// Address serves /metrics, /healthz, /readyz and the JSON API
	// (/api/v1/) over HTTP (http.go): defaultMetricsAddress unless set;
	// "off" or "" serves none.
	Address string `yaml:"address"`
	// Token is the bearer token the JSON API and pprof require; without
	// one (or an admin's password, see http_login.go) they are served only
	// on a loopback address.
	Token string `yaml:"token"`
	// TLS serves the address over HTTPS with these files, read again on
	// SIGHUP as the listeners' are.
	TLS metricsTLS `yaml:"tls"`
	// PProf serves /debug/pprof/ too.
	PProf bool `yaml:"pprof"`
	// MaxConnections bounds the open connections to the address; past it
	// new ones are closed at accept. 0 means 64.
	MaxConnections int `yaml:"max_connections"`
	// IdleTimeout closes a keep-alive connection that sends no request
	// for this long. 0 means 60s.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
}

// metricsTLS is the metrics address's certificate and key (PEM): both,
// or neither for plain HTTP.
type metricsTLS struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

const defaultDataDir = "data"

// defaults are what mqttd runs with when nothing is configured.
func defaults() config {
	return config{
		Options: mqttd.Options{
			Listeners: []mqttd.ListenerConfig{
				{Type: "tcp", Address: mqttd.DefaultAddress},
				{Type: "ws", Address: mqttd.DefaultWebSocketAddress},
			},
			DataDir: defaultDataDir,
		},
		Log:     logConfig{Level: "info", Format: "console"},
		Metrics: metricsConfig{Address: defaultMetricsAddress},
	}
}

// listFlag collects a repeatable flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// cliFlags are the command line; each also reads an MQTTD_* variable.
type cliFlags struct {
	config string
	listen listFlag
	// Origins added to every ws and wss listener's allowed_origins.
	wsOrigins   listFlag
	dataDir     string
	logLevel    string
	logFormat   string
	metricsAddr string
	version     bool
	// The keys of the tls:// and wss:// listeners given with --listen.
	tlsCert, tlsKey, tlsClientCA, tlsCRL string
	// auth, over the config's auth block.
	passwordFile, aclFile, allowAnonymous string
	// The metrics address's token and pprof, over the config's metrics block.
	metricsToken string
	pprof        boolFlag
	// The metrics address's certificate and key, over metrics.tls.
	metricsTLSCert, metricsTLSKey string
}

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (cliFlags, error) {
	var f cliFlags
	fs := flag.NewFlagSet("mqttd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.config, "config", getenv("MQTTD_CONFIG"), "YAML config `file` (env MQTTD_CONFIG)")
	fs.Var(&f.listen, "listen", "`listener`, repeatable: host:port or tcp://host:port, tls://host:port, ws://host:port[/path], wss://host:port[/path], unix:///path; replaces the config's listeners (env MQTTD_LISTEN, comma-separated)")
	fs.Var(&f.wsOrigins, "ws-allowed-origin", "browser `origin` (scheme://host[:port], or * for any page) let into every ws and wss listener, repeatable: for a dashboard served from another machine; pages from the listener's own host get in without it (env MQTTD_WS_ALLOWED_ORIGIN, comma-separated)")
	fs.StringVar(&f.tlsCert, "tls-cert", getenv("MQTTD_TLS_CERT"), "certificate `file` (PEM) of the tls:// and wss:// listeners of --listen (env MQTTD_TLS_CERT)")
	fs.StringVar(&f.tlsKey, "tls-key", getenv("MQTTD_TLS_KEY"), "private key `file` (PEM) of the tls:// and wss:// listeners of --listen (env MQTTD_TLS_KEY)")
	fs.StringVar(&f.tlsCRL, "tls-crl", getenv("MQTTD_TLS_CRL"), "CRL `file` (PEM or DER) signed by --tls-client-ca: the client certificates it revokes are refused; read again on SIGHUP (env MQTTD_TLS_CRL)")
	fs.StringVar(&f.tlsClientCA, "tls-client-ca", getenv("MQTTD_TLS_CLIENT_CA"), "CA `file` (PEM): the tls:// and wss:// listeners of --listen then require client certificates it signed (mutual TLS; env MQTTD_TLS_CLIENT_CA)")
	fs.StringVar(&f.passwordFile, "password-file", getenv("MQTTD_PASSWORD_FILE"), "password `file` (mosquitto_passwd's format; see mqttd passwd): clients with a username must give its password (env MQTTD_PASSWORD_FILE)")
	fs.StringVar(&f.aclFile, "acl-file", getenv("MQTTD_ACL_FILE"), "ACL `file` in Mosquitto's acl_file syntax: what each user may publish and read (env MQTTD_ACL_FILE)")
	fs.StringVar(&f.allowAnonymous, "allow-anonymous", getenv("MQTTD_ALLOW_ANONYMOUS"), "true or false: let clients without a username in (default: only on loopback listeners without a password file; env MQTTD_ALLOW_ANONYMOUS)")
	fs.StringVar(&f.dataDir, "data-dir", getenv("MQTTD_DATA_DIR"), "`directory` for durable state (default ./data; env MQTTD_DATA_DIR)")
	fs.StringVar(&f.logLevel, "log-level", getenv("MQTTD_LOG_LEVEL"), "trace, debug, info, warn or error (default info; env MQTTD_LOG_LEVEL)")
	fs.StringVar(&f.logFormat, "log-format", getenv("MQTTD_LOG_FORMAT"), "console or json (default console; env MQTTD_LOG_FORMAT)")
	fs.StringVar(&f.metricsAddr, "metrics", getenv("MQTTD_METRICS"), "HTTP `address` for /metrics, /healthz, /readyz and the JSON API /api/v1/ (off: none; env MQTTD_METRICS)")
	fs.StringVar(&f.metricsToken, "metrics-token", getenv("MQTTD_METRICS_TOKEN"), "bearer `token` the JSON API and pprof require; without one they are served only when --metrics is a loopback address (env MQTTD_METRICS_TOKEN)")
	fs.StringVar(&f.metricsTLSCert, "metrics-tls-cert", getenv("MQTTD_METRICS_TLS_CERT"), "certificate `file` (PEM): serve the --metrics address over HTTPS, with --metrics-tls-key (env MQTTD_METRICS_TLS_CERT)")
	fs.StringVar(&f.metricsTLSKey, "metrics-tls-key", getenv("MQTTD_METRICS_TLS_KEY"), "private key `file` (PEM) of --metrics-tls-cert (env MQTTD_METRICS_TLS_KEY)")
	f.pprof = boolFlag(getenv("MQTTD_PPROF"))
	fs.Var(&f.pprof, "pprof", "serve /debug/pprof/ on the --metrics address too (env MQTTD_PPROF)")
	fs.BoolVar(&f.version, "version", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: mqttd [flags]\n       mqttd version\n       mqttd passwd [-c] [-b] [-D] FILE USER [PASSWORD]\n       mqttd check-config FILE\n       mqttd import MOSQUITTO_CONF\n       mqttd ctl COMMAND (the management API from a terminal: clients, kick, retained, dlq, reload...; see mqttd ctl help)\n\nRuns the mqttd MQTT broker. With no flags it listens on %s (MQTT) and ws://%s/mqtt (MQTT over WebSocket) and keeps state in ./%s.\n\nFlags:\n",
			mqttd.DefaultAddress, mqttd.DefaultWebSocketAddress, defaultDataDir)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if fs.NArg() == 1 && fs.Arg(0) == "version" {
		f.version = true
	} else if fs.NArg() > 0 {
		return f, fmt.Errorf("unexpected argument %q (see mqttd -h)", fs.Arg(0))
	}
	if len(f.listen) == 0 && getenv("MQTTD_LISTEN") != "" {
		f.listen = strings.Split(getenv("MQTTD_LISTEN"), ",")
	}
	if len(f.wsOrigins) == 0 && getenv("MQTTD_WS_ALLOWED_ORIGIN") != "" {
		f.wsOrigins = strings.Split(getenv("MQTTD_WS_ALLOWED_ORIGIN"), ",")
	}
	return f, nil
}

// loadConfig reads the file (when given) over the defaults, then applies
// the flags. Unknown keys and values of the wrong type are errors that name
// the key; Options.Validate names the rest.
func loadConfig(f cliFlags) (config, error) {
	cfg := defaults()
	var data []byte
	if f.config != "" {
		var err error
		if data, err = os.ReadFile(f.config); err != nil {
			return cfg, err
		}
		if err := decodeConfig(f.config, data, &cfg); err != nil {
			return cfg, err
		}
	}
	var errs []error
	if len(f.listen) > 0 {
		cfg.Listeners = nil
		for _, a := range f.listen {
			lc, err := parseListen(strings.TrimSpace(a), f)
			errs = append(errs, err)
			cfg.Listeners = append(cfg.Listeners, lc)
		}
	}
	f.addOrigins(cfg.Listeners)
	setIf(&cfg.DataDir, f.dataDir)
	setIf(&cfg.Auth.PasswordFile, f.passwordFile)
	setIf(&cfg.Auth.ACLFile, f.aclFile)
	if f.allowAnonymous != "" {
		allow, err := strconv.ParseBool(f.allowAnonymous)
		if err != nil {
			errs = append(errs, fmt.Errorf("--allow-anonymous: want true or false, got %q", f.allowAnonymous))
		}
		cfg.Auth.AllowAnonymous = &allow
	}
	setIf(&cfg.Log.Level, f.logLevel)
	setIf(&cfg.Log.Format, f.logFormat)
	errs = append(errs, f.applyMetrics(&cfg.Metrics))
	// The problems with the values, each named by its key, with the line
	// of the file that set it.
	var bad []error
	if _, err := zerolog.ParseLevel(cfg.Log.Level); err != nil || cfg.Log.Level == "" {
		bad = append(bad, fmt.Errorf("log.level: unknown level %q (want trace, debug, info, warn or error)", cfg.Log.Level))
	}
	if cfg.Log.Format != "console" && cfg.Log.Format != "json" {
		bad = append(bad, fmt.Errorf("log.format: unknown format %q (want console or json)", cfg.Log.Format))
	}
	bad = append(bad, cfg.GC.validate(), cfg.Metrics.validate())
	if cfg.DataDir == "" {
		bad = append(bad, errors.New("data_dir: must not be empty"))
	}
	if len(cfg.Listeners) == 0 {
		bad = append(bad, errors.New("listeners: at least one is needed"))
	}
	bad = append(bad, cfg.Options.Validate())
	errs = append(errs, withLines(f.config, data, errors.Join(bad...), f.setByFlag))
	return cfg, errors.Join(errs...)
}

// setByFlag reports whether key (listeners[0].address) has its value
// from a flag or the environment rather than from the config file, whose
// line would then be the wrong one to name.
func (f cliFlags) setByFlag(key string) bool {
	set := map[string]bool{
		"listeners": len(f.listen) > 0, "data_dir": f.dataDir != "", "log.level": f.logLevel != "",
		"log.format": f.logFormat != "", "auth.password_file": f.passwordFile != "", "auth.acl_file": f.aclFile != "",
		"auth.allow_anonymous": f.allowAnonymous != "", "metrics.address": f.metricsAddr != "",
		"metrics.token": f.metricsToken != "", "metrics.pprof": f.pprof != "",
		"metrics.tls.cert_file": f.metricsTLSCert != "", "metrics.tls.key_file": f.metricsTLSKey != "",
	}
	for k, byFlag := range set {
		if byFlag && (key == k || strings.HasPrefix(key, k+".") || strings.HasPrefix(key, k+"[")) {
			return true
		}
	}
	return false
}

// parseListen turns a --listen value into a listener: scheme://address
// for tcp, tls, ws and wss (ws and wss may add a path), unix:///path for
// a unix socket; a bare host:port is tcp. tls and wss take their keys
// from --tls-cert, --tls-key, --tls-client-ca and --tls-crl.
func parseListen(v string, f cliFlags) (mqttd.ListenerConfig, error) {
	scheme, rest, ok := strings.Cut(v, "://")
	if !ok {
		return mqttd.ListenerConfig{Type: "tcp", Address: v}, nil
	}
	lc := mqttd.ListenerConfig{Type: scheme}
	switch scheme {
	case "tcp", "tls":
		lc.Address = rest
	case "ws", "wss":
		addr, path, hasPath := strings.Cut(rest, "/")
		lc.Address = addr
		if hasPath {
			lc.Path = "/" + path
		}
	case "unix":
		lc.Path = rest
	default:
		return lc, fmt.Errorf("--listen %q: unknown scheme %q (want tcp, tls, ws, wss or unix)", v, scheme)
	}
	if scheme == "tls" || scheme == "wss" {
		lc.CertFile, lc.KeyFile, lc.ClientCAFile = f.tlsCert, f.tlsKey, f.tlsClientCA
		lc.RequireClientCert, lc.CRLFile = f.tlsClientCA != "", f.tlsCRL
	}
	return lc, nil
}

// addOrigins adds --ws-allowed-origin to the ws and wss listeners, those
// of the config file, of --listen or the default one alike.
func (f cliFlags) addOrigins(lcs []mqttd.ListenerConfig) {
	for i := range lcs {
		if lcs[i].Type != "ws" && lcs[i].Type != "wss" {
			continue
		}
		for _, o := range f.wsOrigins {
			lcs[i].AllowedOrigins = append(lcs[i].AllowedOrigins, strings.TrimSpace(o))
		}
	}
}

func setIf(dst *string, v string) {
	if v != "" {
		*dst = v
	}
}

// newLogger builds the logger the config asks for, writing to w. The
// level is zerolog's global one, which a SIGHUP can change: the broker
// keeps its own copy of the logger.
func newLogger(lc logConfig, w io.Writer) zerolog.Logger {
	level, _ := zerolog.ParseLevel(lc.Level)
	zerolog.SetGlobalLevel(level)
	if lc.Format == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: "15:04:05.000", NoColor: !isTerminal(w)}
	}
	return zerolog.New(w).With().Timestamp().Logger()
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
