package cluster

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Config is the cluster block of the broker's configuration (YAML keys as
// tagged). The zero Config is no cluster: the broker starts no Node.
type Config struct {
	// Name is the cluster's name; nodes of one cluster share it. It is a
	// token of every subject the cluster uses and the embedded servers'
	// cluster name: 1 to 64 ASCII letters, digits, '-' or '_'. Required.
	Name string `yaml:"name"`
	// NodeName is this node's name, unique in the cluster (two nodes of
	// one name would share their deliveries); default: the host name.
	// At most 128 bytes, no white space or control characters.
	NodeName string `yaml:"node_name"`
	// NATS says how the node reaches NATS.
	NATS NATSConfig `yaml:"nats"`
	// Replicas is how many NATS servers keep each record of the
	// replicated store (which node owns each client id), from 1 to 5;
	// default (0) DefaultReplicas, or 1 when the NATS servers are not a
	// JetStream cluster. JetStream must be enabled on the servers.
	Replicas int `yaml:"replicas"`
	// NodeTimeout is how long a node's beats may fail before the other
	// nodes take it for dead (and publish its clients' wills) and it
	// takes itself for cut off (and closes its clients' connections);
	// default DefaultNodeTimeout. From 1 s.
	NodeTimeout time.Duration `yaml:"node_timeout"`
	// Sessions says where the persistent sessions a node holds are kept:
	// "replicated" (default; the cluster's session stream, SessionStore:
	// a client whose node died finds its session on any other, and a
	// message is acknowledged once the nodes it went to have stored it)
	// or "local" (the node's own store, and a node that dies takes them
	// with it).
	Sessions string `yaml:"sessions"`
	// Retained bounds the replicated retained messages; the broker sets
	// it from its own retained limits.
	Retained RetainedLimits `yaml:"-"`
}

// NATSConfig is where the node's NATS connection goes: exactly one of URL
// and Embedded.
type NATSConfig struct {
	// URL is an existing NATS server or cluster: comma-separated
	// nats:// (or tls://, ws://, wss://) URLs, all of which the node may
	// use, reconnecting to another when one fails.
	URL string `yaml:"url"`
	// Embedded starts a NATS server in this process, routed to the other
	// nodes' (only in builds with -tags natsserver).
	Embedded *EmbeddedConfig `yaml:"embedded"`
}

// EmbeddedConfig is the NATS server embedded in this process.
type EmbeddedConfig struct {
	// Listen is the embedded server's client address host:port (default
	// DefaultListen; port 0 picks a free one); the node connects to it.
	Listen string `yaml:"listen"`
	// Cluster is its route listener host:port, where the other nodes'
	// routes connect. Required with Routes, and Routes with it; without
	// both the server is on its own (a cluster of one node).
	Cluster string `yaml:"cluster"`
	// Routes are the other nodes' route addresses (nats-route://host:port
	// or host:port); the servers gossip the rest of the mesh.
	Routes []string `yaml:"routes"`
	// StoreDir is where the embedded server keeps its JetStream files
	// (the replicated store); the broker's default is data_dir/nats.
	StoreDir string `yaml:"store_dir"`
}

// Config.Sessions values.
const (
	SessionsLocal      = "local"
	SessionsReplicated = "replicated"
)

// ReplicatedSessions reports whether the persistent sessions are kept in
// the cluster's session stream (Sessions, replicated by default).
func (c *Config) ReplicatedSessions() bool { return c.Sessions != SessionsLocal }

// DefaultListen is the embedded server's client address when
// EmbeddedConfig.Listen is empty.
const DefaultListen = "127.0.0.1:4222"

const (
	maxNameLen     = 64
	maxNodeNameLen = 128
)

