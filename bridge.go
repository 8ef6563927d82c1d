package mqttd

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"mqttd/bridge"
	"mqttd/listeners"
	"mqttd/packets"
	"mqttd/persistence"
	"mqttd/session"
)

// Bridges (Options.Bridges): each is a persistent session of the broker's
// own, "$bridge/<name>", whose subscriptions are the bridge's out rules.
// A message an out rule takes is therefore queued and stored like any
// persistent session's, in the same commit that acknowledges it to its
// publisher, whether or not the remote is reachable. While the remote is
// connected, the session's connection is the bridge's client connection
// to it (bridge_link.go): the connection engine sends the session's
// window to the remote (with the topics mapped) and completes each
// message when the remote acknowledges it, and the remote's PUBLISHes
// for the in rules are routed here as a client's would be, acknowledged
// once committed. ARCHITECTURE.md says why this is not a paho client.

const (
	// bridgeIDPrefix starts the client id of a bridge's session; network
	// clients may not take such ids.
	bridgeIDPrefix = "$bridge/"
	// bridgeListener is the listener a bridge's connection is on, as the
	// Authorizer would see it: the broker's own, trusted.
	bridgeListener = "$bridge"
	// bridgeExpiry is a bridge session's expiry: it lasts as long as the
	// bridge is configured.
	bridgeExpiry = ^uint32(0)
)

// bridgeRun is one configured bridge while the broker runs.
type bridgeRun struct {
	srv   *Server
	given bridge.Config // as configured, to tell a change at a reload
	cfg   bridge.Config // with its defaults
	id    string        // the session's client id
	lim   *session.Limits
	// addrs are cfg.Addresses parsed; tls is the client side of tls://
	// and wss:// addresses, nil when it failed to load (tlsErr).
	addrs  []bridge.Address
	tls    *tls.Config
	tlsErr error

	started sync.Once
	stop    chan struct{} // closed to stop the link
	done    chan struct{} // closed when the link goroutine ended

	// link is the connection to the remote while there is one.
	link      atomic.Pointer[conn]
	connected atomic.Bool
	// full is set while the queue is at its bound, for block_publishers.
	full atomic.Bool

	// subPending is the packet id of the SUBSCRIBE for the in rules
	// waiting for its SUBACK, 0 when none waits.
	subPending atomic.Uint32

	stats bridgeStats

	// maxBytes is the queue's bound in bytes, as the session has it.
	maxBytes int64

	mu      sync.Mutex // guards the fields below
	address string     // connected to, or last tried
	lastErr string
	// ended tells the link goroutine that its connection ended, with
	// closeErr, why.
	ended    chan error
	closeErr error
	since    time.Time // of the current state
}

// bridgeStats are a bridge's counters.
type bridgeStats struct {
	forwardedOut atomic.Uint64 // acknowledged by the remote (written, at QoS 0)
	forwardedIn  atomic.Uint64 // received from the remote and routed here
	connects     atomic.Uint64
	failures     atomic.Uint64 // connection attempts that failed
	dropped      [bridgeDropReasons]atomic.Uint64
}

// Why a bridge dropped a message (BridgeState.Dropped, the metric's
// reason label).
const (
	bridgeDropOldest   = iota // the queue was full: the oldest queued went (drop_oldest)
	bridgeDropNew             // the queue was full: the new message went (drop_new)
	bridgeRefused             // the queue was full: the publisher was refused (block_publishers)
	bridgeDropTooLarge        // over the remote's Maximum Packet Size
	bridgeDropReasons
)

var bridgeDropNames = [bridgeDropReasons]string{"queue_full_oldest", "queue_full_new", "publisher_refused", "too_large"}

