package listeners

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// Transport types.
const (
	TCP  = "tcp"
	TLS  = "tls"
	WS   = "ws"
	WSS  = "wss"
	Unix = "unix"
)

// Defaults for the zero values of Config.
const (
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultPath             = "/mqtt"
	DefaultFileMode         = fs.FileMode(0o660)
	// DefaultMaxMessageSize bounds a WebSocket message when Config gives
	// none: the broker's default maximum packet size.
	DefaultMaxMessageSize = 1 << 20
	// DefaultMaxHandshakes bounds the connections of one listener that
	// are still in their TLS handshake, PROXY header or WebSocket
	// upgrade: past it new ones are closed at once, so a flood of clients
	// that connect and say nothing costs at most this many goroutines
	// (about 8 KiB each) for HandshakeTimeout.
	DefaultMaxHandshakes = 1024
	// DefaultMaxHandshakesPerAddress bounds those from one client
	// address, so that one address cannot take the listener's every
	// slot: 1,024 slots need 32 addresses to fill. A legitimate address
	// rarely has many handshakes under way at once, since each lasts a
	// few round trips; a NAT gateway whose devices all reconnect at once
	// goes on at 32 at a time, the rest retrying.
	DefaultMaxHandshakesPerAddress = 32
)

// Config describes one listener. Zero values mean the defaults above.
type Config struct {
	// Type is TCP, TLS, WS, WSS or Unix.
	Type string
	// Address is host:port for every type but Unix.
	Address string
	// Path is the URL path of a WebSocket listener (DefaultPath), or the
	// socket file of a unix listener.
	Path string
	// FileMode is the permission of a unix socket file (DefaultFileMode).
	FileMode fs.FileMode
	// TLS holds the keys of TLS and WSS listeners.
	TLS TLSConfig
	// AllowedOrigins are the browser origins (scheme://host[:port]) a
	// WebSocket client may come from besides the listener's own host; "*"
	// allows any. A client that sends no Origin (not a browser) is let in.
	AllowedOrigins []string
	// ProxyProtocol expects a PROXY protocol (v1 or v2) header from the
	// networks in ProxyTrusted, and takes the client's address from it.
	ProxyProtocol bool
	// ProxyTrusted are the networks of the load balancers or reverse
	// proxies trusted to tell the client's address: by a PROXY header
	// when ProxyProtocol is set, and by X-Forwarded-For on WebSocket
	// listeners. A connection from elsewhere that sends a PROXY header
	// is closed.
	ProxyTrusted []netip.Prefix
	// MaxConnections bounds this listener's open connections, counted
	// from the accept; 0 means no limit of its own.
	MaxConnections int
	// HandshakeTimeout bounds a TLS handshake, a PROXY header and a
	// WebSocket upgrade (DefaultHandshakeTimeout).
	HandshakeTimeout time.Duration
	// MaxHandshakes bounds the connections in their TLS handshake, PROXY
	// header or WebSocket upgrade at once (DefaultMaxHandshakes).
	MaxHandshakes int
	// MaxHandshakesPerAddress bounds those from one client address
	// (DefaultMaxHandshakesPerAddress), checked before one of
	// MaxHandshakes is taken. Loopback and ProxyTrusted peers are not
	// bounded by it: they speak for many clients (a reverse proxy on the
	// same machine) and are trusted as far as the operator; behind a
	// PROXY header the client it names is bounded.
	MaxHandshakesPerAddress int
	// MaxMessageSize bounds a WebSocket message (DefaultMaxMessageSize):
	// a larger one closes the connection. Give it the broker's maximum
	// packet size.
	MaxMessageSize int64
	// Logger receives what goes wrong before a connection reaches the
	// broker: failed handshakes, refused upgrades, refused PROXY headers,
	// and a certificate chain the client CA file could not complete.
	Logger zerolog.Logger
	// Refused, when set, is told of every connection the listener closes
	// before handing it on, with why (RefusedFull, RefusedPending,
	// RefusedPerAddress, RefusedOrigin, RefusedHandshake), for the
	// broker to count; Logger has a warning at most every 10 s.
	Refused func(reason string)
}

// Why a listener closed a connection before handing it on (Config.Refused).
const (
	RefusedFull       = "listener_max_connections"       // the listener held its MaxConnections
	RefusedPending    = "handshakes_pending"             // MaxHandshakes connections were in their handshake already
	RefusedPerAddress = "handshakes_pending_per_address" // MaxHandshakesPerAddress from the client's address were
	RefusedOrigin     = "websocket_origin"               // a page from an origin not allowed (DNS rebinding, a foreign site)
	RefusedHandshake  = "handshake_failed"               // the TLS handshake, PROXY header or WebSocket upgrade failed
)

