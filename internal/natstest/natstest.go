// Package natstest starts nats-servers for tests: a cluster of n servers
// in the test's process, routed to each other on 127.0.0.1, with
// JetStream (files in the test's temporary directories), stopped at the
// test's end. Only tests, and Launch for hack/jsspike, use it (it links
// the whole nats-server).
package natstest

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"mqttd/internal/freeport"
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
	dir     string
	routes  []*url.URL
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
	// Made before the servers' cleanup is registered, so removed after
	// the servers stop writing to it.
	dir := t.TempDir()
	servers, routes, err := launch(dir, n)
	if err != nil {
		t.Fatal(err)
	}
	s := &Servers{t: t, servers: servers, dir: dir, routes: routes}
	t.Cleanup(s.shutdownAll)
	for _, srv := range servers {
		s.urls = append(s.urls, srv.ClientURL())
	}
	return s
}

// Launch is Start for a program that is not a test (hack/jsspike): it
// starts n servers with their JetStream files under dir, waits as Start
// does, and returns them, or stops what it started and returns why not.
// The caller stops them (Stop) and removes dir.
func Launch(dir string, n int) ([]*server.Server, error) {
	servers, _, err := launch(dir, n)
	return servers, err
}

// launch is Launch, returning the servers' route URLs as well.
func launch(dir string, n int) ([]*server.Server, []*url.URL, error) {
	if n < 1 {
		return nil, nil, fmt.Errorf("natstest: a cluster of %d servers", n)
	}
	// A JetStream cluster needs every server's routes configured from
	// the start: the route ports are picked before any server starts.
	routes := make([]*url.URL, n)
	for i := range routes {
		port, err := freePort()
		if err != nil {
			return nil, nil, err
		}
		routes[i] = &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", port)}
	}
	var servers []*server.Server
	for i := range n {
		srv, err := server.NewServer(serverOptions(i, n, dir, routes))
		if err != nil {
			Stop(servers)
			return nil, nil, fmt.Errorf("natstest: server %d: %w", i, err)
		}
		srv.Start()
		servers = append(servers, srv)
	}
	if err := waitReady(servers); err != nil {
		Stop(servers)
		return nil, nil, err
	}
	return servers, routes, nil
}

func serverOptions(i, n int, dir string, routes []*url.URL) *server.Options {
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
	return opts
}

// waitReady waits until every server accepts clients, has its routes
// to every other, and JetStream serves.
func waitReady(servers []*server.Server) error {
	for i, srv := range servers {
		if !srv.ReadyForConnections(readyTimeout) {
			return fmt.Errorf("natstest: server %d not ready within %v", i, readyTimeout)
		}
	}
	if err := waitMeshed(servers); err != nil {
		return err
	}
	return waitJetStream(servers)
}

// Stop shuts servers down and waits until they have stopped.
func Stop(servers []*server.Server) {
	for _, srv := range servers {
		srv.Shutdown()
	}
	for _, srv := range servers {
		srv.WaitForShutdown()
	}
}

// waitJetStream waits until JetStream serves: a meta leader elected
// among the servers of a cluster that counts every server as a peer
// ready for streams (until then, a stream with a replica on each fails).
func waitJetStream(servers []*server.Server) error {
	if len(servers) == 1 {
		return nil
	}
	deadline := time.Now().Add(readyTimeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, srv := range servers {
			if srv.JetStreamIsLeader() && len(srv.JetStreamClusterPeers()) == len(servers) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("natstest: no JetStream meta leader within %v", readyTimeout)
		}
		<-tick.C
	}
}

func freePort() (int, error) {
	port, err := freeport.Pick()
	if err != nil {
		return 0, fmt.Errorf("natstest: %w", err)
	}
	return port, nil
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

// Restart starts server i again after Shutdown, on its client and route
// ports and with its JetStream files, as a failed machine comes back,
// and waits until it accepts clients and is routed to the other running
// servers. Its former clients reconnect to it.
func (s *Servers) Restart(i int) {
	s.t.Helper()
	u, err := url.Parse(s.urls[i])
	if err != nil {
		s.t.Fatal(err)
	}
	opts := serverOptions(i, len(s.servers), s.dir, s.routes)
	if opts.Port, err = strconv.Atoi(u.Port()); err != nil {
		s.t.Fatal(err)
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		s.t.Fatalf("natstest: server %d again: %v", i, err)
	}
	srv.Start()
	s.servers[i] = srv
	if !srv.ReadyForConnections(readyTimeout) {
		s.t.Fatalf("natstest: server %d not ready again within %v", i, readyTimeout)
	}
	var running []*server.Server
	for _, o := range s.servers {
		if o.Running() {
			running = append(running, o)
		}
	}
	if err := waitMeshed(running); err != nil {
		s.t.Fatal(err)
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

func (s *Servers) shutdownAll() { Stop(s.servers) }

// WaitMeshed waits until each of servers has its whole pool of routes
// (server.DEFAULT_ROUTE_POOL_SIZE) to every other, polling with a
// deadline, failing the test past it: interest sent while a pool is
// still forming can travel on a route that is then replaced.
func WaitMeshed(t testing.TB, servers ...*server.Server) {
	t.Helper()
	if err := waitMeshed(servers); err != nil {
		t.Fatal(err)
	}
}

func waitMeshed(servers []*server.Server) error {
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
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("natstest: cluster not meshed within %v: %s", readyTimeout, missing)
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
