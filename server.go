package mqttd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"mqttd/auth"
	"mqttd/internal/broadcast"
	"mqttd/internal/namedset"
	"mqttd/listeners"
	"mqttd/packets"
	"mqttd/persistence"
	"mqttd/session"
	"mqttd/topictrie"
)

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("mqttd: server closed")

// Server is an MQTT broker. Create it with New, give it listeners with
// Listen or AddListener, run it with Serve and stop it with Shutdown.
type Server struct {
	opts    Options
	log     zerolog.Logger
	topics  topictrie.Limits
	subs    *topictrie.Trie[*client, subOpts]
	retain  *topictrie.Retained[*session.Message]
	sessLim *session.Limits // shared by every session
	// decode keeps one user property more than limits.max_user_properties,
	// so that a message over it is told from one at it (userPropertiesFit)
	// without decoding the hundreds of thousands a packet may carry.
	decode  packets.Limits
	poller  *poller // nil where connections are read by goroutines
	idle    *idleWheel
	expiry  *expiryWheel
	memory  *memoryWatch
	created time.Time // for the uptime (Overview)
	sys     *sysTree
	// busy counts messages by topic while someone looks (topcount.go).
	busy    *topicCounter
	dlq     *deadLetters // nil: dead letters off
	readers *readerPool

	// mu is the registry lock: clients, conns and listeners. Lock order:
	// mu -> client.mu -> outbox.mu (LOCKING.md).
	mu      sync.Mutex
	clients namedset.Set[client, *client] // by client id
	methods map[string]auth.Method        // Options.AuthMethods by name
	wills   map[*client]*delayedWill      // waiting for their Will Delay Interval (will.go)
	// conns is every open connection, each at its connPos: a slice of
	// pointers costs a connection 8 bytes where a map took ~29.
	conns     []*conn
	perAddr   map[netip.Addr]int // open connections by source address (admission.go)
	listeners []*listener
	gates     map[string]*gate // how each listener lets clients in, by name (auth.go)
	serving   bool
	accepting int        // accept loops running
	failed    chan error // the last listener failed
	done      chan struct{}

	closing atomic.Bool
	connWG  sync.WaitGroup // connections, until their reader finished
	acceptW sync.WaitGroup // accept loops
	// writers counts goroutines that write to connections other than
	// their readers: writer goroutines, and those that close a connection
	// after telling a 5.0 client why (takeover, idle timeout, shutdown).
	writers sync.WaitGroup
	// writersDue counts the writer goroutines started (runWriter) that
	// have not begun to write: a reader lets them write before its own
	// answers (yieldToWriters).
	writersDue atomic.Int32
	// writerGoroutines runs the writers, keeping a few parked.
	writerGoroutines *writerPool

	authsMu sync.Mutex
	auths   map[*conn]*authState // connections that authenticate through an AuthMethod (handle_connect.go)

	// authz decides what clients may do: Options.Authorizer, the ACL
	// files, or AllowAll. readCheck says it is not AllowAll, so each
	// delivery asks it too (auth.Read).
	// lim is the limits in force (reload.go): Options.Limits, changed by
	// SetLimits for those read where they are used.
	lim   atomic.Pointer[Limits]
	limMu sync.Mutex // one SetLimits at a time

	authz     auth.Authorizer
	readCheck bool
	authFiles *authFiles
	loginLog  burstLimit
	logins    *loginLimiter // refused logins by source (auth_limit.go)
	// closeLog limits the lines of connections closed before CONNECT
	// completed, which one client can produce as fast as it connects.
	closeLog burstLimit

	stats        stats
	queueBudget  session.QueueBudget // the bytes of all session queues
	outboxWait   outboxWaiters
	rejectWarned throttle    // unix nanos of the last rejected-connection warning
	retainWarned throttle    // unix nanos of the last retained-store-full warning
	storeWarned  throttle    // unix nanos of the last store-error warning
	willWarned   throttle    // unix nanos of the last will-refused line
	storeHealth  storeHealth // whether the store takes writes (Ready)

	// dur is the store's side of the broker (durable.go); nil when
	// nothing is kept.
	dur *durable
	// retainMu orders the retained store's changes with the units that
	// record them, when there is a store.
	retainMu        sync.Mutex
	queueWarned     throttle // unix nanos of the last queue-full warning
	subsWarned      throttle // unix nanos of the last subscription-limit warning
	sessionsWarned  throttle // unix nanos of the last session-limit warning
	clusterWarned   throttle // of the last CONNECT refused for want of the cluster
	userPropsWarned throttle // unix nanos of the last user-properties warning
	incomingWarned  throttle // unix nanos of the last incoming-bytes warning
	tooLargeWarned  throttle // of the last packet refused for limits.max_packet_size
	stampsWarned    throttle // of the last stamp a session forgot before its time
	// lingering counts the connections in endLinger (linger.go), and
	// lingerWarned is the last time one was closed at once for it.
	lingering        atomic.Int32
	lingerWarned     throttle
	retainSendWarned throttle // unix nanos of the last retained-sends-truncated warning
	// retainedSends are the clients' allowances of retained messages
	// (retain.go), and retainLimitWarned the last time one ran out.
	retainedSends     retainedSends
	retainLimitWarned throttle
	// ends wakes the CONNECTs waiting for the connection they take over
	// to end (takeover.go): each end of a connection signals it while one
	// waits. takeoverWarned is the last time a wait ran out.
	ends           broadcast.Next
	takeoverWarned throttle
	// bridges are the configured bridges by session id (bridge.go),
	// replaced whole when they change.
	bridges        atomic.Pointer[map[string]*bridgeRun]
	bridgesMu      sync.Mutex // one SetBridges at a time
	bridgesStopped bool       // Shutdown stopped them; guarded by bridgesMu
	// bridgeFull is set while a block_publishers bridge may be full.
	bridgeFull atomic.Bool
	// cluster is this broker's membership of a cluster (cluster.go); nil
	// without Options.Cluster.
	cluster *clusterLink
}

