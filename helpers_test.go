package mqttd_test

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"mqttd"
	"mqttd/internal/testutil"
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
	return struct{ net.Conn }{c}, nil
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
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

// pahoConnect connects a paho 3.1.1 client; tune adjusts its options.
func pahoConnect(t *testing.T, addr, id string, tune func(*paho.ClientOptions)) paho.Client {
	t.Helper()
	o := paho.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(id).
		SetAutoReconnect(false).SetConnectRetry(false).SetProtocolVersion(4).
		SetOrderMatters(false)
	if tune != nil {
		tune(o)
	}
	c := paho.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("paho connect %s: %v", id, tok.Error())
	}
	t.Cleanup(func() {
		if c.IsConnectionOpen() {
			c.Disconnect(100)
		}
	})
	return c
}

// wait waits for a paho token and fails the test on error or timeout.
func wait(t *testing.T, tok paho.Token) {
	t.Helper()
	if !tok.WaitTimeout(10 * time.Second) {
		t.Fatal("paho token timed out")
	}
	if err := tok.Error(); err != nil {
		t.Fatal(err)
	}
}

// rawConn is a bare MQTT connection for tests that send exact bytes.
type rawConn struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
	v  packets.Version
	// wait is how long a read waits for a packet; 0 means 10 s.
	wait time.Duration
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, nc: nc, br: bufio.NewReader(nc), v: packets.V311}
}

// connectRaw dials and completes a 3.1.1 CONNECT with the given options.
func connectRaw(t *testing.T, addr string, cp *packets.Connect) *rawConn {
	t.Helper()
	rc := dialRaw(t, addr)
	if cp.ProtocolVersion == 0 {
		cp.ProtocolName, cp.ProtocolVersion = "MQTT", packets.V311
	}
	rc.v = cp.ProtocolVersion
	rc.send(cp)
	ack, ok := rc.read().(*packets.Connack)
	if !ok || ack.ReasonCode != 0 {
		t.Fatalf("CONNACK: %+v", ack)
	}
	return rc
}

func (rc *rawConn) send(p packets.Packet) {
	rc.t.Helper()
	b, err := p.Append(nil, rc.v)
	if err != nil {
		rc.t.Fatal(err)
	}
	rc.write(b)
}

func (rc *rawConn) write(b []byte) {
	rc.t.Helper()
	if _, err := rc.nc.Write(b); err != nil {
		rc.t.Fatal(err)
	}
}

// read reads the next packet, failing the test if none comes in time.
func (rc *rawConn) read() packets.Packet {
	rc.t.Helper()
	p, err := rc.tryRead()
	if err != nil {
		rc.t.Fatalf("read: %v", err)
	}
	return p
}

func (rc *rawConn) tryRead() (packets.Packet, error) {
	rc.nc.SetReadDeadline(time.Now().Add(cmp.Or(rc.wait, 10*time.Second)))
	return packets.ReadPacket(rc.br, rc.v, 0)
}

// expectClosed waits for the server to close the connection, failing if
// a packet arrives instead.
func (rc *rawConn) expectClosed() {
	rc.t.Helper()
	for {
		p, err := rc.tryRead()
		if err == nil {
			if _, ok := p.(*packets.Disconnect); ok && rc.v == packets.V5 {
				continue // 5.0 says why before closing
			}
			rc.t.Fatalf("got %T %+v, want the connection closed", p, p)
		}
		if isTimeoutErr(err) {
			rc.t.Fatal("connection still open")
		}
		return
	}
}

// ping sends PINGREQ and reads up to the PINGRESP, returning what came
// before it: a barrier proving everything the server sent earlier arrived.
func (rc *rawConn) ping() []packets.Packet {
	rc.t.Helper()
	rc.send(&packets.Pingreq{})
	var before []packets.Packet
	for {
		p := rc.read()
		if _, ok := p.(*packets.Pingresp); ok {
			return before
		}
		before = append(before, p)
	}
}

func isTimeoutErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
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