// Listener is an open listener. Accept returns connections ready for MQTT.
type Listener struct {
	cfg    Config
	base   net.Listener
	accept func() (net.Conn, error)
	certs  *certStore   // TLS and WSS only
	web    *http.Server // WS and WSS only
	ready  chan net.Conn
	failed chan error // the WebSocket server stopped
	done   chan struct{}
	once   sync.Once

	// rawFile is a duplicate of base's descriptor in Go's network poller,
	// and raw its RawConn, for accepting with accept4 (Linux); nil when
	// connections are accepted through base.
	rawFile *os.File
	raw     syscall.RawConn

	open    atomic.Int64 // connections counted against MaxConnections
	pending atomic.Int64 // connections in their handshake
	// mu guards handshaking: the connections in their handshake, which
	// Close closes so that it leaves no goroutine waiting on a client;
	// and perAddr: how many of them each client address has.
	mu          sync.Mutex
	handshaking map[net.Conn]struct{}
	perAddr     map[netip.Addr]int
	closed      bool
	// Unix nanos of the last warning of each kind, which a flood of
	// clients would otherwise repeat.
	fullWarned atomic.Int64 // MaxConnections or MaxHandshakes reached
	failWarned atomic.Int64 // a handshake, upgrade or PROXY header failed
	addrWarned atomic.Int64 // MaxHandshakesPerAddress reached
	// a page refused by its origin: apart from failWarned, so that the
	// line naming allowed_origins is not crowded out by failed handshakes
	originWarned atomic.Int64
}

// Listen opens the listener cfg describes.
func Listen(cfg Config) (*Listener, error) {
	if cfg.ProxyProtocol && !canPeek {
		return nil, fmt.Errorf("proxy_protocol: %w on this system (it needs MSG_PEEK)", errors.ErrUnsupported)
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if cfg.MaxMessageSize <= 0 {
		cfg.MaxMessageSize = DefaultMaxMessageSize
	}
	if cfg.MaxHandshakes <= 0 {
		cfg.MaxHandshakes = DefaultMaxHandshakes
	}
	if cfg.MaxHandshakesPerAddress <= 0 {
		cfg.MaxHandshakesPerAddress = DefaultMaxHandshakesPerAddress
	}
	l := &Listener{cfg: cfg, ready: make(chan net.Conn), failed: make(chan error, 1), done: make(chan struct{}),
		handshaking: make(map[net.Conn]struct{}), perAddr: make(map[netip.Addr]int)}
	if cfg.Type == TLS || cfg.Type == WSS {
		cs, err := newCertStore(cfg.TLS)
		if err != nil {
			return nil, err
		}
		l.certs = cs
		l.warnUnchained()
	}
	var err error
	switch cfg.Type {
	case TCP, TLS, WS, WSS:
		// MQTT has its own keepalive: TCP keepalive on every accepted
		// socket would only cost setsockopt calls per connection.
		l.base, err = (&net.ListenConfig{KeepAlive: -1}).Listen(context.Background(), Network(cfg.Address), cfg.Address)
	case Unix:
		l.base, err = listenUnix(cfg.Path, cfg.FileMode)
	default:
		return nil, fmt.Errorf("unknown listener type %q", cfg.Type)
	}
	if err != nil {
		return nil, err
	}
	// A plain TCP or unix connection goes to the engine as it is, which
	// takes its descriptor: it is accepted as a bare socket (direct).
	direct := (cfg.Type == TCP || cfg.Type == Unix) && !cfg.ProxyProtocol
	if direct {
		l.rawFile, l.raw = acceptFile(l.base)
	}
	var inner net.Listener = rawListener{l: l, direct: direct}
	if cfg.ProxyProtocol || cfg.Type == TLS {
		inner = l.staged()
	}
	switch cfg.Type {
	case WS, WSS:
		inner = pendingListener{inner, l}
		if cfg.Type == WSS {
			inner = tls.NewListener(inner, l.certs.outer)
		}
		l.serveWeb(inner)
		l.accept = l.acceptReady
	default:
		l.accept = inner.Accept
	}
	return l, nil
}

// Network is the network to listen on TCP address host:port with: only
// IPv4 for an IPv4 address, as asked (Go's "tcp" makes 0.0.0.0 every IPv6
// address too); "tcp" for an IPv6 address, [::] being both families as
// with Mosquitto, and for a host name, which may resolve to either. The
// broker's HTTP listener binds with it too.
func Network(address string) string {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return "tcp"
	}
	if a, err := netip.ParseAddr(host); err == nil && a.Is4() {
		return "tcp4"
	}
	return "tcp"
}

// Accept returns the next connection ready for MQTT.
func (l *Listener) Accept() (net.Conn, error) { return l.accept() }

