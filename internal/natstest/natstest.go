// Package natstest starts nats-servers for tests: a cluster of n servers
// in the test's process, routed to each other on 127.0.0.1, with
// JetStream (files in the test's temporary directories), stopped at the
// test's end. Only tests import it (it links the whole nats-server).
package natstest

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ClusterName is the NATS cluster name of the servers Start starts.
const ClusterName = "natstest"

// readyTimeout bounds the wait for a server to accept clients, for the
// routes to mesh and for JetStream's meta leader: seconds, but more on a
// machine loaded with other tests' builds.
const readyTimeout = time.Minute

// Servers are the nats-servers of one test cluster.
type Servers struct {
	t       testing.TB
	servers []*server.Server
	urls    []string
}

// Cluster starts n nats-servers clustered over routes on 127.0.0.1 (ports
// picked by the system), waits until every one has a route to every
// other, and returns their client URLs. They stop at the test's cleanup.
func Cluster(t testing.TB, n int) []string {
	t.Helper()
	return Start(t, n).URLs()
}

// Start is Cluster returning the Servers, for tests that stop one.
func Start(t testing.TB, n int) *Servers {
	t.Helper()
	if n < 1 {
		t.Fatalf("natstest: a cluster of %d servers", n)
	}
	s := &Servers{t: t}
	// Made before the servers' cleanup is registered, so removed after
	// the servers stop writing to it.
	dir := t.TempDir()
	t.Cleanup(s.shutdownAll)
	// A JetStream cluster needs every server's routes configured from
	// the start: the route ports are picked before any server starts.
	routes := make([]*url.URL, n)
	for i := range routes {
		routes[i] = &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", FreePort(t))}
	}
	for i := range n {
		opts := &server.Options{
			ServerName: fmt.Sprintf("natstest-%d", i),
			Host:       "127.0.0.1",
			Port:       server.RANDOM_PORT,
			NoLog:      true,
			NoSigs:     true,
			JetStream:  true,
			StoreDir:   filepath.Join(dir, strconv.Itoa(i)),
		}
		if n > 1 {
			opts.Cluster.Name = ClusterName
			opts.Cluster.Host = "127.0.0.1"
			opts.Cluster.Port, _ = strconv.Atoi(routes[i].Port())
			opts.Routes = routes
		}
		srv, err := server.NewServer(opts)
		if err != nil {
			t.Fatalf("natstest: server %d: %v", i, err)
		}
		srv.Start()
		s.servers = append(s.servers, srv)
	}
	for i, srv := range s.servers {
		if !srv.ReadyForConnections(readyTimeout) {
			t.Fatalf("natstest: server %d not ready within %v", i, readyTimeout)
		}
		s.urls = append(s.urls, srv.ClientURL())
	}
	WaitMeshed(t, s.servers...)
	s.waitJetStream()
	return s
}

// waitJetStream waits until JetStream serves: a meta leader elected
// among the servers of a cluster that counts every server as a peer
// ready for streams (until then, a stream with a replica on each fails).
func (s *Servers) waitJetStream() {
	s.t.Helper()
	if len(s.servers) == 1 {
		return
	}
	deadline := time.Now().Add(readyTimeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, srv := range s.servers {
			if srv.JetStreamIsLeader() && len(srv.JetStreamClusterPeers()) == len(s.servers) {
				return
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("natstest: no JetStream meta leader within %v", readyTimeout)
		}
		<-tick.C
	}
}

// FreePort returns a TCP port of 127.0.0.1 free a moment ago, for a
// server that must know its peers' ports before they start.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// URLs are the servers' client URLs, in order.
func (s *Servers) URLs() []string { return append([]string(nil), s.urls...) }

// Server is server i, for what a test wants to ask it.
func (s *Servers) Server(i int) *server.Server { return s.servers[i] }

// Shutdown stops server i, as a node of a cluster fails, and waits until
// it has stopped and the other running servers have closed their routes
// to it, and so forgotten the interest it had routed to them (until then
// they may still send it messages, which are lost). Its clients
// reconnect to the others.
func (s *Servers) Shutdown(i int) {
	s.t.Helper()
	dead := s.servers[i]
	id := dead.ID()
	dead.Shutdown()
	dead.WaitForShutdown()
	deadline := time.Now().Add(readyTimeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for _, srv := range s.servers {
		for srv.Running() && routesTo(srv, id) > 0 {
			if time.Now().After(deadline) {
				s.t.Fatalf("natstest: %s still routed to the stopped %s after %v", srv.Name(), dead.Name(), readyTimeout)
			}
			<-tick.C
		}
	}
}

// routesTo counts srv's route connections to the server of id.
func routesTo(srv *server.Server, id string) int {
	rz, err := srv.Routez(nil)
	if err != nil {
		return 0
	}
	n := 0
	for _, r := range rz.Routes {
		if r.RemoteID == id {
			n++
		}
	}
	return n
}

func (s *Servers) shutdownAll() {
	for _, srv := range s.servers {
		srv.Shutdown()
	}
	for _, srv := range s.servers {
		srv.WaitForShutdown()
	}
}

// WaitMeshed waits until each of servers has its whole pool of routes
// (server.DEFAULT_ROUTE_POOL_SIZE) to every other, polling with a
// deadline, failing the test past it: interest sent while a pool is
// still forming can travel on a route that is then replaced.
func WaitMeshed(t testing.TB, servers ...*server.Server) {
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		missing := ""
		for _, srv := range servers {
			if peers := RoutedPeers(srv, server.DEFAULT_ROUTE_POOL_SIZE); peers < len(servers)-1 {
				missing = fmt.Sprintf("%s has full pools to %d of %d peers", srv.Name(), peers, len(servers)-1)
				break
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("natstest: cluster not meshed within %v: %s", readyTimeout, missing)
		}
		<-tick.C
	}
}

// RoutedPeers counts the distinct servers srv has at least pool route
// connections to (a pair of servers holds a pool of them, and one more
// for each pinned account).
func RoutedPeers(srv *server.Server, pool int) int {
	rz, err := srv.Routez(nil)
	if err != nil {
		return 0
	}
	routes := map[string]int{}
	for _, r := range rz.Routes {
		routes[r.RemoteID]++
	}
	peers := 0
	for _, n := range routes {
		if n >= pool {
			peers++
		}
	}
	return peers
}
