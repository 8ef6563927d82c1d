package mqttd

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"mqttd/listeners"
)

// ListenerConfig describes one network listener, one entry of the config
// file's listeners list. The zero value of every field means its default.
type ListenerConfig struct {
	// Type is the transport: tcp (the default), tls, ws (WebSocket), wss
	// (WebSocket over TLS) or unix.
	Type string `yaml:"type"`
	// Address is host:port, e.g. 127.0.0.1:1883; unused by unix.
	Address string `yaml:"address"`
	// Path is the URL path of a ws or wss listener (default /mqtt), or
	// the socket file of a unix listener (required there).
	Path string `yaml:"path"`
	// FileMode is the permissions of a unix socket file, octal (default
	// "0660": the broker's user and group may connect).
	FileMode string `yaml:"file_mode"`

	// CertFile and KeyFile are the server's certificate chain and private
	// key, PEM, of a tls or wss listener (required there). They are read
	// again on SIGHUP (Server.Reload).
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ClientCAFile holds the CAs (PEM) whose client certificates are
	// accepted; a client that offers a certificate must have one of them.
	ClientCAFile string `yaml:"client_ca_file"`
	// RequireClientCert refuses clients without such a certificate
	// (mutual TLS); it needs ClientCAFile.
	RequireClientCert bool `yaml:"require_client_cert"`
	// CRLFile is a certificate revocation list (PEM or DER) signed by a
	// CA of ClientCAFile, Mosquitto's crlfile: the client certificates it
	// lists are refused at the handshake. Read again on SIGHUP, for new
	// handshakes; it needs ClientCAFile.
	CRLFile string `yaml:"crl_file"`
	// MinVersion is the oldest TLS version accepted: "1.2" (the default)
	// or "1.3". 1.0 and 1.1 are refused.
	MinVersion string `yaml:"min_version"`
	// CipherSuites are the TLS 1.2 cipher suites offered, by Go's names
	// (TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, ...); empty means Go's
	// defaults. TLS 1.3's are not configurable.
	CipherSuites []string `yaml:"cipher_suites"`
	// HandshakeTimeout bounds a TLS handshake, a PROXY header and a
	// WebSocket upgrade (default 10s).
	HandshakeTimeout time.Duration `yaml:"handshake_timeout"`

	// AllowedOrigins are the browser origins (https://host[:port]) a ws
	// or wss client may come from besides the listener's own host; "*"
	// allows every page on the web to use its visitors' browsers.
	AllowedOrigins []string `yaml:"allowed_origins"`
	// ProxyProtocol expects a PROXY protocol header (v1 or v2) from the
	// networks in ProxyTrusted and takes the client's address from it;
	// tcp, tls, ws and wss listeners.
	ProxyProtocol bool `yaml:"proxy_protocol"`
	// ProxyTrusted are the networks (CIDR, e.g. 10.0.0.0/8) of the load
	// balancers or reverse proxies trusted to tell the client's address:
	// by PROXY header with ProxyProtocol, by X-Forwarded-For on ws and
	// wss. A connection from elsewhere sending a PROXY header is closed.
	ProxyTrusted []string `yaml:"proxy_trusted"`
	// MaxConnections bounds this listener's open connections (0: only
	// limits.max_connections applies).
	MaxConnections int `yaml:"max_connections"`
	// MaxHandshakes bounds the connections in their TLS handshake, PROXY
	// header or WebSocket upgrade at once (default 1024): past it new ones
	// are closed at once.
	MaxHandshakes int `yaml:"max_handshakes"`
	// MaxHandshakesPerAddress bounds those from one client address
	// (default 32), so that one address cannot hold all max_handshakes;
	// loopback and proxy_trusted peers are not bounded by it.
	MaxHandshakesPerAddress int `yaml:"max_handshakes_per_address"`

	// Auth overrides the broker's auth settings for this listener, key by
	// key: a password file, an ACL file or allow_anonymous of its own.
	Auth *AuthConfig `yaml:"auth"`
	// UseIdentityAsUsername makes the common name of the client's
	// certificate its username, in place of the CONNECT's, on a tls or
	// wss listener with require_client_cert; no password is asked for.
	UseIdentityAsUsername bool `yaml:"use_identity_as_username"`
}

// DefaultWebSocketAddress is where the command listens for MQTT over
// WebSocket when nothing is configured, at listeners.DefaultPath.
const DefaultWebSocketAddress = "127.0.0.1:8083"

var tlsVersions = map[string]uint16{"1.2": tls.VersionTLS12, "1.3": tls.VersionTLS13}

