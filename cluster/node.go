package cluster

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"mqttd/packets"
	"mqttd/persistence"
	"mqttd/topictrie"
)

// Message is a message crossing from one node to the others.
type Message struct {
	// Topic is the MQTT topic name.
	Topic string
	// Payload is the application message.
	Payload []byte
	// QoS is the publication's QoS, 0 to 2.
	QoS byte
	// Retain is the PUBLISH's retain flag.
	Retain bool
	// Properties are the 5.0 properties the subscribers get (nil: none);
	// subscription identifiers and topic alias never travel, nor any
	// property a PUBLISH may not carry.
	Properties *packets.Properties
	// Origin is the publishing client's id, for No Local on the receiving
	// node.
	Origin string
	// Age is, for a retained message read from the replicated stream,
	// how long ago the stream took it: its Message Expiry Interval has
	// run that much.
	Age time.Duration
	// Group and Filter are set on a message received through a shared
	// subscription (WantShared): it is for that share group only.
	Group, Filter string
	// Stamp is a QoS 2 message's (NewStamp), which a copy sent again
	// keeps; zero: none.
	Stamp persistence.Stamp
}

// Bounds of the outgoing queue between Publish and the NATS connection,
// past which Publish drops the message (Stats.DroppedOut) and
// PublishWaiting waits, and of the queue of received messages waiting
// for deliver, past which they are dropped (Stats.DroppedIn). A node
// whose queue passes PauseHigh pauses the others' sending (pause.go)
// long before.
const (
	// OutQueueMessages is the most messages queued for NATS.
	OutQueueMessages = 8192
	// OutQueueBytes is the most bytes (records, and subject, header and
	// payload of those on their own subject) queued for NATS.
	OutQueueBytes = 16 << 20
	// InQueueMessages is the most messages of the share groups received
	// from NATS waiting for deliver: PauseHigh, and room for what was on
	// its way when the node paused the others and for nats.go's reader
	// outrunning the delivery goroutine while the scheduler runs it alone
	// (the queue is a channel: its 512 KiB are allocated at Start).
	InQueueMessages = 65536
	// InQueueBytes is the most bytes of batches from other nodes waiting
	// for deliver, kept as they came (a record is the message and a few
	// bytes): the room past PauseHigh messages for what was on its way,
	// a pause's round trip at the senders' full rate.
	InQueueBytes = 32 << 20
	// inBatches bounds the batches waiting (a channel: its 192 KiB are
	// allocated at Start).
	inBatches = 8192
)

// Errors of Publish. Each is counted in Stats and logged (rate-limited)
// by the node: the caller needs to do nothing about them.
var (
	// ErrClosed is returned by Publish after Close.
	ErrClosed = errors.New("cluster: node closed")
	// ErrQueueFull is returned when the outgoing queue is at a bound.
	ErrQueueFull = errors.New("cluster: outgoing queue full")
	// ErrTooLong is returned for a topic whose subject exceeds
	// MaxSubjectLen.
	ErrTooLong = errors.New("cluster: topic too long for a NATS subject")
)