// newBridgeRun prepares a configured bridge; nothing runs until start.
func (s *Server) newBridgeRun(c bridge.Config) *bridgeRun {
	host, _ := os.Hostname()
	if s.cluster != nil && s.cluster.cfg.NodeName != "" {
		// Each node of a cluster runs its bridges under a client id of
		// its own (cluster.go: bridges in a cluster).
		host = s.cluster.cfg.NodeName
	}
	cfg := c.WithDefaults(host)
	b := &bridgeRun{srv: s, given: c, cfg: cfg, id: bridgeIDPrefix + cfg.Name,
		stop: make(chan struct{}), done: make(chan struct{}), since: time.Now()}
	maxBytes := cfg.MaxQueuedBytes
	if c.MaxQueuedBytes == 0 {
		// Counted in the total like every queue: by default a bridge may
		// take half of it, so one long outage leaves the clients' queues
		// room.
		maxBytes = min(maxBytes, max(s.opts.Limits.MaxQueuedBytesTotal/2, 1))
	}
	b.maxBytes = maxBytes
	b.lim = session.Config{
		MaxInflight:    cmp.Or(cfg.MaxInflight, s.opts.Limits.MaxInflight),
		MaxQueued:      cfg.MaxQueuedMessages,
		MaxQueuedBytes: maxBytes,
		QueueQoS0:      cfg.QueueQoS0,
		MaxAwaitingRel: s.opts.Limits.MaxAwaitingRel,
	}.Limits()
	for _, a := range cfg.Addresses {
		addr, _ := bridge.ParseAddress(a) // Validate checked them
		b.addrs = append(b.addrs, addr)
	}
	t := cfg.TLS
	b.tls, b.tlsErr = listeners.ClientTLS(t.CAFile, t.CertFile, t.KeyFile, t.ServerName, t.ALPN, t.Insecure)
	if b.tlsErr != nil {
		b.tlsErr = fmt.Errorf("bridge %s: tls: %w", cfg.Name, b.tlsErr)
	}
	return b
}

// bridgesOf returns the bridges by session id; nil when there are none.
func (s *Server) bridgesOf() map[string]*bridgeRun {
	if m := s.bridges.Load(); m != nil {
		return *m
	}
	return nil
}

// sessionLimits are the limits of the session of client id: a bridge's
// own, or those every client shares.
func (s *Server) sessionLimits(id string) *session.Limits {
	if b := s.bridgesOf()[id]; b != nil {
		return b.lim
	}
	return s.sessLim
}

// openBridges makes the bridges' runs, at New before restore, so that
// their sessions are restored with their own limits.
func (s *Server) openBridges() {
	if len(s.opts.Bridges) == 0 {
		return
	}
	m := make(map[string]*bridgeRun, len(s.opts.Bridges))
	for _, c := range s.opts.Bridges {
		b := s.newBridgeRun(c)
		m[b.id] = b
	}
	s.bridges.Store(&m)
}

// settleBridges runs after restore: each bridge gets its session (kept
// from before, or new) with its out rules as subscriptions, and sessions
// of bridges no longer configured are dropped with what they queued.
func (s *Server) settleBridges() {
	bridges := s.bridgesOf()
	s.mu.Lock()
	var gone []*client
	for cl := range s.clients.All {
		id := cl.id
		if strings.HasPrefix(id, bridgeIDPrefix) && bridges[id] == nil {
			gone = append(gone, cl)
		}
	}
	s.mu.Unlock()
	if len(gone) == 0 && len(bridges) == 0 {
		return
	}
	for _, cl := range gone {
		s.dropBridgeSession(cl)
	}
	for _, id := range slices.Sorted(maps.Keys(bridges)) {
		s.openBridgeSession(bridges[id])
	}
	if s.dur != nil {
		s.dur.commit.Sync()
	}
}

// dropBridgeSession ends the session of a bridge no longer configured.
func (s *Server) dropBridgeSession(cl *client) {
	s.mu.Lock()
	if s.clients.Get(cl.id) != cl {
		s.mu.Unlock()
		return
	}
	cl.mu.Lock()
	queued := cl.sess.Queued() + cl.sess.Inflight()
	cl.mu.Unlock()
	filters := s.dropSessionLocked(cl)
	s.clients.Remove(cl.id)
	s.mu.Unlock()
	s.unsubscribeAll(cl, filters)
	s.log.Warn().Str("bridge", strings.TrimPrefix(cl.id, bridgeIDPrefix)).Int("dropped", queued).
		Msg("bridge no longer configured: its session and the messages it held for the remote are dropped")
}

