package main

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Bounds of the metrics address's HTTP server: what a client that opens
// connections and holds them can make it keep. Each connection costs a
// descriptor, a goroutine and its buffers, outside limits.max_connections.
const (
	// defaultHTTPMaxConnections is metrics.max_connections' default:
	// scrapers, probes and an operator's curl need a few.
	defaultHTTPMaxConnections = 64
	// defaultHTTPIdleTimeout is metrics.idle_timeout's default, longer than
	// a Prometheus scrape interval so that a scraper keeps its connection.
	defaultHTTPIdleTimeout = 60 * time.Second
	// httpReadTimeout bounds reading a request: they are GETs.
	httpReadTimeout = 10 * time.Second
	// httpWriteTimeout bounds writing a response, and so the time a client
	// that does not read holds a connection. pprof's profile and trace
	// sample for ?seconds= before they write: they refuse (400) a duration
	// of this or more.
	httpWriteTimeout = 2 * time.Minute
)

// validate checks the metrics block's bounds.
func (mc metricsConfig) validate() error {
	if mc.MaxConnections < 0 {
		return fmt.Errorf("metrics.max_connections: %d: want a number of connections (0: %d)", mc.MaxConnections, defaultHTTPMaxConnections)
	}
	if mc.IdleTimeout < 0 {
		return fmt.Errorf("metrics.idle_timeout: %s: want a duration (0: %s)", mc.IdleTimeout, defaultHTTPIdleTimeout)
	}
	if (mc.TLS.CertFile == "") != (mc.TLS.KeyFile == "") {
		return errors.New("metrics.tls: cert_file and key_file go together (--metrics-tls-cert, --metrics-tls-key)")
	}
	return nil
}

// limitListener closes the connections accepted while max are open, so
// that held connections cannot take the process's descriptors and memory.
type limitListener struct {
	net.Listener
	max     int64
	open    atomic.Int64
	refused prometheus.Counter
	log     zerolog.Logger
	warned  atomic.Int64 // when the last refusal was logged, unix nanoseconds
}

// newLimitListener wraps l and registers its metrics with reg.
func newLimitListener(l net.Listener, max int, reg prometheus.Registerer, log zerolog.Logger) *limitListener {
	ll := &limitListener{Listener: l, max: int64(max), log: log}
	ll.refused = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "mqttd_http_connections_refused_total",
		Help: "Connections to the metrics address closed at accept: metrics.max_connections were open.",
	})
	open := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "mqttd_http_connections",
		Help: "Open connections to the metrics address.",
	}, func() float64 { return float64(ll.open.Load()) })
	reg.MustRegister(ll.refused, open)
	return ll
}

// Accept returns the next connection while fewer than max are open,
// closing those that come meanwhile.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) <= l.max {
			return &limitConn{Conn: c, l: l}, nil
		}
		l.open.Add(-1)
		// Counted before the close, which a client may see and then
		// read the counter.
		l.refused.Inc()
		c.Close()
		l.warn(c.RemoteAddr())
	}
}

// warn logs a refusal, at most every 10 s.
func (l *limitListener) warn(from net.Addr) {
	now := time.Now().UnixNano()
	last := l.warned.Load()
	if now-last < int64(10*time.Second) || !l.warned.CompareAndSwap(last, now) {
		return
	}
	l.log.Warn().Stringer("remote", from).Int64("max_connections", l.max).
		Msg("metrics address connection closed: metrics.max_connections are open (logged at most every 10 s; mqttd_http_connections_refused_total counts them all)")
}

// limitConn gives its place back when closed, once.
type limitConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}