// config turns lc into the listeners package's Config, or every problem
// with it, each naming its key under key (listeners[i]).
func (lc ListenerConfig) config(key string) (listeners.Config, []error) {
	ck := &listenerCheck{key: key}
	typ := cmp.Or(lc.Type, listeners.TCP)
	cfg := listeners.Config{
		Type: typ, Address: lc.Address, Path: lc.Path, AllowedOrigins: lc.AllowedOrigins,
		ProxyProtocol: lc.ProxyProtocol, MaxConnections: lc.MaxConnections, HandshakeTimeout: lc.HandshakeTimeout,
		MaxHandshakes: lc.MaxHandshakes, MaxHandshakesPerAddress: lc.MaxHandshakesPerAddress,
		TLS: listeners.TLSConfig{CertFile: lc.CertFile, KeyFile: lc.KeyFile, ClientCAFile: lc.ClientCAFile,
			RequireClientCert: lc.RequireClientCert, CRLFile: lc.CRLFile},
	}
	if !lc.checkPlace(ck, typ) {
		return cfg, ck.errs
	}
	cfg.FileMode = lc.fileMode(ck, typ)
	cfg.TLS.MinVersion, cfg.TLS.CipherSuites = lc.checkTLS(ck, typ)
	cfg.ProxyTrusted = lc.checkProxy(ck, typ)
	if len(lc.AllowedOrigins) > 0 && typ != listeners.WS && typ != listeners.WSS {
		ck.bad("allowed_origins", "only for ws and wss listeners")
	}
	if lc.MaxConnections < 0 {
		ck.bad("max_connections", "must not be negative, got %d", lc.MaxConnections)
	}
	if lc.MaxHandshakes < 0 {
		ck.bad("max_handshakes", "must not be negative, got %d", lc.MaxHandshakes)
	}
	if lc.MaxHandshakesPerAddress < 0 {
		ck.bad("max_handshakes_per_address", "must not be negative, got %d", lc.MaxHandshakesPerAddress)
	}
	if lc.HandshakeTimeout < 0 {
		ck.bad("handshake_timeout", "must not be negative, got %s", lc.HandshakeTimeout)
	}
	return cfg, ck.errs
}

// listenerCheck collects the problems with one listener.
type listenerCheck struct {
	key  string // listeners[i]
	errs []error
}

func (ck *listenerCheck) bad(field, format string, args ...any) {
	ck.errs = append(ck.errs, fmt.Errorf("%s.%s: "+format, append([]any{ck.key, field}, args...)...))
}

// checkPlace checks the type and where the listener listens: an address,
// or a path for unix (and a URL path for ws and wss). It reports false
// for an unknown type, whose other keys mean nothing.
func (lc ListenerConfig) checkPlace(ck *listenerCheck, typ string) bool {
	isWeb := typ == listeners.WS || typ == listeners.WSS
	switch typ {
	case listeners.TCP, listeners.TLS, listeners.WS, listeners.WSS:
		if lc.Address == "" {
			ck.bad("address", "missing")
		} else if err := checkAddress(lc.Address); err != nil {
			ck.bad("address", "%v", err)
		}
	case listeners.Unix:
		if lc.Path == "" {
			ck.bad("path", "missing: the socket file of a unix listener")
		}
		if lc.Address != "" {
			ck.bad("address", "a unix listener has a path, not an address")
		}
	default:
		ck.bad("type", "unknown listener type %q (want tcp, tls, ws, wss or unix)", lc.Type)
		return false
	}
	if lc.Path != "" && typ != listeners.Unix && !isWeb {
		ck.bad("path", "only for ws, wss and unix listeners")
	}
	if isWeb && lc.Path != "" && !strings.HasPrefix(lc.Path, "/") {
		ck.bad("path", "must start with /, got %q", lc.Path)
	}
	return true
}

// checkAddress checks that address is host:port with a port that can be
// listened on, so that a wrong one is refused by Validate (and
// check-config) rather than at Listen. The host is left to Listen: a
// name resolves only there.
func checkAddress(address string) error {
	_, port, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("want host:port like 127.0.0.1:1883 or [::]:1883, got %q", address)
	}
	if port == "" {
		return nil // as 0: a port the system picks
	}
	if n, err := strconv.ParseUint(port, 10, 64); err == nil {
		if n > 65535 {
			return fmt.Errorf("port %d out of range (0 to 65535) in %q", n, address)
		}
		return nil
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("unknown port %q in %q (want a number, 0 to 65535)", port, address)
	}
	return nil
}