type listener struct {
	name string
	l    net.Listener
	// path is the URL path of a ws or wss listener, for Overview.
	path string
	// stopped is why its accept loop ended before Shutdown (Ready);
	// guarded by Server.mu.
	stopped error
}

// New returns a Server for opts, or every problem with opts. It opens the
// store (Options.DataDir or Options.Store) and restores what it kept,
// which a store that cannot be read fails with, naming the file;
// Shutdown closes it. It opens no network descriptor: Serve does.
func New(opts Options) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	o := opts.WithDefaults()
	limits := topictrie.Limits{MaxLevels: o.Limits.MaxTopicLevels}
	s := &Server{
		created: time.Now(),
		opts:    o,
		topics:  limits,
		log:     o.Logger,
		subs:    topictrie.New[*client, subOpts](topictrie.Options{Limits: limits}),
		retain:  topictrie.NewRetained[*session.Message](limits),
		sessLim: session.Config{
			MaxInflight:    o.Limits.MaxInflight,
			MaxQueued:      o.Limits.MaxQueued,
			MaxQueuedBytes: o.Limits.MaxQueuedBytes,
			QueueQoS0:      o.Limits.QueueQoS0,
			MaxAwaitingRel: o.Limits.MaxAwaitingRel,
		}.Limits(),
		idle:    newIdleWheel(),
		expiry:  newExpiryWheel(),
		memory:  newMemoryWatch(),
		sys:     newSysTree(o.SysInterval),
		methods: make(map[string]auth.Method),
		auths:   make(map[*conn]*authState),
		wills:   make(map[*client]*delayedWill),
		gates:   make(map[string]*gate),
		perAddr: make(map[netip.Addr]int),
		done:    make(chan struct{}),
		failed:  make(chan error, 1),
	}
	s.logins = newLoginLimiter(o.Auth, &s.stats)
	s.busy = newTopicCounter(&s.stats, s.done, s.log)
	s.dlq = newDeadLetters(s, o.DeadLetters)
	if o.Cluster != nil {
		s.cluster = &clusterLink{cfg: clusterConfig(&o), wanted: make(map[string]int)}
	}
	lim := o.Limits
	s.lim.Store(&lim)
	s.decode.MaxUserProperties = o.Limits.MaxUserProperties + 1
	for _, m := range o.AuthMethods {
		s.methods[m.Name()] = m
	}
	if err := s.loadAuthFiles(); err != nil {
		return nil, err
	}
	s.queueBudget.Max = o.Limits.MaxQueuedBytesTotal
	s.outboxWait.max, s.outboxWait.total = o.Limits.MaxOutboxBytesTotal, &s.stats.outboxBytes
	s.readers = newReaderPool(s)
	s.writerGoroutines = newWriterPool()
	var col *collector
	if o.Registerer != nil {
		col = newCollector(&s.stats, &s.queueBudget, s.sessLim, o)
		col.bridges = s.Bridges
		col.cluster = s.Cluster
		if err := o.Registerer.Register(col); err != nil {
			return nil, err
		}
	}
	// Past here a failure takes the collector back, so that the caller
	// may try New again on the same registry.
	fail := func(err error) (*Server, error) {
		if col != nil {
			o.Registerer.Unregister(col)
		}
		return nil, err
	}
	s.openBridges()
	d, err := openStore(o)
	if err != nil {
		return fail(err)
	}
	if d != nil {
		s.dur = d
		if s.cluster != nil && s.cluster.cfg.ReplicatedSessions() && d.own {
			s.cluster.swap = newSwitchStore(d.store)
			d.store = s.cluster.swap
		}
		d.commit = persistence.NewCommitter(checkedStore{d.store, s})
		d.commit.SetDelay(commitDelay)
		if s.cluster != nil && s.cluster.cfg.ReplicatedSessions() {
			d.commit.SetDelay(replicatedCommitDelay)
		}
		s.stats.committer = d.commit
		if err := s.restore(); err != nil {
			s.closeStore()
			return fail(err)
		}
	}
	s.dlq.restoreKept()
	s.settleBridges()
	return s, nil
}