// Node is this broker's membership of the cluster: one NATS connection,
// and the embedded NATS server when configured.
type Node struct {
	name    string
	cluster string
	// stampNode and stamps make NewStamp's stamps: a number drawn at the
	// node's start, and a counter.
	stampNode uint64
	stamps    atomic.Uint64
	log       zerolog.Logger
	deliver   func(*Message)
	// decoded is the delivery goroutine's room for a batch's messages,
	// reused (deliverBatch).
	decoded []Message
	nc      *nats.Conn
	emb     embedded

	mu sync.Mutex
	// batchSub is the subscription to this node's batches; its drops
	// move to stats.droppedIn at Close (retired, mu).
	batchSub *nats.Subscription
	retired  bool
	shared   shares
	// routes is the route table (routes.go).
	routes routes

	out      chan outItem
	outBytes atomic.Int64
	// in is the share groups' messages, batches the other nodes'
	// batches, inMsgs the messages of those waiting for deliver.
	in          chan *nats.Msg
	batches     chan inBatch
	inMsgs      atomic.Int64
	inBytes     atomic.Int64
	stopOut     chan struct{}
	stopIn      chan struct{}
	sendDone    chan struct{}
	deliverDone chan struct{}
	closed      atomic.Bool
	once        sync.Once
	closeErr    error
	ncClosed    chan struct{}

	stats counters
	warn  throttle
	// flow is the flow control between nodes (pause.go).
	flow flow

	// store is the replicated store (owner.go), nil until bound;
	// storeDone is closed when bindStore returns.
	store     atomic.Pointer[kvStore]
	storeDone chan struct{}
	owned     ownership
	releases  chan release
	// releaserDone is closed when releaser returns.
	releaserDone chan struct{}

	// Liveness (liveness.go): the beat goroutine and the hooks it runs,
	// one at a time (hookMu), all waited for by Close (live).
	timeout     time.Duration
	replicas    int // Config.Replicas
	hooks       Hooks
	hookMu      sync.Mutex
	live        sync.WaitGroup
	cut         atomic.Bool
	stopLive    chan struct{}
	nodesAlive  atomic.Int64
	publishWill func(data []byte)
	// incarnation and willSeq make each will record's key unique.
	incarnation string
	willSeq     atomic.Uint64

	// Retained messages replicated (retained.go): keep is the broker's
	// keeper, retainedRead the stream's reader (mu).
	keep func(*Message)
	// The keeper (kept.go) writes retained messages to the stream.
	kept           chan keptMsg
	keptSeq        uint64 // of the send goroutine
	stopKeep       chan struct{}
	keeperDone     chan struct{}
	retainedLimits RetainedLimits
	retainedRead   jetstream.ConsumeContext

	// Confirmed sends (confirm.go): the batches waiting for an answer,
	// and what the node calls to answer those it receives.
	confirms   confirmer
	delivering func()
	committed  func(answer func(ok bool))
	ackTo      string // ackSubject of this node
	deadGrace  time.Duration

	// fences are, for each node found dead, the owners bucket's last
	// revision before it was (liveness.go): ClaimFrom takes no record
	// written since, by the node's next life or a reconnecting client.
	fenceMu sync.Mutex
	fences  map[string]uint64
	// gone takes the names of nodes that said goodbye to the liveness
	// goroutine, which takes them over (left).
	gone chan string
	// handedBack lists the dead nodes whose takeover this node gave up,
	// cut off from the store while sweeping them: the watch finds them
	// dead afresh once the store answers (takeOver).
	handBackMu sync.Mutex
	handedBack []string
}

// embedded is the NATS server a node runs in its process
// (embedded_natsserver.go).
type embedded interface {
	clientURL() string
	routeAddr() string
	shutdown()
}

// Start connects (starting the embedded server first when configured) and
// returns once connected, or an error within a bounded time (a few
// seconds per URL). deliver is called for each message another node
// sent this one (a filter this node wants matched it, or a share group
// of this node's was chosen for it), on the node's one delivery
// goroutine, each node's in the order it sent them; it must not block
// for long: past the pause marks the node pauses the others' sending
// (pause.go), and past InQueueBytes messages are dropped. A message's
// Topic and Payload may share the memory of the batch it came in, which
// nothing changes: deliver copies them when it keeps them past the
// call, so that a small message does not hold a whole batch; m itself
// is reused once deliver returns. deliver is never called for this
// node's own messages.
func Start(cfg Config, log zerolog.Logger, deliver func(*Message)) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deliver == nil {
		return nil, errors.New("cluster: Start without a deliver function")
	}
	if cfg.NodeName == "" {
		host, err := os.Hostname()
		if err != nil || validNodeName(host) != nil || host == "" {
			return nil, fmt.Errorf("cluster.node_name: not set and no usable host name (%v)", err)
		}
		cfg.NodeName = host
	}
	if cfg.NodeTimeout == 0 {
		cfg.NodeTimeout = DefaultNodeTimeout
	}
	n := &Node{
		stampNode: newStampNode(),
		name:      cfg.NodeName,
		cluster:   cfg.Name,
		log:       log.With().Str("component", "cluster").Str("node", cfg.NodeName).Logger(),
		deliver:   deliver,
		out:       make(chan outItem, OutQueueMessages),
		in:        make(chan *nats.Msg, InQueueMessages),
		batches:   make(chan inBatch, inBatches),
		stopOut:   make(chan struct{}),
		stopIn:    make(chan struct{}),
		ncClosed:  make(chan struct{}),

		storeDone: make(chan struct{}),
		owned:     ownership{ids: map[string]uint64{}},
		releases:  make(chan release, releaseQueue),

		releaserDone:   make(chan struct{}),
		timeout:        cfg.NodeTimeout,
		replicas:       cfg.Replicas,
		retainedLimits: cfg.Retained,
		stopLive:       make(chan struct{}),
		gone:           make(chan string, 16),
		kept:           make(chan keptMsg, keptQueue),
		stopKeep:       make(chan struct{}),
		keeperDone:     make(chan struct{}),
		incarnation:    strconv.FormatInt(time.Now().UnixNano(), 36) + "-",

		sendDone:    make(chan struct{}),
		deliverDone: make(chan struct{}),
	}
	url := cfg.NATS.URL
	if cfg.NATS.Embedded != nil {
		emb, err := startEmbedded(cfg, n.log)
		if err != nil {
			return nil, err
		}
		n.emb, url = emb, emb.clientURL()
	}
	nc, err := nats.Connect(url, n.options()...)
	if err != nil {
		if n.emb != nil {
			n.emb.shutdown()
		}
		return nil, fmt.Errorf("cluster: connecting to NATS at %s: %w", url, err)
	}
	n.nc = nc
	if err := n.subscribe(); err != nil {
		nc.Close()
		if n.emb != nil {
			n.emb.shutdown()
		}
		return nil, err
	}
	n.log.Info().Str("nats", nc.ConnectedUrlRedacted()).Str("cluster", cfg.Name).Msg("cluster node connected")
	n.live.Add(1)
	go n.routesLoop()
	go n.sendLoop()
	go n.deliverLoop()
	go n.bindStore(cfg.Replicas)
	go n.keeper()
	go n.releaser()
	return n, nil
}

