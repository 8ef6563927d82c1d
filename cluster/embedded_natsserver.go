//go:build natsserver

package cluster

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/rs/zerolog"
)

// embeddedServer is a nats-server in this process.
type embeddedServer struct{ s *server.Server }

func (e embeddedServer) clientURL() string { return e.s.ClientURL() }

func (e embeddedServer) routeAddr() string {
	if a := e.s.ClusterAddr(); a != nil {
		return a.String()
	}
	return ""
}

func (e embeddedServer) shutdown() {
	e.s.Shutdown()
	e.s.WaitForShutdown()
}

// startEmbedded starts the NATS server of cfg.NATS.Embedded, clustered
// under cfg.Name with routes to the other nodes, with JetStream (the replicated store), and
// waits until it accepts clients.
func startEmbedded(cfg Config, log zerolog.Logger) (embedded, error) {
	opts, err := serverOptions(cfg)
	if err != nil {
		return nil, err
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("cluster.nats.embedded: %w", err)
	}
	s.SetLoggerV2(natsLogger{log.With().Str("component", "nats-server").Logger()}, false, false, false)
	s.Start()
	if !s.ReadyForConnections(5 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("cluster.nats.embedded: server not ready within 5s (listen %s, cluster %s)",
			opts.Host, opts.Cluster.Host)
	}
	return embeddedServer{s}, nil
}

func serverOptions(cfg Config) (*server.Options, error) {
	e := cfg.NATS.Embedded
	listen := e.Listen
	if listen == "" {
		listen = DefaultListen
	}
	host, port, err := hostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("cluster.nats.embedded.listen: %w", err)
	}
	storeDir := e.StoreDir
	if storeDir == "" {
		storeDir = filepath.Join(os.TempDir(), "mqttd-nats", cfg.Name, cfg.NodeName)
	}
	opts := &server.Options{
		ServerName: cfg.NodeName,
		Host:       host,
		Port:       randomIfZero(port),
		NoSigs:     true,
		// The replicated store holds small records (owners of client
		// ids): bounded well below JetStream's defaults, which take a
		// share of the machine's memory and disk.
		JetStream:          true,
		StoreDir:           storeDir,
		JetStreamMaxMemory: 64 << 20,
		JetStreamMaxStore:  1 << 30,
		// Every write on disk before it is confirmed: a member that lost
		// its unsynced raft state to a power cut (NATS syncs every two
		// minutes by default) lost what the others were told was kept
		// (TestClusterReplicatedPowerCut).
		SyncAlways: true,
	}
	if e.Cluster != "" {
		ch, cp, err := hostPort(e.Cluster)
		if err != nil {
			return nil, fmt.Errorf("cluster.nats.embedded.cluster: %w", err)
		}
		opts.Cluster.Name, opts.Cluster.Host, opts.Cluster.Port = cfg.Name, ch, randomIfZero(cp)
	}
	for i, r := range e.Routes {
		u, err := routeURL(r)
		if err != nil {
			return nil, fmt.Errorf("cluster.nats.embedded.routes[%d]: %w", i, err)
		}
		opts.Routes = append(opts.Routes, &url.URL{Scheme: "nats-route", Host: u.Host})
	}
	return opts, nil
}

// randomIfZero maps port 0, "any free port", to nats-server's spelling of
// it (its 0 is the default port).
func randomIfZero(port int) int {
	if port == 0 {
		return server.RANDOM_PORT
	}
	return port
}

// natsLogger puts the server's log lines into zerolog one level lower
// than the server rates them: a route to a node that is down is a notice
// for NATS and routine for mqttd.
type natsLogger struct{ log zerolog.Logger }

func (l natsLogger) Noticef(format string, v ...any) { l.log.Debug().Msgf(format, v...) }
func (l natsLogger) Warnf(format string, v ...any)   { l.log.Info().Msgf(format, v...) }
func (l natsLogger) Errorf(format string, v ...any)  { l.log.Warn().Msgf(format, v...) }
func (l natsLogger) Fatalf(format string, v ...any)  { l.log.Error().Msgf(format, v...) }
func (l natsLogger) Debugf(format string, v ...any)  { l.log.Trace().Msgf(format, v...) }
func (l natsLogger) Tracef(format string, v ...any)  { l.log.Trace().Msgf(format, v...) }