// closeStore waits for every change added to the store to be committed,
// and closes the store if the broker opened it.
func (s *Server) closeStore() {
	d := s.dur
	if d == nil {
		return
	}
	d.commit.Sync()
	if d.own {
		if err := d.store.Close(); err != nil {
			s.log.Error().Err(err).Msg("closing the store failed")
		}
	}
}

// AddListener adds an open listener under a name used in logs and in
// auth.ClientInfo.Listener. It may be called before or while Serve runs;
// the Server closes l on Shutdown. Options.Auth applies to it; unless
// auth.allow_anonymous says otherwise, clients without a username are let
// in only when l is on a loopback address, a unix socket or in-process,
// and no password file is set. A listener that would let nobody in is an
// error unless auth.allow_closed is set.
func (s *Server) AddListener(name string, l net.Listener) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addListenerLocked(name, l, nil)
}

// addListenerLocked is AddListener for a listener opened from lc (nil for
// one the program opened). The caller holds s.mu.
func (s *Server) addListenerLocked(name string, l net.Listener, lc *ListenerConfig) error {
	if s.closing.Load() {
		return ErrServerClosed
	}
	if strings.HasPrefix(name, "$") {
		return fmt.Errorf("mqttd: listener name %q: names starting with $ are the broker's own", name)
	}
	if err := s.openGateLocked(name, l.Addr(), lc); err != nil {
		return err
	}
	ln := &listener{name: name, l: l}
	if lc != nil && (lc.Type == listeners.WS || lc.Type == listeners.WSS) {
		ln.path = cmp.Or(lc.Path, listeners.DefaultPath)
	}
	s.listeners = append(s.listeners, ln)
	if s.serving {
		s.startAcceptLocked(ln)
	}
	return nil
}

// Addrs returns the addresses of the listeners.
func (s *Server) Addrs() []net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	addrs := make([]net.Addr, len(s.listeners))
	for i, ln := range s.listeners {
		addrs[i] = ln.l.Addr()
	}
	return addrs
}

// Serve starts the broker's goroutines and accepts connections on every
// listener until Shutdown, then returns ErrServerClosed. When every
// listener has failed it returns their last error; the caller should then
// call Shutdown to close the connections still open.
func (s *Server) Serve() error {
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		return ErrServerClosed
	}
	if s.serving {
		s.mu.Unlock()
		return errors.New("mqttd: Serve called twice")
	}
	if s.cluster != nil {
		// Before any client: what they publish goes to the other nodes
		// from the first message.
		if err := s.joinCluster(); err != nil {
			s.mu.Unlock()
			return err
		}
	}
	pl, err := newPoller()
	if err != nil {
		s.mu.Unlock()
		s.leaveCluster()
		return err
	}
	s.poller = pl
	if st, ok := s.storeForYield(); ok && pl != nil {
		st.SetYield(pl.Poll)
	}
	s.idle.start()
	s.expiry.start(s)
	s.memory.start(s)
	s.sys.start(s)
	s.startBridges()
	s.serving = true
	for _, ln := range s.listeners {
		s.startAcceptLocked(ln)
	}
	s.mu.Unlock()
	select {
	case <-s.done:
		return ErrServerClosed
	case err := <-s.failed:
		return err
	}
}

