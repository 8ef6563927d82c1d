package mqttd_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"mqttd"
	"mqttd/internal/testutil"
	"mqttd/listeners"
	"mqttd/packets"
)

// waitFor polls cond until it holds, failing the test after 10 s.
var waitFor = testutil.WaitFor

// hideSocket wraps accepted connections so that they no longer expose
// their descriptor: the engine then serves them with a reader goroutine,
// as it does TLS and WebSocket connections.
func hideSocket(l net.Listener) net.Listener { return hidingListener{l} }

type hidingListener struct{ net.Listener }

func (l hidingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return hiddenConn{c}, nil
}

// hiddenConn is a TCP connection that hides its descriptor but, as TLS
// and WebSocket connections do, can still end its sending side.
type hiddenConn struct{ net.Conn }

func (c hiddenConn) CloseWrite() error {
	if tc, ok := c.Conn.(*net.TCPConn); ok {
		return tc.CloseWrite()
	}
	return nil
}

// serverOption changes how startBroker serves its broker.
type serverOption func(*serverConfig)

type serverConfig struct {
	wrap func(net.Listener) net.Listener
	pipe bool
}

// wrapListener has the broker accept through wrap(the TCP listener).
func wrapListener(wrap func(net.Listener) net.Listener) serverOption {
	return func(c *serverConfig) {
		if prev := c.wrap; prev != nil {
			c.wrap = func(l net.Listener) net.Listener { return wrap(prev(l)) }
			return
		}
		c.wrap = wrap
	}
}

// overPipe serves the broker on a pipeListener instead of TCP: a client
// that reads nothing then holds everything written to it, with no kernel
// buffer in between.
func overPipe() serverOption { return func(c *serverConfig) { c.pipe = true } }

// broker is a served broker the test may stop before its end (to start
// another on the same data dir, say); it is stopped at the end otherwise.
type broker struct {
	t      *testing.T
	srv    *mqttd.Server
	addr   string        // the TCP address to dial; empty over a pipe
	pipe   *pipeListener // set by overPipe
	served chan error
}

// startBroker runs a broker for the test on 127.0.0.1:0, or on a pipe.
func startBroker(t *testing.T, opts mqttd.Options, on ...serverOption) *broker {
	t.Helper()
	var cfg serverConfig
	for _, o := range on {
		o(&cfg)
	}
	srv, err := mqttd.New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	b := &broker{t: t, srv: srv, served: make(chan error, 1)}
	var l net.Listener
	if cfg.pipe {
		b.pipe = newPipeListener()
		l = b.pipe
	} else {
		if l, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		b.addr = l.Addr().String()
	}
	if cfg.wrap != nil {
		l = cfg.wrap(l)
	}
	if err := srv.AddListener("test", l); err != nil {
		t.Fatal(err)
	}
	go func() { b.served <- srv.Serve() }()
	t.Cleanup(b.stop)
	return b
}

// stop shuts the broker down; a second call does nothing.
func (b *broker) stop() {
	b.t.Helper()
	if b.srv == nil {
		return
	}
	// Shutdown closes the store, which first applies its log to bbolt:
	// tens of thousands of queued entries take seconds under the race
	// detector on a busy machine.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.srv.Shutdown(ctx); err != nil {
		b.t.Errorf("Shutdown: %v", err)
	}
	if err := <-b.served; !errors.Is(err, mqttd.ErrServerClosed) {
		b.t.Errorf("Serve returned %v", err)
	}
	b.srv = nil
}

// startServer runs a broker on 127.0.0.1:0 for the test and returns its address.
func startServer(t *testing.T, opts mqttd.Options, on ...serverOption) (*mqttd.Server, string) {
	t.Helper()
	b := startBroker(t, opts, on...)
	return b.srv, b.addr
}

// startPipeServer runs a broker whose clients connect through a
// pipeListener (see overPipe).
func startPipeServer(t *testing.T, opts mqttd.Options) (*mqttd.Server, *pipeListener) {
	t.Helper()
	b := startBroker(t, opts, overPipe())
	return b.srv, b.pipe
}

