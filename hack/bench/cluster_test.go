package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"mqttd"
	"mqttd/cluster"
	"mqttd/internal/natstest"
	"mqttd/internal/testutil"
)

// startNodes starts an mqttd node of one cluster on each of the NATS
// servers at urls and returns their MQTT addresses once every node has
// joined.
func startNodes(t *testing.T, urls []string, replicas int) []string {
	t.Helper()
	addrs := make([]string, len(urls))
	for i := range urls {
		srv, err := mqttd.New(mqttd.Options{Cluster: &cluster.Config{
			Name: "bench", NodeName: fmt.Sprintf("node%d", i+1), Replicas: replicas, NATS: cluster.NATSConfig{URL: urls[i]},
		}})
		if err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.AddListener("bench", l); err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() { served <- srv.Serve() }()
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := srv.Shutdown(ctx); err != nil {
				t.Errorf("node %d: Shutdown: %v", i+1, err)
			}
			<-served
		})
		// Until its replicated store is ready a node refuses clients.
		// JetStream elects its leaders first: over slowCluster's delayed
		// routes on a loaded machine, past WaitFor's 10 s.
		testutil.WaitWithin(t, time.Minute, "the node to join its cluster", func() bool {
			st, ok := srv.Cluster()
			return ok && st.Connected && st.StoreReady
		})
		addrs[i] = l.Addr().String()
	}
	return addrs
}

// TestFlowsAcrossNodes runs the flows with publishers and subscribers on
// different nodes of a cluster, which learns of a subscription after its
// SUBACK: every message arrives, because the run waits for the probes,
// and the probes themselves are not counted.
func TestFlowsAcrossNodes(t *testing.T) {
	nodes := startNodes(t, natstest.Cluster(t, 3), 0)
	pid := fmt.Sprint(os.Getpid())
	for _, args := range [][]string{
		{"-scenario", "fanin", "-pubs", "2", "-msgs", "100", "-pubaddr", nodes[0] + "," + nodes[1], "-subaddr", nodes[2]},
		{"-scenario", "fanout", "-subs", "6", "-msgs", "200", "-pubaddr", nodes[0], "-subaddr", nodes[1] + "," + nodes[2]},
		{"-scenario", "qos1", "-msgs", "2000", "-pubaddr", nodes[0], "-subaddr", nodes[1], "-pid", pid + "," + pid},
	} {
		t.Run(args[1], func(t *testing.T) {
			lines := runBench(t, append(args, "-timeout", "20s", "-idle", "1s")...)
			if len(lines) != 1 {
				t.Fatalf("%d result lines, want 1", len(lines))
			}
			m := lines[0]
			checkDelivery(t, m, number(t, m, "msgs")*number(t, m, "subs"))
			if slices.Contains(args, "-pid") {
				c := number(t, m, "cpu_us_per_msg")
				if c < 0 {
					t.Errorf("cpu_us_per_msg=%v", c)
				}
				// The pid given twice: the busiest of the two is one share
				// of the sum.
				if b := number(t, m, "busiest_cpu_us_per_msg"); b <= 0 || b >= c {
					t.Errorf("busiest_cpu_us_per_msg=%v, want in (0, %v)", b, c)
				}
			}
		})
	}
}

// TestFlowWaitsForInterest: with the nodes' NATS servers 100 ms apart, a
// subscription reaches the publishers' node 100 ms after its SUBACK, so a
// flow that did not wait for its probes would lose every message.
func TestFlowWaitsForInterest(t *testing.T) {
	nodes := startNodes(t, slowCluster(t, 100*time.Millisecond), 1)
	lines := runBench(t, "-scenario", "fanin", "-pubs", "2", "-msgs", "100", "-pubaddr", nodes[0], "-subaddr", nodes[1],
		"-timeout", "20s", "-idle", "1s")
	checkDelivery(t, lines[0], 200)
}