// openBridgeSession gives b its session, and makes the session's
// subscriptions b's out rules: No Local, so that nothing the bridge
// brought in goes back out, and Retain As Published, so that the remote
// gets retained messages as such.
func (s *Server) openBridgeSession(b *bridgeRun) {
	s.mu.Lock()
	cl := s.clients.Get(b.id)
	if cl == nil {
		cl = &client{id: b.id, sess: session.New(b.lim)}
		s.clients.Put(cl)
		s.stats.sessions.Add(1)
	}
	cl.mu.Lock()
	cl.bridge.Store(b)
	cl.sess.SetLimits(b.lim)
	cl.who.Store(nil) // the broker's own: trusted
	if at := cl.sess.ExpireAt(); at != 0 {
		s.expiry.cancel(cl, at) // lasts while configured
		cl.sess.SetExpireAt(0)
	}
	if s.dur != nil && !cl.stored {
		cl.stored = true
		s.dur.oneLocked(persistence.PutSession(persistence.Session{ID: b.id, Version: byte(packets.V5),
			Expiry: bridgeExpiry, Listener: bridgeListener}), nil)
	}
	want := map[string]subOpts{}
	for _, r := range b.cfg.Topics {
		if r.Goes() {
			want[r.LocalFilter()] = subOpts{qos: r.QoSOrDefault(), noLocal: true, retainAsPub: true}
		}
	}
	var stale []string
	cl.sess.Subscriptions(func(sub session.Subscription) {
		if _, ok := want[sub.Filter]; !ok {
			stale = append(stale, sub.Filter)
		}
	})
	for _, f := range stale {
		cl.sess.Unsubscribe(f)
		if cl.stored {
			s.dur.oneLocked(persistence.DeleteSubscription(b.id, f), nil)
		}
	}
	for _, f := range slices.Sorted(maps.Keys(want)) {
		opts := want[f]
		isNew, err := s.addSubscription(f, cl, opts)
		if err != nil {
			s.log.Error().Err(err).Str("bridge", b.cfg.Name).Str("filter", f).Msg("bridge rule not subscribed")
			continue
		}
		if isNew {
			s.stats.subscriptions.Add(1)
		}
		cl.sess.Subscribe(session.Subscription{Filter: f, Options: opts.options()})
		if cl.stored {
			s.dur.oneLocked(persistence.PutSubscription(b.id, persistence.Subscription{Filter: f, Options: opts.options()}), nil)
		}
	}
	s.accountQueueLocked(cl)
	cl.mu.Unlock()
	s.mu.Unlock()
	for _, f := range stale {
		if s.removeSubscription(f, cl) {
			s.stats.subscriptions.Add(-1)
		}
	}
}

// SetBridges applies a new list of bridges to the running broker (a
// reload): a new bridge starts, a removed one stops and its session and
// queue are dropped, a changed one reconnects with its new settings and
// keeps its queue. It returns the names of each, or every problem with
// the list, changing nothing.
func (s *Server) SetBridges(list []bridge.Config) (added, changed, removed []string, err error) {
	if errs := bridge.Validate(list); len(errs) > 0 {
		return nil, nil, nil, errors.Join(errs...)
	}
	s.bridgesMu.Lock()
	defer s.bridgesMu.Unlock()
	if s.bridgesStopped {
		return nil, nil, nil, ErrServerClosed
	}
	old := s.bridgesOf()
	next := make(map[string]*bridgeRun, len(list))
	var starting []*bridgeRun
	for _, c := range list {
		id := bridgeIDPrefix + c.Name
		if b := old[id]; b != nil && reflect.DeepEqual(b.given, c) {
			next[id] = b
			continue
		}
		b := s.newBridgeRun(c)
		next[id] = b
		starting = append(starting, b)
		if old[id] != nil {
			changed = append(changed, c.Name)
		} else {
			added = append(added, c.Name)
		}
	}
	s.bridges.Store(&next)
	for id, b := range old {
		if next[id] == b {
			continue
		}
		b.halt()
		if next[id] == nil {
			removed = append(removed, b.cfg.Name)
			s.mu.Lock()
			cl := s.clients.Get(id)
			s.mu.Unlock()
			if cl != nil {
				s.dropBridgeSession(cl)
			}
		}
	}
	for _, b := range starting {
		s.openBridgeSession(b)
	}
	s.mu.Lock()
	serving := s.serving
	s.mu.Unlock()
	for _, b := range starting {
		if serving {
			b.start()
		}
	}
	slices.Sort(added)
	slices.Sort(changed)
	slices.Sort(removed)
	return added, changed, removed, nil
}