// startAcceptLocked runs an accept loop for ln. The caller holds s.mu.
func (s *Server) startAcceptLocked(ln *listener) {
	s.acceptW.Add(1)
	s.accepting++
	go func() {
		defer s.acceptW.Done()
		err := s.acceptLoop(ln)
		s.mu.Lock()
		defer s.mu.Unlock()
		ln.stopped = err
		if s.accepting--; s.accepting == 0 && err != nil {
			select {
			case s.failed <- fmt.Errorf("mqttd: every listener failed, the last one %s: %w", ln.name, err):
			default:
			}
		}
	}()
}

// acceptLoop backs off on temporary errors (out of file descriptors, say)
// rather than spinning or giving up, as net/http does. It returns the
// error that stopped the listener, or nil on Shutdown.
func (s *Server) acceptLoop(ln *listener) error {
	var delay time.Duration
	for {
		nc, err := ln.l.Accept()
		if err != nil {
			if s.closing.Load() {
				return nil
			}
			if isTimeout(err) || isTemporary(err) {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.log.Warn().Err(err).Str("listener", ln.name).Dur("retry_in", delay).Msg("accept failed")
				select {
				case <-time.After(delay):
				case <-s.done:
					return nil
				}
				continue
			}
			s.log.Error().Err(err).Str("listener", ln.name).Msg("listener stopped")
			return err
		}
		delay = 0
		s.startConn(nc, ln.name)
	}
}

func isTemporary(err error) bool {
	t, ok := err.(interface{ Temporary() bool })
	return ok && t.Temporary()
}

func (s *Server) startConn(nc net.Conn, listenerName string) {
	c := newConn(s, nc, listenerName)
	src := sourceAddr(c.info.Remote)
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		nc.Close()
		return
	}
	if r, ok := s.admitLocked(src); !ok {
		s.mu.Unlock()
		s.reject(nc, r, listenerName)
		return
	}
	s.trackLocked(c)
	s.connWG.Add(1)
	s.mu.Unlock()
	s.stats.connections.Add(1)
	if !c.startEvent(s.poller) {
		go c.serve()
	}
}

// trackLocked adds c to the open connections; s.mu is held.
func (s *Server) trackLocked(c *conn) {
	c.connPos = int32(len(s.conns))
	s.conns = append(s.conns, c)
}

func (s *Server) untrack(c *conn) {
	s.mu.Lock()
	last := s.conns[len(s.conns)-1]
	last.connPos = c.connPos
	s.conns[c.connPos] = last
	s.conns[len(s.conns)-1] = nil
	s.conns = s.conns[:len(s.conns)-1]
	s.releaseLocked(sourceAddr(c.info.Remote))
	s.mu.Unlock()
	s.stats.connections.Add(-1)
	s.connWG.Done()
}

// Shutdown stops accepting, disconnects every client (their wills are not
// published: the broker, not the client, ended the connection) and waits
// for the connections to finish or ctx to end.
func (s *Server) Shutdown(ctx context.Context) error {
	// First, without the registry lock, which a link may be waiting for,
	// or a message from another node being routed.
	s.stopBridges()
	s.leaveCluster()
	s.mu.Lock()
	if s.closing.Swap(true) {
		s.mu.Unlock()
		return ErrServerClosed
	}
	close(s.done)
	s.readers.close()
	for _, ln := range s.listeners {
		ln.l.Close()
	}
	s.dropWillsLocked()
	conns := slices.Clone(s.conns)
	s.mu.Unlock()
	s.log.Info().Int("connections", len(conns)).Msg("shutting down: closing every connection")
	// In parallel: each may wait up to a second for a 5.0 client's
	// DISCONNECT to drain.
	for _, c := range conns {
		s.writers.Add(1)
		go func() {
			defer s.writers.Done()
			c.shutdown()
		}()
	}
	finished := make(chan struct{})
	go func() {
		s.acceptW.Wait()
		s.connWG.Wait()
		// Every connection has closed its outbox, so no writer starts
		// any more; the idle wheel starts none once it has stopped.
		s.idle.close()
		if st, ok := s.storeForYield(); ok {
			st.SetYield(nil)
		}
		s.poller.Close()
		s.expiry.close()
		s.memory.close()
		s.sys.close() // before the writers: its deliveries may start some
		s.dlq.close() // likewise
		s.writers.Wait()
		s.writerGoroutines.close() // no writer starts any more
		s.closeStore()
		close(finished)
	}()
	select {
	case <-finished:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