// Validate reports the first bad setting, naming it as the YAML does
// (cluster.name, cluster.nats.url, ...): exactly one of url and embedded,
// the name a valid single NATS token of the characters above, the node
// name printable, and every address parsing.
func (c *Config) Validate() error {
	if err := validName(c.Name); err != nil {
		return fmt.Errorf("cluster.name: %w", err)
	}
	if err := validNodeName(c.NodeName); err != nil {
		return fmt.Errorf("cluster.node_name: %w", err)
	}
	if err := validReplicas(c.Replicas); err != nil {
		return fmt.Errorf("cluster.replicas: %w", err)
	}
	switch c.Sessions {
	case "", SessionsLocal, SessionsReplicated:
	default:
		return fmt.Errorf("cluster.sessions: %q: %s or %s", c.Sessions, SessionsLocal, SessionsReplicated)
	}
	if c.NodeTimeout != 0 && c.NodeTimeout < time.Second {
		return fmt.Errorf("cluster.node_timeout: %v: at least 1s (or 0 for the default, %v)", c.NodeTimeout, DefaultNodeTimeout)
	}
	switch {
	case c.NATS.URL != "" && c.NATS.Embedded != nil:
		return errors.New("cluster.nats: url and embedded are exclusive: set one")
	case c.NATS.URL == "" && c.NATS.Embedded == nil:
		return errors.New("cluster.nats: set url (an external NATS server) or embedded")
	case c.NATS.URL != "":
		if _, err := clientURLs(c.NATS.URL); err != nil {
			return fmt.Errorf("cluster.nats.url: %w", err)
		}
		return nil
	}
	return c.NATS.Embedded.validate()
}

func (e *EmbeddedConfig) validate() error {
	if e.Listen != "" {
		if _, _, err := hostPort(e.Listen); err != nil {
			return fmt.Errorf("cluster.nats.embedded.listen: %w", err)
		}
	}
	switch {
	case e.Cluster != "":
		if _, _, err := hostPort(e.Cluster); err != nil {
			return fmt.Errorf("cluster.nats.embedded.cluster: %w", err)
		}
		if len(e.Routes) == 0 {
			return errors.New("cluster.nats.embedded.routes: required with cluster (JetStream's servers must know their peers from the start; listing this node's own address too is fine)")
		}
	case len(e.Routes) > 0:
		return errors.New("cluster.nats.embedded.cluster: required with routes (the other nodes' routes connect to it)")
	}
	for i, r := range e.Routes {
		if _, err := routeURL(r); err != nil {
			return fmt.Errorf("cluster.nats.embedded.routes[%d]: %w", i, err)
		}
	}
	return nil
}

func validName(s string) error {
	if s == "" {
		return errors.New("required: the name all nodes of the cluster share")
	}
	if len(s) > maxNameLen {
		return fmt.Errorf("%d bytes, more than %d", len(s), maxNameLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("%q: only ASCII letters, digits, '-' and '_' (it is a NATS subject token)", s)
		}
	}
	return nil
}

func validNodeName(s string) error {
	if len(s) > maxNodeNameLen {
		return fmt.Errorf("%d bytes, more than %d", len(s), maxNodeNameLen)
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7F || r == '\uFFFD' {
			return fmt.Errorf("%q: white space, control characters or invalid UTF-8", s)
		}
	}
	return nil
}

// hostPort parses host:port with a numeric port.
func hostPort(s string) (string, int, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, err
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("%q: port must be a number from 0 to 65535", s)
	}
	return host, int(p), nil
}

// clientURLs splits and checks a comma-separated list of NATS URLs.
func clientURLs(s string) ([]string, error) {
	var urls []string
	for _, raw := range strings.Split(s, ",") {
		raw = strings.TrimSpace(raw)
		u, err := url.Parse(raw)
		if err != nil {
			return nil, err
		}
		switch u.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return nil, fmt.Errorf("%q: scheme must be nats, tls, ws or wss", raw)
		}
		if u.Host == "" {
			return nil, fmt.Errorf("%q: no host", raw)
		}
		urls = append(urls, raw)
	}
	return urls, nil
}

// routeURL parses a route address: nats-route://host:port, nats://host:port
// or host:port.
func routeURL(s string) (*url.URL, error) {
	if !strings.Contains(s, "://") {
		if _, _, err := hostPort(s); err != nil {
			return nil, err
		}
		return &url.URL{Scheme: "nats-route", Host: s}, nil
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "nats-route" && u.Scheme != "nats" {
		return nil, fmt.Errorf("%q: scheme must be nats-route", s)
	}
	if _, _, err := hostPort(u.Host); err != nil {
		return nil, err
	}
	return u, nil
}