// startBridges starts every bridge's link, at Serve.
func (s *Server) startBridges() {
	for _, b := range s.bridgesOf() {
		b.start()
	}
}

// stopBridges stops every link and waits for them, at Shutdown; no
// SetBridges starts one after.
func (s *Server) stopBridges() {
	s.bridgesMu.Lock()
	defer s.bridgesMu.Unlock()
	s.bridgesStopped = true
	for _, b := range s.bridgesOf() {
		b.halt()
	}
}

// halt stops the link and waits for its goroutine, if it ran.
func (b *bridgeRun) halt() {
	ran := true
	b.started.Do(func() { ran = false })
	select {
	case <-b.stop:
	default:
		close(b.stop)
	}
	if ran {
		<-b.done
	}
}

// makeRoom handles a message the bridge's queue had no room for, under
// the session's lock. With drop_oldest it drops the oldest queued message
// and reports true, for the caller to deliver again; otherwise the new
// message is dropped (counted by the caller) and, with block_publishers,
// the bridge is marked full so that publishers are refused until there
// is room.
func (b *bridgeRun) makeRoom(cl *client) bool {
	s := b.srv
	if b.cfg.QueuePolicy == bridge.DropOldest {
		if o, ok := cl.sess.DropOldest(&s.queueBudget); ok {
			if cl.stored {
				s.dur.oneLocked(persistence.DeleteOutbound(cl.id, o.Seq), nil)
			}
			b.stats.dropped[bridgeDropOldest].Add(1)
			s.stats.dropped[dropQueueFull].Add(1)
			s.dlq.add(letterQueueFull, o.Msg, o.QoS, cl.id, int(o.Sends))
			s.accountQueueLocked(cl)
			return true
		}
	}
	if b.cfg.QueuePolicy == bridge.BlockPublishers {
		b.full.Store(true)
		s.bridgeFull.Store(true)
	}
	b.stats.dropped[bridgeDropNew].Add(1)
	return false
}

// queuedLocked notes a message queued for the bridge, under the session's
// lock: with block_publishers, a queue now at its bound refuses the next
// publishers before they are acknowledged, instead of the next message
// being acknowledged and dropped.
func (b *bridgeRun) queuedLocked(cl *client) {
	if b.cfg.QueuePolicy == bridge.BlockPublishers && b.atBoundLocked(cl) {
		b.full.Store(true)
		b.srv.bridgeFull.Store(true)
	}
}

// atBoundLocked reports whether the bridge's queue is at its bound, under
// the session's lock.
func (b *bridgeRun) atBoundLocked(cl *client) bool {
	return cl.sess.Queued() >= b.cfg.MaxQueuedMessages || int64(cl.sess.QueuedBytes()) >= b.maxBytes-int64(session.EntryCost)
}

// bridgeBlocks reports whether a QoS 1/2 message to topic must be refused to
// its publisher: a block_publishers bridge that would take it has a full
// queue. Called for every such PUBLISH only while some bridge may be
// full (Server.bridgeFull), which it clears when none is.
func (s *Server) bridgeBlocks(topic string) bool {
	anyFull := false
	defer func() {
		if !anyFull {
			s.bridgeFull.Store(false)
		}
	}()
	for _, b := range s.bridgesOf() {
		if !b.full.Load() {
			continue
		}
		anyFull = true
		if _, _, ok := b.cfg.ToRemote(topic); !ok {
			continue
		}
		if b.stillFull() {
			b.stats.dropped[bridgeRefused].Add(1)
			return true
		}
	}
	return false
}