// Close stops the listener. Connections already returned stay open.
func (l *Listener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.done)
		err = l.base.Close()
		if l.rawFile != nil {
			l.rawFile.Close() // wakes an Accept waiting on it
		}
		l.mu.Lock()
		l.closed = true
		for c := range l.handshaking {
			c.Close()
		}
		l.mu.Unlock()
		if l.web != nil {
			// Closes the connections still before their upgrade; the
			// upgraded ones were hijacked and belong to the broker.
			l.web.Close()
		}
	})
	return err
}

// Addr returns the listener's address.
func (l *Listener) Addr() net.Addr { return l.base.Addr() }

// Reload reads the certificate, key and client CA files of a TLS or WSS
// listener again; new handshakes use them, open connections keep theirs.
// When a file is missing or bad the listener keeps what it had and the
// error says why. Other listeners have nothing to reload.
func (l *Listener) Reload() error {
	if l.certs == nil {
		return nil
	}
	if err := l.certs.reload(); err != nil {
		return err
	}
	l.warnUnchained()
	return nil
}

// warnUnchained logs a certificate chain the client CA file could not
// complete.
func (l *Listener) warnUnchained() {
	if w := l.certs.unchained; w != "" {
		l.cfg.Logger.Warn().Str("listener", l.cfg.Address).Msg(w)
	}
}