// subscribe makes the main connection's subscriptions: this node's
// batches and the answers to those it sent, the route table's and the
// flow control's.
func (n *Node) subscribe() error {
	sub, err := n.nc.Subscribe(batchSubject(n.cluster, n.name), n.onBatch)
	if err != nil {
		return fmt.Errorf("cluster: subscribing to this node's messages: %w", err)
	}
	n.batchSub = sub
	n.ackTo = ackSubject(n.cluster, n.name)
	if _, err := n.nc.Subscribe(n.ackTo, n.onAck); err != nil {
		return fmt.Errorf("cluster: subscribing to answers: %w", err)
	}
	if _, err := n.nc.Subscribe(n.ackTo+".s.*", n.onSharedAck); err != nil {
		return fmt.Errorf("cluster: subscribing to answers: %w", err)
	}
	if _, err := n.nc.Subscribe(aliveSubject(n.cluster, n.name), n.onAlive); err != nil {
		return fmt.Errorf("cluster: subscribing to liveness questions: %w", err)
	}
	if err := n.startRoutes(); err != nil {
		return fmt.Errorf("cluster: subscribing to the route table: %w", err)
	}
	if err := n.startFlow(); err != nil {
		return fmt.Errorf("cluster: subscribing to the flow control: %w", err)
	}
	return nil
}

// options are the NATS connection's: reconnect forever with a bounded
// backoff, detect a dead server within seconds, never echo.
func (n *Node) options() []nats.Option {
	return []nats.Option{
		nats.Name("mqttd " + n.cluster + "/" + n.name),
		nats.NoEcho(),
		nats.Timeout(2 * time.Second),
		nats.MaxReconnects(-1),
		// Nothing is kept to be sent once reconnected: a store operation
		// or a confirmed send that timed out meanwhile, and that its caller
		// counted as failed (a will taken out, never published; an owner
		// record written after its claim gave up), would otherwise take
		// effect later. Publishes fail at once while disconnected.
		nats.ReconnectBufSize(-1),
		nats.CustomReconnectDelay(reconnectDelay),
		nats.PingInterval(5 * time.Second),
		nats.MaxPingsOutstanding(2),
		nats.FlusherTimeout(5 * time.Second),
		nats.DrainTimeout(drainTimeout),
		nats.DisconnectErrHandler(n.disconnected),
		nats.ReconnectHandler(n.reconnected),
		nats.ClosedHandler(func(*nats.Conn) { close(n.ncClosed) }),
		nats.ErrorHandler(n.asyncError),
	}
}

// drainTimeout bounds Close's wait for the connection to drain.
const drainTimeout = 5 * time.Second