// stillFull looks again whether the queue is at its bound, clearing full
// when it is not.
func (b *bridgeRun) stillFull() bool {
	s := b.srv
	s.mu.Lock()
	cl := s.clients.Get(b.id)
	s.mu.Unlock()
	if cl == nil {
		b.full.Store(false)
		return false
	}
	cl.mu.Lock()
	full := b.atBoundLocked(cl)
	cl.mu.Unlock()
	if !full {
		b.full.Store(false)
	}
	return full
}

// setState records a change of the link's state: logged, published to
// the state topic, and shown by Bridges.
func (b *bridgeRun) setState(connected bool, address string, err error) {
	b.mu.Lock()
	changed := b.connected.Load() != connected
	b.connected.Store(connected)
	b.address = address
	if err != nil {
		b.lastErr = err.Error()
	}
	if changed {
		b.since = time.Now()
	}
	b.mu.Unlock()
	if changed {
		b.publishState(connected)
	}
}

// publishState retains the bridge's state on its state topic, as
// Mosquitto's notifications do.
func (b *bridgeRun) publishState(connected bool) {
	if b.cfg.StateTopic == "-" {
		return
	}
	v := "disconnected"
	switch {
	case connected && b.cfg.StateNumeric:
		v = "1"
	case connected:
		v = "connected"
	case b.cfg.StateNumeric:
		v = "0"
	}
	s := b.srv
	s.publish(newMessage(b.cfg.StateTopic, []byte(v), 1, true, &packets.Properties{}, b.id), nil)
}

// BridgeState is one bridge as Server.Bridges shows it.
type BridgeState struct {
	Name      string `json:"name"`
	Connected bool   `json:"connected"`
	// Address is the remote address connected to, or the last tried.
	Address string `json:"address"`
	// Since is when the bridge last connected or disconnected.
	Since time.Time `json:"since"`
	// LastError is why the last connection attempt failed or the last
	// connection ended.
	LastError string `json:"last_error,omitempty"`
	// Queued and QueuedBytes are the messages waiting to go out; Inflight
	// those sent and not yet acknowledged by the remote.
	Queued       int    `json:"queued"`
	QueuedBytes  int    `json:"queued_bytes"`
	Inflight     int    `json:"inflight"`
	ForwardedOut uint64 `json:"forwarded_out"`
	ForwardedIn  uint64 `json:"forwarded_in"`
	Connects     uint64 `json:"connects"`
	Failures     uint64 `json:"connect_failures"`
	// Dropped counts the messages the bridge dropped, by reason.
	Dropped map[string]uint64 `json:"dropped"`
}

// Bridges returns the state of every configured bridge, by name.
func (s *Server) Bridges() []BridgeState {
	bridges := s.bridgesOf()
	out := make([]BridgeState, 0, len(bridges))
	for _, b := range bridges {
		out = append(out, b.state())
	}
	slices.SortFunc(out, func(a, b BridgeState) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (b *bridgeRun) state() BridgeState {
	st := BridgeState{Name: b.cfg.Name, Connected: b.connected.Load(),
		ForwardedOut: b.stats.forwardedOut.Load(), ForwardedIn: b.stats.forwardedIn.Load(),
		Connects: b.stats.connects.Load(), Failures: b.stats.failures.Load(), Dropped: map[string]uint64{}}
	for i, name := range bridgeDropNames {
		st.Dropped[name] = b.stats.dropped[i].Load()
	}
	b.mu.Lock()
	st.Address, st.LastError, st.Since = b.address, b.lastErr, b.since
	b.mu.Unlock()
	s := b.srv
	s.mu.Lock()
	cl := s.clients.Get(b.id)
	s.mu.Unlock()
	if cl != nil {
		cl.mu.Lock()
		st.Queued, st.QueuedBytes, st.Inflight = cl.sess.Queued(), cl.sess.QueuedBytes(), cl.sess.Inflight()
		cl.mu.Unlock()
	}
	return st
}