// fileMode parses file_mode, octal, which only unix listeners take.
func (lc ListenerConfig) fileMode(ck *listenerCheck, typ string) fs.FileMode {
	if lc.FileMode == "" {
		return 0
	}
	m, err := strconv.ParseUint(lc.FileMode, 8, 32)
	if typ != listeners.Unix {
		ck.bad("file_mode", "only for unix listeners")
	} else if err != nil || m > 0o777 {
		ck.bad("file_mode", "want octal permissions like 0660, got %q", lc.FileMode)
	}
	return fs.FileMode(m)
}

// checkTLS checks the TLS keys, which tls and wss listeners need and no
// other takes, and returns the minimum version and cipher suites.
func (lc ListenerConfig) checkTLS(ck *listenerCheck, typ string) (uint16, []uint16) {
	if typ == listeners.TLS || typ == listeners.WSS {
		if lc.CertFile == "" {
			ck.bad("cert_file", "missing: a %s listener needs a certificate", typ)
		}
		if lc.KeyFile == "" {
			ck.bad("key_file", "missing: a %s listener needs a key", typ)
		}
		if lc.RequireClientCert && lc.ClientCAFile == "" {
			ck.bad("client_ca_file", "missing: require_client_cert needs the CAs to check client certificates with")
		}
		if lc.CRLFile != "" && lc.ClientCAFile == "" {
			ck.bad("client_ca_file", "missing: crl_file needs the CA that signed it")
		}
	} else {
		for _, f := range []struct {
			name string
			set  bool
		}{
			{"cert_file", lc.CertFile != ""}, {"key_file", lc.KeyFile != ""}, {"client_ca_file", lc.ClientCAFile != ""},
			{"require_client_cert", lc.RequireClientCert}, {"crl_file", lc.CRLFile != ""}, {"min_version", lc.MinVersion != ""},
			{"cipher_suites", len(lc.CipherSuites) > 0},
		} {
			if f.set {
				ck.bad(f.name, "only for tls and wss listeners")
			}
		}
	}
	var minVersion uint16
	if lc.MinVersion != "" {
		v, ok := tlsVersions[lc.MinVersion]
		if !ok {
			ck.bad("min_version", "want 1.2 or 1.3, got %q (TLS 1.0 and 1.1 are refused)", lc.MinVersion)
		}
		minVersion = v
	}
	var suites []uint16
	for _, name := range lc.CipherSuites {
		// tls.CipherSuites lists only the secure ones.
		i := slices.IndexFunc(tls.CipherSuites(), func(cs *tls.CipherSuite) bool { return cs.Name == name })
		if i < 0 {
			ck.bad("cipher_suites", "unknown or insecure cipher suite %q", name)
			continue
		}
		suites = append(suites, tls.CipherSuites()[i].ID)
	}
	return minVersion, suites
}

// checkProxy checks the PROXY protocol keys and parses proxy_trusted.
func (lc ListenerConfig) checkProxy(ck *listenerCheck, typ string) []netip.Prefix {
	if lc.ProxyProtocol && typ == listeners.Unix {
		ck.bad("proxy_protocol", "not for unix listeners")
	}
	if lc.ProxyProtocol && len(lc.ProxyTrusted) == 0 {
		ck.bad("proxy_trusted", "missing: proxy_protocol needs the networks of the balancers that send the header")
	}
	var nets []netip.Prefix
	for _, s := range lc.ProxyTrusted {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			if a, aerr := netip.ParseAddr(s); aerr == nil {
				p, err = a.Prefix(a.BitLen())
			}
		}
		if err != nil {
			ck.bad("proxy_trusted", "want a network like 10.0.0.0/8 or an address, got %q", s)
			continue
		}
		nets = append(nets, p.Masked())
	}
	return nets
}

// Listen opens every listener in Options.Listeners.
func (s *Server) Listen() error {
	for i, lc := range s.opts.Listeners {
		cfg, errs := lc.config(fmt.Sprintf("listeners[%d]", i))
		if len(errs) > 0 { // Validate, which New ran, has reported these
			return errors.Join(errs...)
		}
		cfg.MaxMessageSize = int64(s.opts.Limits.MaxPacketSize)
		cfg.Logger = s.log
		cfg.Refused = s.listenerRefused
		l, err := listeners.Listen(cfg)
		if err == nil {
			name := fmt.Sprintf("%s:%s", cfg.Type, l.Addr())
			s.mu.Lock()
			err = s.addListenerLocked(name, l, &s.opts.Listeners[i])
			s.mu.Unlock()
			if err != nil {
				l.Close()
			}
		}
		if err != nil {
			return fmt.Errorf("listeners[%d]: %w", i, err)
		}
	}
	return nil
}
