package listeners_test

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"

	"github.com/gorilla/websocket"

	"mqttd/internal/testutil"
	"mqttd/listeners"
)

// idleConns is how many idle clients BenchmarkIdleConnection opens.
const idleConns = 2000

// heapInUse is the live heap and goroutine stacks after a full GC.
var heapInUse = testutil.HeapInUse

// BenchmarkIdleConnection reports the broker's live heap and stacks per
// idle connection holding one subscription ("broker-B/conn"), for each
// transport. The clients run in a child process (TestIdleClients), so
// only the broker's side is counted.
func BenchmarkIdleConnection(b *testing.B) {
	p := newPKI(b)
	for _, typ := range []string{listeners.TCP, listeners.TLS, listeners.WS, listeners.WSS} {
		b.Run(typ, func(b *testing.B) {
			for range b.N {
				_, addr := startBroker(b, listeners.Config{Type: typ, TLS: p.tlsConfig(false)})
				before := heapInUse()
				stop := idleClients(b, typ, addr, p.File, idleConns)
				b.ReportMetric(float64(heapInUse()-before)/idleConns, "broker-B/conn")
				stop()
			}
		})
	}
}

// idleClients runs n idle clients of typ in a child process
// (TestIdleClients) and returns once they are connected and subscribed;
// stop closes them.
func idleClients(tb testing.TB, typ, addr, caFile string, n int) (stop func()) {
	tb.Helper()
	child := exec.Command(os.Args[0], "-test.run=^TestIdleClients$")
	child.Env = append(os.Environ(), "MQTTD_IDLE_CLIENTS="+typ+" "+addr+" "+caFile+" "+strconv.Itoa(n))
	child.Stderr = os.Stderr
	stdin, _ := child.StdinPipe()
	stdout, _ := child.StdoutPipe()
	if err := child.Start(); err != nil {
		tb.Fatal(err)
	}
	stop = func() {
		stdin.Close()
		child.Wait()
	}
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		stop()
		tb.Fatalf("the clients said %q (%v)", line, err)
	}
	return stop
}

// stackInUse is the goroutine stacks after two full GCs: the first frees
// the stacks of goroutines that ended, the second returns the spans that
// held them.
func stackInUse() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.StackInuse
}

// TestReaderStacksStay4KiB checks that an idle TLS or WebSocket
// connection, whose reader goroutine waits in its read, holds a stack of
// 4 KiB, not 8: Go doubles a stack its deepest path overflowed and keeps
// it while the goroutine waits. A packets.Ack on dispatch's frame (777c205)
// and answers written under crypto/tls's read frames (f2d8938) each took
// SUBSCRIBE's handling past 4 KiB: 4 KB more per idle connection. The
// stacks are counted as they go when the clients close: 8 KiB stacks read
// 8 KiB each, 4 KiB ones less (the runtime keeps some for new goroutines).
// The race detector's goroutines start with larger stacks: hack/test runs
// this test without it too.
func TestReaderStacksStay4KiB(t *testing.T) {
	if listeners.RaceDetector {
		t.Skip("the race detector's goroutines start with larger stacks")
	}
	const conns = 100
	p := newPKI(t)
	for _, typ := range []string{listeners.TLS, listeners.WS, listeners.WSS} {
		t.Run(typ, func(t *testing.T) {
			_, addr := startBroker(t, listeners.Config{Type: typ, TLS: p.tlsConfig(false)})
			base := runtime.NumGoroutine()
			stop := idleClients(t, typ, addr, p.File, conns)
			// Goroutines that served the handshakes and wrote the answers
			// end soon after the clients have them; the broker starts a few
			// of its own with the first connections.
			const slack = 16
			waitFor(t, "one goroutine per connection", func() bool { return runtime.NumGoroutine() <= base+conns+slack })
			held := stackInUse()
			stop()
			waitFor(t, "the connections' goroutines to end", func() bool { return runtime.NumGoroutine() <= base+slack })
			per := (int64(held) - int64(stackInUse())) / conns
			t.Logf("%d bytes of stack per connection", per)
			if per > 6<<10 {
				t.Errorf("%d bytes of goroutine stack per idle %s connection, want 4 KiB (at most 6 KiB)", per, typ)
			}
		})
	}
}

// TestIdleClients is BenchmarkIdleConnection's child process: given
// MQTTD_IDLE_CLIENTS ("type address ca-file count") it opens that many
// clients that CONNECT and SUBSCRIBE, says "ready" and holds them until
// its stdin closes. Otherwise it does nothing.
func TestIdleClients(t *testing.T) {
	spec := os.Getenv("MQTTD_IDLE_CLIENTS")
	if spec == "" {
		t.Skip("run by BenchmarkIdleConnection")
	}
	var typ, addr, ca string
	var n int
	if _, err := fmt.Sscan(spec, &typ, &addr, &ca, &n); err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(ca)
	if err != nil {
		t.Fatal(err)
	}
	tc := &tls.Config{RootCAs: x509Pool(t, pem)}
	var keep []io.Closer
	for i := range n {
		c := dialIdle(t, typ, addr, tc, i)
		keep = append(keep, c)
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	for _, c := range keep {
		c.Close()
	}
}

// dialIdle opens a client over typ that CONNECTs and SUBSCRIBEs to a
// topic of its own, and reads the answers.
func dialIdle(t *testing.T, typ, addr string, tc *tls.Config, i int) io.Closer {
	t.Helper()
	id := fmt.Sprintf("idle-%06d", i)
	connect := append([]byte{0x10, byte(12 + len(id)), 0, 4, 'M', 'Q', 'T', 'T', 4, 2, 0, 60, 0, byte(len(id))}, id...)
	topic := "dev/" + id
	subscribe := append([]byte{0x82, byte(5 + len(topic)), 0, 1, 0, byte(len(topic))}, topic...)
	subscribe = append(subscribe, 1)
	out := append(connect, subscribe...)
	answer := make([]byte, 4+5) // CONNACK and a one-filter SUBACK
	switch typ {
	case listeners.WS, listeners.WSS:
		d := websocket.Dialer{Subprotocols: []string{"mqtt"}, TLSClientConfig: tc}
		ws, _, err := d.Dial(typ+"://"+addr+"/mqtt", nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := ws.WriteMessage(websocket.BinaryMessage, out); err != nil {
			t.Fatal(err)
		}
		for got := 0; got < len(answer); {
			_, b, err := ws.ReadMessage()
			if err != nil {
				t.Fatal(err)
			}
			got += len(b)
		}
		return ws
	}
	var nc net.Conn
	var err error
	if typ == listeners.TLS {
		nc, err = tls.Dial("tcp", addr, tc)
	} else {
		nc, err = net.Dial("tcp", addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Write(out); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(nc, answer); err != nil {
		t.Fatal(err)
	}
	return nc
}