// slowCluster starts two nats-servers, with JetStream, whose routes pass
// through proxies that hold everything they forward for delay, and
// returns their client URLs.
func slowCluster(t *testing.T, delay time.Duration) []string {
	t.Helper()
	dir := t.TempDir()
	var servers []*server.Server
	t.Cleanup(func() {
		for _, srv := range servers {
			srv.Shutdown()
			srv.WaitForShutdown()
		}
	})
	// JetStream's servers must know their routes from the start: the
	// ports are picked first, and each server's route goes through a
	// proxy to the other.
	ports := []int{testutil.FreePort(t), testutil.FreePort(t)}
	var urls []string
	for i := range 2 {
		opts := &server.Options{ServerName: fmt.Sprintf("slow-%d", i), Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
			JetStream: true, StoreDir: filepath.Join(dir, fmt.Sprint(i))}
		opts.Cluster.Name = "slow"
		opts.Cluster.Host = "127.0.0.1"
		opts.Cluster.Port = ports[i]
		opts.Cluster.NoAdvertise = true
		opts.Routes = []*url.URL{{Scheme: "nats-route", Host: delayProxy(t, fmt.Sprintf("127.0.0.1:%d", ports[1-i]), delay)}}
		srv, err := server.NewServer(opts)
		if err != nil {
			t.Fatal(err)
		}
		srv.Start()
		servers = append(servers, srv)
	}
	for i, srv := range servers {
		if !srv.ReadyForConnections(10 * time.Second) {
			t.Fatalf("nats-server %d not ready", i)
		}
		urls = append(urls, srv.ClientURL())
	}
	natstest.WaitMeshed(t, servers...)
	return urls
}

// delayProxy forwards the connections it accepts to target, each chunk
// read in either direction written delay after it was read, and returns
// its address. It stops at the test's end.
func delayProxy(t *testing.T, target string, delay time.Duration) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			wg.Go(func() { delayCopy(out, in, delay) })
			wg.Go(func() { delayCopy(in, out, delay) })
		}
	})
	return l.Addr().String()
}

// delayCopy copies src to dst, each chunk delay after it was read, until
// either fails; then it closes both.
func delayCopy(dst, src net.Conn, delay time.Duration) {
	type chunk struct {
		due time.Time
		b   []byte
	}
	ch := make(chan chunk, 4096)
	go func() {
		defer close(ch)
		buf := make([]byte, 64<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				ch <- chunk{time.Now().Add(delay), append([]byte(nil), buf[:n]...)}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range ch {
		// The route's latency, not a wait for an event.
		<-time.After(time.Until(c.due))
		if _, err := dst.Write(c.b); err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
}

func TestAddrFlags(t *testing.T) {
	c, err := parseArgs([]string{"-addr", "127.0.0.1:1", "-pubaddr", "127.0.0.1:2,127.0.0.1:3", "-pid", "7,8"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.cfg
	if got := []string{cfg.pubAddr(0), cfg.pubAddr(1), cfg.pubAddr(2), cfg.subAddr(0), cfg.subAddr(5)}; strings.Join(got, " ") !=
		"127.0.0.1:2 127.0.0.1:3 127.0.0.1:2 127.0.0.1:1 127.0.0.1:1" {
		t.Errorf("publishers and subscribers dial %q", got)
	}
	if !cfg.spansNodes() {
		t.Error("publishers on two addresses, subscribers on a third: spansNodes false")
	}
	if cfg.pid != 7 || len(cfg.pids) != 2 || cfg.pids[1] != 8 {
		t.Errorf("-pid 7,8 gave pid %d, pids %v", cfg.pid, cfg.pids)
	}
	for _, args := range [][]string{
		{"-addr", "127.0.0.1:1"},
		{"-addr", "127.0.0.1:1", "-pubaddr", "127.0.0.1:1", "-subaddr", "127.0.0.1:1"},
	} {
		c, err := parseArgs(args, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		if c.cfg.spansNodes() {
			t.Errorf("%q: spansNodes true for one broker", args)
		}
	}
	for _, args := range [][]string{
		{"-pubaddr", "127.0.0.1"},
		{"-subaddr", "127.0.0.1:1,"},
		{"-pid", "1,x"},
		{"-pid", "0"},
		{"-scenario", "conns", "-pid", "1,2"},
		{"-scenario", "device", "-subaddr", "127.0.0.1:1"},
		{"-scenario", "bridge", "-remote", "127.0.0.1:2", "-pubaddr", "127.0.0.1:1"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 2 {
			t.Errorf("run(%q) exited %d, want 2", args, code)
		}
	}
}

// TestLateProbeNotCounted: a probe that arrives once the flow runs is
// acknowledged as any PUBLISH is, but not counted as a delivery.
func TestLateProbeNotCounted(t *testing.T) {
	c, broker := socketClient(t)
	s := &subscriber{c: c, start: time.Now()}
	done := make(chan struct{})
	go func() {
		s.run()
		close(done)
	}()
	q1 := newPublishTemplate("t", 1, 8)
	probe := appendProbe(nil, "t", 0)
	// The QoS 1 PUBLISH's PUBACK shows the probe before it was read.
	exchange(t, broker, append(probe, q1.appendFrame(nil, 3, 0)...), []byte{0x40, 2, 0, 3})
	s.stop()
	<-done
	if s.err != nil {
		t.Fatal(s.err)
	}
	if n := s.count.Load(); n != 1 {
		t.Errorf("counted %d messages, want 1 (the probe is not one)", n)
	}
}