// bothReaders runs fn against the poller's reader and against a reader
// goroutine (the one TLS and WebSocket connections get): fn passes on to
// its starters.
func bothReaders(t *testing.T, fn func(t *testing.T, on ...serverOption)) {
	t.Helper()
	t.Run("poller", func(t *testing.T) { fn(t) })
	t.Run("goroutine", func(t *testing.T) { fn(t, wrapListener(hideSocket)) })
}

// checkGoroutines fails if goroutines started by the test outlive it. The
// poll is fine because the server's last goroutines are usually gone
// within microseconds of Shutdown, and FuzzConnection checks every
// iteration.
func checkGoroutines(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.After(10 * time.Second)
		tick := time.NewTicker(100 * time.Microsecond)
		defer tick.Stop()
		for runtime.NumGoroutine() > before {
			select {
			case <-deadline:
				buf := make([]byte, 1<<20)
				t.Errorf("goroutines leaked: %d before, %d after\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
				return
			case <-tick.C:
			}
		}
	})
}

// pipeListener hands the server in-memory connections (net.Pipe): writes
// block until the other end reads, which makes a client that never reads
// easy to build.
type pipeListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

func (l *pipeListener) dial(t *testing.T) *rawConn {
	t.Helper()
	a, b := net.Pipe()
	l.ch <- b
	t.Cleanup(func() { a.Close() })
	return &rawConn{t: t, nc: a, br: bufio.NewReader(a), v: packets.V311}
}

// fromListener reports every accepted connection as coming from the
// address its from field holds at accept time, as if clients connected
// from other machines, so the per-address limit can be tested over
// loopback. Connections keep working, read by goroutines.
type fromListener struct {
	net.Listener
	from chan net.Addr
}

func (l fromListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return fromConn{c, <-l.from}, nil
}

type fromConn struct {
	net.Conn
	remote net.Addr
}

func (c fromConn) RemoteAddr() net.Addr { return c.remote }

// fromChan has the broker accept through a fromListener reading from.
func fromChan(from chan net.Addr) serverOption {
	return wrapListener(func(l net.Listener) net.Listener { return fromListener{l, from} })
}

// relayListener hands the broker the server side of a TLS or WebSocket
// connection for each plain connection the test's clients make; a
// client of that transport relays the bytes both ways.
type relayListener struct {
	net.Listener // the plain one the clients dial
	inner        *listeners.Listener
	dial         func() (net.Conn, error)
}

// Accept relays the next plain connection through a new client of the
// transport and returns the server side of that client's connection.
func (r *relayListener) Accept() (net.Conn, error) {
	pc, err := r.Listener.Accept()
	if err != nil {
		return nil, err
	}
	cc, err := r.dial()
	if err != nil {
		pc.Close()
		return nil, err
	}
	sc, err := r.inner.Accept()
	if err != nil {
		pc.Close()
		cc.Close()
		return nil, err
	}
	go relay(pc, cc)
	go relay(cc, pc)
	return sc, nil
}

// Close closes both listeners.
func (r *relayListener) Close() error {
	return errors.Join(r.inner.Close(), r.Listener.Close())
}

func newRelayListener(t *testing.T, plain net.Listener, cfg listeners.Config, tc *tls.Config) *relayListener {
	t.Helper()
	inner, err := listeners.Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	addr := inner.Addr().String()
	r := &relayListener{Listener: plain, inner: inner}
	if cfg.Type == listeners.TLS {
		r.dial = func() (net.Conn, error) { return tls.Dial("tcp", addr, tc) }
	} else {
		r.dial = func() (net.Conn, error) {
			ws, _, err := (&websocket.Dialer{Subprotocols: []string{"mqtt"}}).Dial("ws://"+addr+"/mqtt", nil)
			if err != nil {
				return nil, err
			}
			return &wsClient{ws: ws}, nil
		}
	}
	return r
}

// relay copies src to dst until either ends, then closes both, so a
// close on one side reaches the other.
func relay(dst, src net.Conn) {
	io.Copy(dst, src)
	dst.Close()
	src.Close()
}

// wsClient is a WebSocket client as a byte stream: each Write is one
// binary message, Read reads the messages one after another.
type wsClient struct {
	ws *websocket.Conn
	r  io.Reader
}

