package mqttd_test

import (
	"context"
	"net"
	"testing"
	"time"

	"mqttd"
)

// idleConns is how many connections the memory benchmark holds open.
const idleConns = 5000

// BenchmarkIdleConnection reports the broker's live heap and stack per
// idle connection holding one subscription ("broker-B/conn"). The
// client ends are in the same process, so the cost of a plain accepted
// TCP connection pair is measured first and the client half subtracted.
func BenchmarkIdleConnection(b *testing.B) {
	for range b.N {
		plain := plainPairCost(b)
		srv, err := mqttd.New(mqttd.Options{})
		if err != nil {
			b.Fatal(err)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		srv.AddListener("bench", l)
		go srv.Serve()
		before := heapInUse()
		conns := make([]net.Conn, idleConns)
		for i := range conns {
			conns[i] = dialIdle(b, l.Addr().String(), i)
		}
		after := heapInUse()
		total := float64(after-before) / idleConns
		b.ReportMetric(total-plain/2, "broker-B/conn")
		for _, c := range conns {
			c.Close()
		}
		shutdown(b, srv)
	}
}

// plainPairCost is the heap per TCP connection pair, both ends in this
// process and no broker involved.
func plainPairCost(b *testing.B) float64 {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, idleConns)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	before := heapInUse()
	pairs := make([]net.Conn, 0, 2*idleConns)
	for range idleConns {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		pairs = append(pairs, c, <-accepted)
	}
	cost := float64(heapInUse()-before) / idleConns
	for _, c := range pairs {
		c.Close()
	}
	return cost
}

func shutdown(b *testing.B, srv *mqttd.Server) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		b.Fatal(err)
	}
}