// reconnectDelay doubles from 50 ms to 2 s with each failed round over
// the servers, with up to a quarter of jitter.
func reconnectDelay(attempts int) time.Duration {
	d := 2 * time.Second
	if attempts < 6 {
		d = 50 * time.Millisecond << attempts
	}
	return d + time.Duration(time.Now().UnixNano()%int64(d/4+1))
}

func (n *Node) disconnected(_ *nats.Conn, err error) {
	if n.closed.Load() {
		return
	}
	n.log.Warn().Err(err).Msg("cluster: NATS connection lost, reconnecting")
}

// reconnected logs before it counts, so that whoever sees the count sees
// the log line.
func (n *Node) reconnected(nc *nats.Conn) {
	n.log.Info().Str("nats", nc.ConnectedUrlRedacted()).Msg("cluster: NATS connection restored")
	n.stats.reconnects.Add(1)
}

func (n *Node) asyncError(_ *nats.Conn, _ *nats.Subscription, err error) {
	// nats.go reports a slow consumer once per episode: Stats counts
	// every drop from the subscriptions.
	if n.warn.allow() {
		n.log.Warn().Err(err).Msg("cluster: NATS error (a slow consumer drops messages from other nodes)")
	}
}

// Name is the node name.
func (n *Node) Name() string { return n.name }

// ClientURL is the NATS URL the node is connected to, or "" while it is
// disconnected.
func (n *Node) ClientURL() string { return n.nc.ConnectedUrl() }

// RouteAddr is the embedded server's route listener address (host:port,
// the port it got when configured as 0), or "" without an embedded server.
func (n *Node) RouteAddr() string {
	if n.emb == nil {
		return ""
	}
	return n.emb.routeAddr()
}

// wantedTopic is the topic filter a filter is wanted as, and false for a
// filter no other node publishes to: an invalid one, or one matching only
// topics that do not cross (Crosses).
func wantedTopic(filter string) (string, bool) {
	f, err := topictrie.ParseFilter(filter)
	if err != nil || !Crosses(f.Topic) {
		return "", false
	}
	return f.Topic, true
}

// sharedDollar is the one tree of '$' topics that goes between nodes:
// the broker's dead letters, which a cluster sets aside as one broker.
const sharedDollar = "$DLQ/"

// Crosses reports whether messages on topic (or matching a filter whose
// topic part it is) go between nodes: all but those of the broker's own
// '$' topics, which are each node's ($SYS), the dead letters ($DLQ/)
// aside.
func Crosses(topic string) bool {
	return !strings.HasPrefix(topic, "$") || strings.HasPrefix(topic, sharedDollar)
}

// Want counts one more of this node's subscriptions to filter; the first
// announces it to the other nodes (routes.go), which send this node the
// messages it matches. A shared filter ($share/group/f) given to Want is
// wanted as f, for every message; a share group spanning nodes is
// WantShared's. Filters of topics that do not cross are ignored.
func (n *Node) Want(filter string) {
	if topic, ok := wantedTopic(filter); ok && !n.closed.Load() {
		n.announce(routeKey{filter: topic}, 1)
	}
}

// Unwant counts one fewer of this node's subscriptions to filter; the
// last announces its removal. Unwant of a filter not wanted is a no-op.
func (n *Node) Unwant(filter string) {
	if topic, ok := wantedTopic(filter); ok {
		n.announce(routeKey{filter: topic}, -1)
	}
}

// droppedIn counts the messages from other nodes dropped because deliver
// fell behind: by nats.go (the batch subscription's pending bound) and by
// onBatch.
func (n *Node) droppedIn() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	d := n.stats.droppedIn.Load()
	if !n.retired {
		if live, err := n.batchSub.Dropped(); err == nil {
			d += uint64(live)
		}
	}
	return d
}

// newStampNode draws a node's stamp number: random, so that no two
// starts of any node share one, and never 0 (no stamp).
func newStampNode() uint64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:])
		if v := binary.BigEndian.Uint64(b[:]); v != 0 {
			return v
		}
	}
}

// NewStamp returns a stamp no other message of the cluster has, for an
// inbound QoS 2 message (persistence.Stamp).
func (n *Node) NewStamp() persistence.Stamp {
	return persistence.Stamp{Node: n.stampNode, Seq: n.stamps.Add(1)}
}
