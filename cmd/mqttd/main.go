// Command mqttd runs the mqttd MQTT broker. With no arguments it listens on
// 127.0.0.1:1883 and keeps its state in ./data; see mqttd -h.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"

	"mqttd"
)

// shutdownGrace bounds a graceful stop on SIGINT or SIGTERM.
const shutdownGrace = 5 * time.Second

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	zerolog.TimeFieldFormat = time.RFC3339Nano
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr, sig))
}

// run is main without the process: it returns the exit code.
func run(args []string, getenv func(string) string, stdout, stderr io.Writer, stop <-chan os.Signal) int {
	if len(args) > 0 && args[0] == "passwd" {
		return runPasswd(args[1:], os.Stdin, stderr)
	}
	if len(args) > 0 && args[0] == "check-config" {
		return runCheckConfig(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "import" {
		return runImport(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "ctl" {
		return runCtl(args[1:], getenv, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "help" {
		args = []string{"-h"}
	}
	f, err := parseFlags(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "mqttd:", err)
		return 2
	}
	if f.version {
		fmt.Fprintln(stdout, "mqttd", version())
		return 0
	}
	cfg, err := loadConfig(f)
	if err != nil {
		fmt.Fprintf(stderr, "mqttd: bad configuration:\n%v\n", err)
		return 2
	}
	log := newLogger(cfg.Log, stderr)
	stopGC, tuned := startGC(cfg.GC, getenv)
	defer stopGC()
	if !tuned && cfg.GC.HeadroomPercent != 100 {
		log.Info().Msg("GOGC or GOMEMLIMIT is set in the environment: the gc block of the configuration is not applied")
	}
	_, err = os.Stat(filepath.Join(cfg.DataDir, mqttd.StoreFile))
	newStore := errors.Is(err, fs.ErrNotExist)
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		log.Error().Err(err).Str("data_dir", cfg.DataDir).Msg("cannot create the data directory")
		return 1
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	opts := cfg.Options
	opts.Logger = log
	opts.Registerer = reg
	// $SYS/broker/version and mqttd_build_info name the build as `mqttd
	// version` does, stamp included.
	b := thisBuild()
	opts.Version, opts.Commit = b.version, b.commit
	srv, err := mqttd.New(opts)
	if err != nil {
		log.Error().Err(err).Msg("cannot start")
		return 1
	}
	if err := srv.Listen(); err != nil {
		log.Error().Err(err).Msg("cannot listen")
		return 1
	}
	files, err := loadHTTPFiles(cfg.Metrics, cfg.Auth.AuthConfig, reg, log)
	if err != nil {
		log.Error().Err(err).Msg("cannot serve metrics")
		return 1
	}
	rl := &reloader{srv: srv, flags: f, running: cfg, log: log, http: files}
	metricsSrv, metricsAddr, err := serveHTTP(cfg.Metrics, files, srv, reg, log, func() error { return rl.reload("an API request") })
	if err != nil {
		log.Error().Err(err).Str("address", cfg.Metrics.Address).Msg("cannot serve metrics")
		return 1
	}
	shown := cfg
	shown.Metrics.Address = "" // none, when the default one was taken
	if metricsAddr != nil {
		shown.Metrics.Address = metricsAddr.String() // the port :0 became
	}
	banner(stderr, srv, shown, f.config, newStore)
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	serveErr := wait(rl, stop, served)
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if metricsSrv != nil {
		metricsSrv.Shutdown(ctx)
	}
	if err := srv.Shutdown(ctx); err != nil {
		log.Warn().Err(err).Msg("connections still open at the end of the shutdown grace period")
		return 1
	}
	if serveErr != nil {
		return 1
	}
	<-served
	log.Info().Msg("stopped")
	return 0
}

// wait runs until a signal other than SIGHUP arrives or Serve returns
// (its error, then). SIGHUP reloads what can change while running.
func wait(r *reloader, stop <-chan os.Signal, served <-chan error) error {
	log := r.log
	for {
		select {
		case s := <-stop:
			if s == syscall.SIGHUP {
				r.reload("SIGHUP")
				continue
			}
			log.Info().Str("signal", s.String()).Msg("shutting down")
			return nil
		case err := <-served:
			// Every listener failed: the clients still connected are closed.
			log.Error().Err(err).Msg("server stopped")
			return err
		}
	}
}

// banner says what listens where, where the state is and how to reach the
// broker from other machines, since the default only accepts this one;
// configFile is the config file given, if any, and newStore whether the
// data directory had no store before this start.
func banner(w io.Writer, srv *mqttd.Server, cfg config, configFile string, newStore bool) {
	fmt.Fprintf(w, "mqttd %s\n", version())
	local := true
	for i, a := range srv.Addrs() {
		how := "tcp"
		if i < len(cfg.Listeners) { // Listen opened them in order
			lc := cfg.Listeners[i]
			how = cmp.Or(lc.Type, "tcp")
			if lc.Type == "ws" || lc.Type == "wss" {
				how = fmt.Sprintf("%s://%s%s", lc.Type, a, cmp.Or(lc.Path, "/mqtt"))
			}
		}
		fmt.Fprintf(w, "  MQTT listening on %s (%s)\n", a, how)
		if ta, ok := a.(*net.TCPAddr); ok && !ta.IP.IsLoopback() {
			local = false
		}
	}
	if cfg.Metrics.Address != "" {
		scheme := "http"
		if cfg.Metrics.TLS.CertFile != "" {
			scheme = "https"
		}
		fmt.Fprintf(w, "  metrics on %s://%s/metrics\n", scheme, cfg.Metrics.Address)
		fmt.Fprintf(w, "  dashboard on %s://%s/\n", scheme, cfg.Metrics.Address)
	}
	durability := cfg.Durability
	if durability == "" {
		durability = "sync"
	}
	fmt.Fprint(w, stateLines(cfg.DataDir, durability, newStore))
	if c := cfg.Cluster; c != nil {
		over := "NATS at " + c.NATS.URL
		if c.NATS.Embedded != nil {
			over = "its embedded NATS server"
		}
		fmt.Fprintf(w, "  a node of cluster %s, over %s\n", c.Name, over)
	}
	if local {
		// The addresses as bound: a port 0 became one.
		cfg.Listeners = slices.Clone(cfg.Listeners)
		for i, a := range srv.Addrs() {
			if i < len(cfg.Listeners) && cfg.Listeners[i].Type != "unix" {
				cfg.Listeners[i].Address = a.String()
			}
		}
		hintOthers(w, cfg, configFile)
	}
}

// stateLines are the banner's lines on the state: the store's full path,
// since a relative data_dir is relative to wherever the broker was
// started, and, for a store made by this start, that nothing was kept
// there before: a broker started from another directory than last time
// has none of the sessions and retained messages it kept there.
func stateLines(dataDir, durability string, newStore bool) string {
	state := filepath.Join(dataDir, mqttd.StoreFile)
	if abs, err := filepath.Abs(state); err == nil {
		state = abs
	}
	lines := fmt.Sprintf("  state in %s (durability %s)\n", state, durability)
	switch {
	case !newStore:
	case filepath.IsAbs(dataDir):
		lines += "  a new store: nothing was kept there before\n"
	default:
		lines += fmt.Sprintf("  a new store: nothing was kept there before; data_dir %q is relative to the directory mqttd "+
			"starts in (--data-dir, MQTTD_DATA_DIR or data_dir with a full path keeps one place)\n", dataDir)
	}
	return lines
}