func (c *wsClient) Read(b []byte) (int, error) {
	for {
		if c.r == nil {
			_, r, err := c.ws.NextReader()
			if err != nil {
				return 0, err
			}
			c.r = r
		}
		n, err := c.r.Read(b)
		if errors.Is(err, io.EOF) {
			c.r = nil
			if n == 0 {
				continue
			}
			err = nil
		}
		return n, err
	}
}

func (c *wsClient) Write(b []byte) (int, error) {
	if err := c.ws.WriteMessage(websocket.BinaryMessage, b); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (c *wsClient) Close() error { return c.ws.Close() }

func (c *wsClient) LocalAddr() net.Addr { return c.ws.LocalAddr() }

func (c *wsClient) RemoteAddr() net.Addr { return c.ws.RemoteAddr() }

func (c *wsClient) SetDeadline(t time.Time) error { return c.ws.NetConn().SetDeadline(t) }

func (c *wsClient) SetReadDeadline(t time.Time) error { return c.ws.SetReadDeadline(t) }

func (c *wsClient) SetWriteDeadline(t time.Time) error { return c.ws.SetWriteDeadline(t) }

// listenAll starts a broker on the listeners of opts through Listen.
func listenAll(t *testing.T, opts mqttd.Options) *mqttd.Server {
	t.Helper()
	srv, err := mqttd.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	serveForTest(t, srv)
	return srv
}

// serveForTest serves srv until the test ends, then shuts it down and
// checks that Serve returned for that.
func serveForTest(t *testing.T, srv *mqttd.Server) {
	t.Helper()
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, mqttd.ErrServerClosed) {
			t.Errorf("Serve returned %v", err)
		}
	})
}

// writeServerCert writes a self-signed certificate for 127.0.0.1, which
// clients take as their CA, and its key.
func writeServerCert(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	testutil.WriteSelfSigned(t, certFile, keyFile, "127.0.0.1")
	return certFile, keyFile
}

// certPool is a pool of the certificates in the PEM file cert: a
// client's CA for writeServerCert's.
var certPool = testutil.CertPool

// dialIdle opens a connection that CONNECTs and SUBSCRIBEs, reads the
// answers into a stack buffer and then stays idle with no goroutine.
func dialIdle(b *testing.B, addr string, i int) net.Conn {
	b.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	out, _ := (&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V311, CleanStart: true,
		KeepAlive: 60, ClientID: fmt.Sprintf("idle-%06d", i)}).Append(nil, packets.V311)
	out, _ = (&packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{
		{Filter: fmt.Sprintf("dev/%06d/cmd", i), Options: packets.SubOptions{QoS: 1}}}}).Append(out, packets.V311)
	if _, err := nc.Write(out); err != nil {
		b.Fatal(err)
	}
	var in [4 + 5]byte // CONNACK and a one-filter SUBACK
	if _, err := io.ReadFull(nc, in[:]); err != nil {
		b.Fatal(err)
	}
	return nc
}

// lockedBuffer collects output written from other goroutines while the
// test reads it.
type lockedBuffer = testutil.LockedBuffer

// logLines collects a broker's JSON log lines.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// find returns the lines whose message is msg.
func (l *logLines) find(msg string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(l.buf.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["message"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// metricValue reads one metric's value (summed over labels) from a registry.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// histogramOf scrapes the histogram name from reg: its count, its sum
// and its cumulative counts by upper bound.
func histogramOf(t *testing.T, reg *prometheus.Registry, name string) (count uint64, sum float64, buckets map[float64]uint64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) != 1 {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		buckets = make(map[float64]uint64)
		for _, b := range h.GetBucket() {
			buckets[b.GetUpperBound()] = b.GetCumulativeCount()
		}
		return h.GetSampleCount(), h.GetSampleSum(), buckets
	}
	t.Fatalf("no histogram %s", name)
	return 0, 0, nil
}

// heapInUse is the live heap and stacks after collecting garbage.
var heapInUse = testutil.HeapInUse

// needTool returns the path of a Debian-packaged client, skipping outside
// CI when it is absent; CI installs it (.ci/run), so there it must exist.
func needTool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s missing in CI: .ci/run must install mosquitto-clients", name)
		}
		t.Skipf("%s not installed (apt-get install mosquitto-clients)", name)
	}
	return path
}