// acceptReady is Accept for listeners whose connections come from
// goroutines (the WebSocket server).
func (l *Listener) acceptReady() (net.Conn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case err := <-l.failed:
		return nil, err
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// hand gives a prepared connection to Accept, or closes it if the
// listener closes first.
func (l *Listener) hand(c net.Conn) {
	select {
	case l.ready <- c:
	case <-l.done:
		c.Close()
	}
}

// rawListener accepts sockets, applying MaxConnections; direct ones as
// bare sockets (acceptConn).
type rawListener struct {
	l      *Listener
	direct bool
}

func (r rawListener) Accept() (net.Conn, error) {
	l := r.l
	for {
		nc, err := l.acceptConn(r.direct)
		if err != nil {
			return nil, err
		}
		if l.cfg.MaxConnections == 0 && !l.cfg.ProxyProtocol {
			return nc, nil
		}
		sc := &sockConn{Conn: nc}
		if l.cfg.MaxConnections > 0 {
			if l.open.Add(1) > int64(l.cfg.MaxConnections) {
				l.open.Add(-1)
				// Counted before the close, which the client may see first.
				l.refuse(RefusedFull, &l.fullWarned).Str("remote", nc.RemoteAddr().String()).Int("max_connections", l.cfg.MaxConnections).
					Msg("connection refused: the listener holds its max_connections (logged at most every 10 s)")
				nc.Close()
				continue
			}
			sc.release = func() { l.open.Add(-1) }
		}
		return sc, nil
	}
}

func (r rawListener) Close() error   { return r.l.base.Close() }
func (r rawListener) Addr() net.Addr { return r.l.base.Addr() }

// staged returns a listener whose Accept returns connections once
// prepare (PROXY header, TLS handshake) has run on them, each in a
// goroutine of its own bounded by HandshakeTimeout.
func (l *Listener) staged() net.Listener {
	s := &stagedListener{l: l, out: make(chan net.Conn), failed: make(chan error, 1)}
	go s.loop()
	return s
}

type stagedListener struct {
	l      *Listener
	out    chan net.Conn
	failed chan error
}

// loop accepts until the listener closes, backing off on temporary
// errors (out of descriptors) rather than spinning.
func (s *stagedListener) loop() {
	l := s.l
	var delay time.Duration
	for {
		nc, err := rawListener{l: l}.Accept()
		if err != nil {
			select {
			case <-l.done:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || isTemporary(err) {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(delay):
				case <-l.done:
					return
				}
				continue
			}
			s.failed <- err
			return
		}
		delay = 0
		a, ok := l.takeHandshake(nc)
		if !ok {
			continue
		}
		l.mu.Lock()
		if l.closed { // accepted as Close ran: it would not see this one
			l.mu.Unlock()
			l.releaseHandshake(a)
			nc.Close()
			return
		}
		l.handshaking[nc] = struct{}{}
		l.mu.Unlock()
		go s.prepare(nc, a)
	}
}

// prepare prepares nc, which holds a handshake slot counted under a.
func (s *stagedListener) prepare(nc net.Conn, a netip.Addr) {
	l := s.l
	defer l.releaseHandshake(a)
	c, err := l.prepare(nc)
	l.mu.Lock()
	delete(l.handshaking, nc)
	l.mu.Unlock()
	if errors.Is(err, errPerAddress) {
		l.refuseSlot(nc, RefusedPerAddress)
		return
	}
	if err != nil {
		l.refuse(RefusedHandshake, &l.failWarned).Err(err).Str("remote", nc.RemoteAddr().String()).
			Msg("connection closed before MQTT (logged at most every 10 s)")
		nc.Close()
		return
	}
	select {
	case s.out <- c:
	case <-l.done:
		c.Close()
	}
}

func (s *stagedListener) Accept() (net.Conn, error) {
	select {
	case c := <-s.out:
		return c, nil
	case err := <-s.failed:
		return nil, err
	case <-s.l.done:
		return nil, net.ErrClosed
	}
}

// Close closes the socket listener. Only the WebSocket server calls it
// (from Listener.Close, on the listener it serves): the broker closes the
// Listener itself.
func (s *stagedListener) Close() error   { return s.l.base.Close() }
func (s *stagedListener) Addr() net.Addr { return s.l.base.Addr() }

// prepare reads the PROXY header and does the TLS handshake a connection
// needs before MQTT, within HandshakeTimeout.
func (l *Listener) prepare(nc net.Conn) (net.Conn, error) {
	deadline := time.Now().Add(l.cfg.HandshakeTimeout)
	nc.SetDeadline(deadline)
	if l.cfg.ProxyProtocol {
		sc := nc.(*sockConn)
		if err := l.readProxy(sc); err != nil {
			return nil, err
		}
		if sc.remote != nil && l.cfg.Type == TLS {
			// The client the header names is bounded for its handshake,
			// the proxy that sent it was not.
			a := l.boundedAddr(sc.remote)
			if !l.takeAddr(a) {
				return nil, errPerAddress
			}
			defer l.releaseAddr(a)
		}
	}
	if l.cfg.Type == TLS {
		tc := tls.Server(newWaitConn(nc), l.certs.outer)
		if err := tc.Handshake(); err != nil {
			return nil, fmt.Errorf("TLS handshake: %w", err)
		}
		nc = &tlsConn{tc}
	}
	nc.SetDeadline(time.Time{})
	return nc, nil
}

func isTemporary(err error) bool {
	t, ok := err.(interface{ Temporary() bool })
	return ok && t.Temporary()
}

// warnInterval rate-limits the warnings a flood of clients would repeat.
const warnInterval = 10 * time.Second

// warn returns a warning event, or nil (which logs nothing) when one of
// its kind, whose time last holds, was logged within warnInterval.
// refuse counts a connection closed before it was handed on and returns
// a warning event, unless one was logged within warnInterval.
func (l *Listener) refuse(reason string, last *atomic.Int64) *zerolog.Event {
	if l.cfg.Refused != nil {
		l.cfg.Refused(reason)
	}
	return l.warn(last)
}

func (l *Listener) warn(last *atomic.Int64) *zerolog.Event {
	now := time.Now().UnixNano()
	prev := last.Load()
	if now-prev < int64(warnInterval) || !last.CompareAndSwap(prev, now) {
		return nil
	}
	return l.cfg.Logger.Warn().Str("listener", l.cfg.Type+":"+l.base.Addr().String())
}

// sockConn is an accepted socket counted against MaxConnections, or whose
// client address came in a PROXY header. It still exposes the socket's
// descriptor, so the engine serves it from its poller.
type sockConn struct {
	net.Conn
	remote  net.Addr // from a PROXY header; nil: the socket's peer
	release func()   // uncounts the connection; nil when not counted
	once    sync.Once
}

// RemoteAddr is the client's address: the PROXY header's when there was one.
func (c *sockConn) RemoteAddr() net.Addr {
	if c.remote != nil {
		return c.remote
	}
	return c.Conn.RemoteAddr()
}

// Close closes the socket and uncounts it, once.
func (c *sockConn) Close() error {
	err := c.Conn.Close()
	if c.release != nil {
		c.once.Do(c.release)
	}
	return err
}

// SyscallConn exposes the socket's descriptor, which the engine's poller
// reads directly: what the wrapper reads (a PROXY header) was read to
// its last byte, so nothing is left buffered here.
func (c *sockConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return sc.SyscallConn()
}

// SetKeepAliveConfig passes TCP keepalive settings on to the socket, which
// the engine uses to find dead peers of clients without an MQTT keepalive.
func (c *sockConn) SetKeepAliveConfig(kc net.KeepAliveConfig) error {
	return setKeepAlive(c.Conn, kc)
}

// setKeepAlive sets TCP keepalive on the socket under nc, if it has one.
func setKeepAlive(nc net.Conn, kc net.KeepAliveConfig) error {
	switch c := nc.(type) {
	case *net.TCPConn:
		return c.SetKeepAliveConfig(kc)
	case *sockConn:
		return setKeepAlive(c.Conn, kc)
	case interface {
		SetKeepAliveConfig(net.KeepAliveConfig) error
	}: // *socket
		return c.SetKeepAliveConfig(kc)
	case interface{ NetConn() net.Conn }: // *tls.Conn, *pendingConn
		return setKeepAlive(c.NetConn(), kc)
	}
	return nil
}
