package main

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"mqttd/internal/natstest"
)

// nodeOptions is one node of the spike's cluster: client and cluster
// listeners on 127.0.0.1 (port 0 picks a free one), routes to the given
// cluster ports.
func nodeOptions(name string, clusterPort int, routePorts []int) *server.Options {
	opts := &server.Options{
		ServerName: name,
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		NoLog:      true,
		NoSigs:     true,
	}
	opts.Cluster.Name = "natsspike"
	opts.Cluster.Host = "127.0.0.1"
	opts.Cluster.Port = clusterPort
	for _, p := range routePorts {
		opts.Routes = append(opts.Routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", p)})
	}
	return opts
}

// startNode starts one embedded server and waits until it accepts clients.
func startNode(opts *server.Options, timeout time.Duration) (*server.Server, error) {
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, err
	}
	s.Start()
	if !s.ReadyForConnections(timeout) {
		s.Shutdown()
		return nil, fmt.Errorf("node %s not ready within %v", opts.ServerName, timeout)
	}
	return s, nil
}

// startCluster starts n nodes in this process: the first on a random
// cluster port, the others routed to it; the servers' gossip completes the
// full mesh, which startCluster waits for so that no measurement runs on a
// half-formed cluster.
func startCluster(n int, timeout time.Duration) ([]*server.Server, error) {
	if n < 1 {
		return nil, errors.New("a cluster needs at least one node")
	}
	first, err := startNode(nodeOptions("node1", server.RANDOM_PORT, nil), timeout)
	if err != nil {
		return nil, err
	}
	nodes := []*server.Server{first}
	seed := first.ClusterAddr().Port
	for i := 2; i <= n; i++ {
		s, err := startNode(nodeOptions(fmt.Sprintf("node%d", i), server.RANDOM_PORT, []int{seed}), timeout)
		if err != nil {
			stopCluster(nodes)
			return nil, err
		}
		nodes = append(nodes, s)
	}
	if err := waitMesh(nodes, timeout); err != nil {
		stopCluster(nodes)
		return nil, err
	}
	return nodes, nil
}

// waitMesh waits until every node has its whole pool of routes to every
// other node: interest sent while a pool is still forming can travel on a
// route that is then replaced, and a probe was then never answered.
func waitMesh(nodes []*server.Server, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		missing := ""
		for _, s := range nodes {
			if peers := natstest.RoutedPeers(s, server.DEFAULT_ROUTE_POOL_SIZE); peers < len(nodes)-1 {
				missing = fmt.Sprintf("%s has full pools to %d of %d peers", s.Name(), peers, len(nodes)-1)
				break
			}
		}
		if missing == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster not meshed within %v: %s", timeout, missing)
		}
		<-tick.C
	}
}

func stopCluster(nodes []*server.Server) {
	for _, s := range nodes {
		s.Shutdown()
	}
	for _, s := range nodes {
		s.WaitForShutdown()
	}
}
