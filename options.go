package mqttd

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"mqttd/auth"
	"mqttd/bridge"
	"mqttd/cluster"
	"mqttd/persistence"
	"mqttd/session"
)

// Options configures a Server. The zero value of every field means its
// default; New fills defaults into a copy and never changes the caller's
// value.
type Options struct {
	// Listeners are opened by Server.Listen. Listeners added with
	// AddListener need no entry here.
	Listeners []ListenerConfig `yaml:"listeners"`
	// DataDir holds the broker's durable state, in the bbolt file
	// StoreFile: persistent sessions with their subscriptions, queued and
	// in-flight messages, and retained messages. A QoS 1/2 message such
	// state must keep is acknowledged only once it is committed there.
	// Empty (the library's default) keeps nothing; the mqttd command's
	// default is ./data. Store replaces it.
	DataDir string `yaml:"data_dir"`
	// Durability says when the store's commits reach the disk: "sync"
	// (the default) fsyncs each commit before the acknowledgements it
	// covers go out, so nothing acknowledged is lost to a crash or a power
	// cut; commits are grouped, one fsync for every connection waiting.
	// "interval" acknowledges once a commit is written and fsyncs at most
	// a second later: a crash of mqttd loses nothing, a power cut the last
	// second and possibly the file (then see MoveAsideBadStore). "none"
	// never fsyncs: for throwaway state.
	Durability string `yaml:"durability"`
	// MoveAsideBadStore starts the broker empty when the store file cannot
	// be read (damaged or cut short), renaming it to mqttd.db.corrupt-TIME
	// for a look, instead of refusing to start.
	MoveAsideBadStore bool `yaml:"move_aside_bad_store"`
	// Store keeps the durable state instead of the bbolt file in DataDir:
	// for programs that embed the broker with a store of their own. The
	// broker does not close it.
	Store persistence.Store `yaml:"-"`
	// Limits bound what clients may do and what the broker keeps for them.
	Limits Limits `yaml:"limits"`
	// Bridges connect the broker to remote brokers, carrying topics out,
	// in or both ways; messages going out are stored until the remote
	// has them (bridge.go).
	Bridges []bridge.Config `yaml:"bridges"`
	// Cluster makes the broker a node of a cluster of brokers serving as
	// one over NATS (cluster.go); nil: a broker on its own, which pays
	// nothing for it.
	Cluster *cluster.Config `yaml:"cluster"`
	// Protocol tunes MQTT 5.0 features.
	Protocol Protocol `yaml:"protocol"`
	// DeadLetters sets aside, on $DLQ/, the QoS 1/2 messages the broker
	// gives up on (deadletter.go).
	DeadLetters DeadLetters `yaml:"dead_letters"`
	// SysInterval is how often the broker publishes its $SYS/broker/
	// topics (Mosquitto's names: clients, messages, bytes, load, uptime,
	// ...), each only when its value changed, and none while nobody
	// subscribes to $SYS. 0 means DefaultSysInterval; a negative value
	// (-1s in the YAML file) turns $SYS off, as sys_interval 0 does in
	// Mosquitto.
	SysInterval time.Duration `yaml:"sys_interval"`
	// Version and Commit name this build in $SYS/broker/version and the
	// mqttd_build_info metric. Empty means what Go's build information
	// says: the module's version (or "dev") and VCS revision.
	Version string `yaml:"-"`
	Commit  string `yaml:"-"`

	// Logger receives the broker's logs; the zero Logger discards them.
	Logger zerolog.Logger `yaml:"-"`
	// Registerer receives the broker's Prometheus collectors; nil means
	// none are registered (they are still counted).
	Registerer prometheus.Registerer `yaml:"-"`
	// Auth says who may connect (password file, anonymous clients) and
	// what they may do (ACL file).
	Auth Auth `yaml:"auth"`

	// Authenticator decides on each CONNECT instead of Auth's password
	// file and anonymous rules, for programs with their own accounts.
	Authenticator auth.Authenticator `yaml:"-"`
	// Authorizer decides on each publish, subscription, will and delivered
	// message instead of Auth's ACL file; nil (and no ACL file) allows
	// every topic but $SYS/.
	Authorizer auth.Authorizer `yaml:"-"`
	// AuthMethods are the enhanced authentication methods (MQTT 5.0 AUTH)
	// offered, by name; a client naming one authenticates through it
	// instead of the Authenticator, one naming another is refused with
	// CONNACK 0x8C.
	AuthMethods []auth.Method `yaml:"-"`
}

// Protocol tunes MQTT 5.0 features.
type Protocol struct {
	// ResponseInformation is the topic prefix a 5.0 client asking for
	// Response Information (Request Response Information 1) is given in
	// CONNACK, with its client id and a slash appended: where it may have
	// the responses to its requests sent (§4.10). Empty means
	// DefaultResponseInformation; "-" gives none.
	ResponseInformation string `yaml:"response_information"`
	// ServerReference, when set, sends every client elsewhere at CONNECT,
	// for a planned move: a 5.0 client gets CONNACK 0x9C (use another
	// server), or 0x9D (server moved) with ServerMoved, and this Server
	// Reference (§4.11); a 3.1/3.1.1 client, which cannot be told where,
	// CONNACK 3 (server unavailable).
	ServerReference string `yaml:"server_reference"`
	// ServerMoved makes the move permanent (0x9D) rather than temporary.
	ServerMoved bool `yaml:"server_moved"`
}

// DefaultSysInterval is the default Options.SysInterval, Mosquitto's.
const DefaultSysInterval = 10 * time.Second

// minSysInterval is the shortest SysInterval: shorter would keep a CPU
// busy publishing, and SysInterval: 10 is 10 ns, surely meant as seconds.
const minSysInterval = time.Millisecond

// DefaultResponseInformation is the default Protocol.ResponseInformation.
const DefaultResponseInformation = "responses/"

// Limits bound clients and the state the broker keeps for them.
type Limits struct {
	// MaxMemory is the memory the operator gives the broker, in bytes.
	// The byte limits below that are left at zero take their defaults
	// from it (see DeriveFromMemory), and past 7/8 of it in live heap the
	// broker is under memory pressure: it refuses new connections and
	// new retained messages, and drops QoS 0 messages for clients that
	// read slowly, before anything touches acknowledged QoS 1/2 data.
	// The default is a quarter of the machine's memory (or of the
	// cgroup's limit), at least 64 MiB and at most 512 MiB.
	MaxMemory int64 `yaml:"max_memory"`
	// MaxPacketSize is the largest packet accepted, in bytes, checked from
	// the fixed header before the body is read; a larger one closes the
	// connection (5.0: DISCONNECT 0x95), logged. The default is
	// MaxIncomingBytesTotal, between 1 and 16 MiB (defaultMaxPacketSize).
	MaxPacketSize int `yaml:"max_packet_size"`
	// MaxClientIDLength caps client identifiers, in bytes.
	MaxClientIDLength int `yaml:"max_client_id_length"`
	// MaxUsernameLength caps usernames, in bytes: a session keeps its
	// owner's username while offline, and each session is budgeted a few
	// KB (see DeriveFromMemory). A longer one is refused (5.0 CONNACK
	// 0x86, 3.1.1 4).
	MaxUsernameLength int `yaml:"max_username_length"`
	// ConnectTimeout is how long a new connection has to send CONNECT.
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
	// MaxKeepAlive is the largest keepalive, in seconds, a 5.0 client is
	// given: one asking for more, or for none, is told this one (Server
	// Keep Alive). 0 means DefaultMaxKeepAlive. 3.1/3.1.1 clients cannot
	// be told another keepalive and may ask for any, none included, as
	// many devices do (they get TCP keepalive probes, so that one that
	// lost power is still found out), unless RefuseKeepAliveV311 is set.
	MaxKeepAlive int `yaml:"max_keepalive"`
	// RefuseKeepAliveV311 refuses 3.1/3.1.1 clients asking for a keepalive
	// above the maximum, or for none, with CONNACK 2, as Mosquitto does.
	// Off by default: a device refused for its keepalive is locked out
	// until its firmware changes.
	RefuseKeepAliveV311 bool `yaml:"refuse_keepalive_v311"`
	// WriteTimeout disconnects a client that does not read what is sent to it.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// MaxOutboxBytes bounds the bytes waiting to be written to one
	// connection; past it QoS 0 deliveries are dropped and QoS 1/2 wait in
	// the session queue.
	MaxOutboxBytes int `yaml:"max_outbox_bytes"`
	// MaxOutboxBytesTotal bounds the bytes waiting to be written to all
	// connections together. Past it a connection already holding more
	// than outboxFloor takes no more: QoS 0 deliveries to it are dropped
	// and QoS 1/2 wait in its session queue (shared, counted once) until
	// writes free room.
	MaxOutboxBytesTotal int64 `yaml:"max_outbox_bytes_total"`
	// MaxIncomingBytesTotal bounds the bytes of packets that have started
	// to arrive and are not complete yet, across all connections: a
	// connection whose packet larger than 64 KiB would pass it is closed.
	MaxIncomingBytesTotal int64 `yaml:"max_incoming_bytes_total"`
	// FrameTimeout is how long a packet that has started to arrive may take
	// to complete; a connection that takes longer is closed.
	FrameTimeout time.Duration `yaml:"frame_timeout"`
	// MaxInflight is the outbound QoS 1/2 window per client.
	MaxInflight int `yaml:"max_inflight"`
	// MaxQueued bounds the messages queued per client beyond the window.
	MaxQueued int `yaml:"max_queued"`
	// MaxQueuedBytes bounds the topic, payload and properties bytes queued
	// per client, and what each queued entry costs besides its message
	// (session.EntryCost, 4 bytes per subscription identifier); past it,
	// or past MaxQueued, a message for the client is dropped and counted.
	MaxQueuedBytes int64 `yaml:"max_queued_bytes"`
	// MaxQueuedBytesTotal bounds the bytes queued for all clients together,
	// likewise. A message queued for many clients is shared and counts
	// once; each entry holding it counts its own cost.
	MaxQueuedBytesTotal int64 `yaml:"max_queued_bytes_total"`
	// QueueQoS0 keeps QoS 0 messages for offline persistent sessions.
	QueueQoS0 bool `yaml:"queue_qos0"`
	// MaxAwaitingRel bounds inbound QoS 2 messages awaiting PUBREL per client.
	MaxAwaitingRel int `yaml:"max_awaiting_rel"`
	// MaxTopicAlias is the Topic Alias Maximum a 5.0 client is given: the
	// aliases it may set on its PUBLISHes (an alias above it gets
	// DISCONNECT 0x94). Their topics are kept per connection, at most
	// 16 KiB of them (past it DISCONNECT 0x97).
	MaxTopicAlias int `yaml:"max_topic_alias"`
	// MaxTopicLevels caps the levels of a topic name or filter.
	MaxTopicLevels int `yaml:"max_topic_levels"`
	// MaxConnections bounds the open connections; past it a new one is
	// closed at accept, before anything is read from it.
	MaxConnections int `yaml:"max_connections"`
	// MaxConnectionsPerAddress bounds the open connections from one source
	// IPv4 address or IPv6 /64, so one device cannot take them all.
	// Connections from loopback addresses are not limited per address.
	MaxConnectionsPerAddress int `yaml:"max_connections_per_address"`
	// MaxUserProperties bounds the 5.0 user properties of a message (a
	// PUBLISH or a will): past it the PUBLISH is refused (PUBACK/PUBREC
	// 0x97; QoS 0 dropped), the will's CONNECT likewise (CONNACK 0x97).
	// Other packets' user properties past it are checked and skipped:
	// decoding all of them cost 35 MB for one packet of 1 MiB.
	MaxUserProperties int `yaml:"max_user_properties"`
	// MaxSessions bounds the sessions kept, online or not; a client that
	// needs a new one past it is refused (CONNACK 0x97, 3.1.1 3).
	MaxSessions int `yaml:"max_sessions"`
	// MaxSubscriptionsPerClient bounds the subscriptions one session
	// holds; past it a new filter is refused (SUBACK 0x97, 3.1.1 0x80).
	MaxSubscriptionsPerClient int `yaml:"max_subscriptions_per_client"`
	// MaxFilterLength caps a subscription's topic filter, in bytes; a
	// longer one is refused (SUBACK 0x8F, 3.1.1 0x80). The protocol allows
	// 65,535.
	MaxFilterLength int `yaml:"max_filter_length"`
	// MaxSubscriptionBytesPerClient bounds what one session's
	// subscriptions cost, as session.SubscriptionCost counts them (the
	// filter, its trie levels, the entries); past it a new filter is
	// refused (SUBACK 0x97, 3.1.1 0x80).
	MaxSubscriptionBytesPerClient int64 `yaml:"max_subscription_bytes_per_client"`
	// MaxSubscriptionBytesTotal bounds what the subscriptions of every
	// session cost together, likewise, except that past it a client may
	// still take subscriptions costing 32 KiB (a few dozen filters) from a
	// reserve of an eighth more, so that clients that filled it do not
	// lock every other client out. Under memory pressure no new
	// subscription is taken.
	MaxSubscriptionBytesTotal int64 `yaml:"max_subscription_bytes_total"`
	// MaxOverlappingSubscriptions bounds how many of one session's
	// wildcard subscriptions (plain or shared) may overlap a new one,
	// that is match some topic both match; past it the new filter is
	// refused (SUBACK 0x97, 3.1.1 0x80). So no topic matches more than
	// this many subscriptions of one client, plus one without wildcards:
	// each match costs CPU on every message and a subscription identifier
	// in every copy (10,000 overlapping filters cost 0.33 ms a publish).
	MaxOverlappingSubscriptions int `yaml:"max_overlapping_subscriptions"`
	// MaxSessionExpiry caps the Session Expiry Interval a 5.0 client may
	// ask for (a client asking for more is told the cap in CONNACK); an
	// offline session is dropped, with its queue and subscriptions, when
	// its interval has passed.
	MaxSessionExpiry time.Duration `yaml:"max_session_expiry"`
	// PersistentSessionExpiry is how long a 3.1/3.1.1 session with clean
	// session 0 is kept offline (Mosquitto's persistent_client_expiration).
	PersistentSessionExpiry time.Duration `yaml:"persistent_session_expiry"`
	// MaxRetained bounds the retained messages; past it a new retained
	// topic is refused (5.0 QoS 1/2: 0x97, not published) or, where the
	// client cannot be told, published but not retained.
	MaxRetained int `yaml:"max_retained"`
	// MaxRetainedBytes bounds the topic, payload and properties bytes of
	// the retained messages, likewise.
	MaxRetainedBytes int64 `yaml:"max_retained_bytes"`
	// RetainedSendRefill bounds the retained messages sent to a client for
	// its new subscriptions over time: each client id may be sent a
	// session's worth (MaxInflight + MaxQueued messages, MaxQueuedBytes
	// bytes) at once, and that allowance comes back over this time; past
	// it a subscription's retained messages are not sent.
	RetainedSendRefill time.Duration `yaml:"retained_send_refill"`
}

// Default values of Options.
const (
	DefaultAddress           = "127.0.0.1:1883"
	DefaultMaxClientIDLength = 256
	DefaultMaxUsernameLength = 1024
	DefaultConnectTimeout    = 10 * time.Second
	// DefaultMaxKeepAlive is the longest keepalive a 5.0 client is given
	// when limits.max_keepalive is 0: a device that lost power holds its
	// session at most 1.5 hours.
	DefaultMaxKeepAlive   = 3600
	DefaultWriteTimeout   = 30 * time.Second
	DefaultMaxOutboxBytes = 4 << 20
	DefaultMaxInflight    = session.DefaultMaxInflight
	DefaultMaxQueued      = session.DefaultMaxQueued
	DefaultMaxQueuedBytes = session.DefaultMaxQueuedBytes
	DefaultFrameTimeout   = 30 * time.Second
	DefaultMaxAwaitingRel = session.DefaultMaxAwaitingRel
	DefaultMaxTopicLevels = 128
	// DefaultMaxTopicAlias is Mosquitto's.
	DefaultMaxTopicAlias = 10
	// DefaultMaxConnections keeps the descriptors and memory idle clients
	// can take to about 50,000 x 3 KB, 150 MB.
	DefaultMaxConnections            = 50000
	DefaultMaxConnectionsPerAddress  = 1000
	DefaultMaxRetained               = 100000
	DefaultMaxSubscriptionsPerClient = 10000
	DefaultMaxFilterLength           = 4096
	// DefaultMaxSubscriptionBytesPerClient lets a client hold its 10,000
	// subscriptions of a few levels each.
	DefaultMaxSubscriptionBytesPerClient = 8 << 20
	DefaultMaxOverlappingSubscriptions   = 128
	DefaultMaxSessions                   = 100000
	DefaultMaxUserProperties             = 64
	DefaultMaxSessionExpiry              = 24 * time.Hour
	DefaultPersistentSessionExpiry       = 24 * time.Hour
	maxSessionExpiry                     = 0xFFFFFFFE * time.Second // 0xFFFFFFFF means "never" in 5.0
	maxProtocolPacketSize                = 268435455
	maxOutboxBytes                       = 1 << 30
)

// The bounds of limits.max_packet_size's default.
const (
	minDefaultMaxPacketSize = 1 << 20
	maxDefaultMaxPacketSize = 16 << 20
)

// defaultMaxPacketSize is limits.max_packet_size's default for a broker
// whose packets arriving may hold incoming bytes in all
// (limits.max_incoming_bytes_total): all of them, between 1 and 16 MiB.
// Firmware sent over MQTT (ESP32 images are 1-4 MB) needs packets of
// megabytes; 1 MiB refused them.
//
// What a larger packet lets clients make the broker hold: a packet's
// bytes are held while it arrives (at most limits.frame_timeout), and
// those of every packet over 64 KiB arriving count in
// max_incoming_bytes_total, past which the connection is closed. So one
// hostile client holds at most one packet of this size, and a hundred
// together no more than max_incoming_bytes_total, the others closed:
// the bound of the whole does not grow with this one. Once arrived, the
// message (its payload copied out of the frame) is held by the session
// queues and outboxes within max_queued_bytes_total and
// max_outbox_bytes_total, or by the retained store within
// max_retained_bytes; one that does not fit waits (QoS 1/2) or is
// dropped (QoS 0). A default above max_incoming_bytes_total would be
// promised to 5.0 clients in CONNACK and then refused as incoming_limit,
// so it is that share: 4 MiB at the 64 MiB budget of a machine of
// 256 MiB, room for a 4 MB image; 8 MiB at 128 MiB (a Pi Zero); 16 MiB
// from 256 MiB, where the cap leaves room for two at once in the
// 32 MiB share of the 512 MiB budget, since each one also costs its
// payload's copy and an outbox frame per subscriber.
func defaultMaxPacketSize(incoming int64) int {
	return int(min(max(incoming, minDefaultMaxPacketSize), maxDefaultMaxPacketSize))
}

// DefaultRetainedSendRefill is the default Limits.RetainedSendRefill: a
// client looping SUBSCRIBE "#" is sent about 1,700 retained messages and
// 280 KiB a second at the other defaults.
const DefaultRetainedSendRefill = time.Minute

// WithDefaults returns a copy of o with every zero field set to its default;
// New applies it, and it shows what a configuration amounts to.
func (o Options) WithDefaults() Options {
	o.Listeners = append([]ListenerConfig(nil), o.Listeners...)
	for i := range o.Listeners {
		if o.Listeners[i].Type == "" {
			o.Listeners[i].Type = "tcp"
		}
	}
	if o.Protocol.ResponseInformation == "" {
		o.Protocol.ResponseInformation = DefaultResponseInformation
	}
	setDefault(&o.SysInterval, DefaultSysInterval)
	if o.Version == "" || o.Commit == "" {
		version, commit := buildVersion()
		o.Version = cmp.Or(o.Version, version)
		o.Commit = cmp.Or(o.Commit, commit)
	}
	l := &o.Limits
	if l.MaxMemory == 0 {
		l.MaxMemory = DefaultMaxMemory()
	}
	d := DeriveFromMemory(l.MaxMemory)
	setDefault(&l.MaxClientIDLength, DefaultMaxClientIDLength)
	setDefault(&l.MaxUsernameLength, DefaultMaxUsernameLength)
	setDefault(&l.ConnectTimeout, DefaultConnectTimeout)
	setDefault(&l.WriteTimeout, DefaultWriteTimeout)
	setDefault(&l.MaxOutboxBytes, DefaultMaxOutboxBytes)
	setDefault(&l.MaxOutboxBytesTotal, d.MaxOutboxBytesTotal)
	setDefault(&l.MaxIncomingBytesTotal, d.MaxIncomingBytesTotal)
	setDefault(&l.MaxPacketSize, defaultMaxPacketSize(l.MaxIncomingBytesTotal))
	setDefault(&l.FrameTimeout, DefaultFrameTimeout)
	setDefault(&l.MaxInflight, DefaultMaxInflight)
	setDefault(&l.MaxQueued, DefaultMaxQueued)
	setDefault(&l.MaxQueuedBytes, DefaultMaxQueuedBytes)
	setDefault(&l.MaxQueuedBytesTotal, d.MaxQueuedBytesTotal)
	setDefault(&l.MaxAwaitingRel, DefaultMaxAwaitingRel)
	setDefault(&l.MaxTopicLevels, DefaultMaxTopicLevels)
	setDefault(&l.MaxTopicAlias, DefaultMaxTopicAlias)
	setDefault(&l.MaxConnections, d.MaxConnections)
	setDefault(&l.MaxConnectionsPerAddress, DefaultMaxConnectionsPerAddress)
	setDefault(&l.MaxRetained, DefaultMaxRetained)
	setDefault(&l.MaxSubscriptionsPerClient, DefaultMaxSubscriptionsPerClient)
	setDefault(&l.MaxFilterLength, DefaultMaxFilterLength)
	setDefault(&l.MaxSubscriptionBytesPerClient, DefaultMaxSubscriptionBytesPerClient)
	setDefault(&l.MaxSubscriptionBytesTotal, d.MaxSubscriptionBytesTotal)
	setDefault(&l.MaxOverlappingSubscriptions, DefaultMaxOverlappingSubscriptions)
	setDefault(&l.MaxSessions, d.MaxSessions)
	setDefault(&l.MaxUserProperties, DefaultMaxUserProperties)
	setDefault(&l.MaxSessionExpiry, DefaultMaxSessionExpiry)
	setDefault(&l.PersistentSessionExpiry, DefaultPersistentSessionExpiry)
	setDefault(&l.MaxRetainedBytes, d.MaxRetainedBytes)
	setDefault(&l.RetainedSendRefill, DefaultRetainedSendRefill)
	return o
}

func setDefault[T int | int64 | time.Duration](v *T, def T) {
	if *v == 0 {
		*v = def
	}
}

// Validate reports every problem with o at once, naming the setting.
func (o Options) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{key}, args...)...))
	}
	for i, lc := range o.Listeners {
		_, lerrs := lc.config(fmt.Sprintf("listeners[%d]", i)) // listen.go
		errs = append(errs, lerrs...)
	}
	if _, ok := parseDurability(o.Durability); !ok {
		bad("durability", "unknown mode %q (want sync, interval or none)", o.Durability)
	}
	o.validateAuth(bad)
	o.DeadLetters.validate(bad)
	errs = append(errs, bridge.Validate(o.Bridges)...)
	if o.Cluster != nil {
		if err := o.Cluster.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if o.SysInterval > 0 && o.SysInterval < minSysInterval {
		bad("sys_interval", "%s is too short (at least %s; -1s turns $SYS off)", o.SysInterval, minSysInterval)
	}
	l := o.Limits
	for _, f := range []struct {
		key string
		v   int
	}{
		{"limits.max_client_id_length", l.MaxClientIDLength},
		{"limits.max_username_length", l.MaxUsernameLength},
		{"limits.max_outbox_bytes", l.MaxOutboxBytes},
		{"limits.max_queued", l.MaxQueued},
		{"limits.max_awaiting_rel", l.MaxAwaitingRel},
		{"limits.max_topic_levels", l.MaxTopicLevels},
		{"limits.max_connections", l.MaxConnections},
		{"limits.max_connections_per_address", l.MaxConnectionsPerAddress},
		{"limits.max_retained", l.MaxRetained},
		{"limits.max_subscriptions_per_client", l.MaxSubscriptionsPerClient},
		{"limits.max_overlapping_subscriptions", l.MaxOverlappingSubscriptions},
		{"limits.max_sessions", l.MaxSessions},
		{"limits.max_user_properties", l.MaxUserProperties},
	} {
		if f.v < 0 {
			bad(f.key, "must not be negative, got %d", f.v)
		}
	}
	if l.MaxOutboxBytes > maxOutboxBytes {
		bad("limits.max_outbox_bytes", "must be at most %d, got %d", maxOutboxBytes, l.MaxOutboxBytes)
	}
	if l.MaxFilterLength < 0 || l.MaxFilterLength > 65535 {
		bad("limits.max_filter_length", "must be between 0 and 65535, got %d", l.MaxFilterLength)
	}
	if l.MaxPacketSize < 0 || l.MaxPacketSize > maxProtocolPacketSize {
		bad("limits.max_packet_size", "must be between 0 and %d, got %d", maxProtocolPacketSize, l.MaxPacketSize)
	}
	if l.MaxKeepAlive < 0 || l.MaxKeepAlive > 65535 {
		bad("limits.max_keepalive", "must be between 0 and 65535 seconds, got %d", l.MaxKeepAlive)
	}
	if l.MaxTopicAlias < 0 || l.MaxTopicAlias > 65535 {
		bad("limits.max_topic_alias", "must be between 0 and 65535, got %d", l.MaxTopicAlias)
	}
	if l.MaxInflight < 0 || l.MaxInflight > 65535 {
		bad("limits.max_inflight", "must be between 0 and 65535, got %d", l.MaxInflight)
	}
	for _, f := range []struct {
		key string
		v   int64
	}{
		{"limits.max_memory", l.MaxMemory},
		{"limits.max_outbox_bytes_total", l.MaxOutboxBytesTotal},
		{"limits.max_incoming_bytes_total", l.MaxIncomingBytesTotal},
		{"limits.max_retained_bytes", l.MaxRetainedBytes},
		{"limits.max_queued_bytes", l.MaxQueuedBytes},
		{"limits.max_queued_bytes_total", l.MaxQueuedBytesTotal},
		{"limits.max_subscription_bytes_per_client", l.MaxSubscriptionBytesPerClient},
		{"limits.max_subscription_bytes_total", l.MaxSubscriptionBytesTotal},
	} {
		if f.v < 0 {
			bad(f.key, "must not be negative, got %d", f.v)
		}
	}
	for _, f := range []struct {
		key string
		v   time.Duration
	}{
		{"limits.max_session_expiry", l.MaxSessionExpiry},
		{"limits.persistent_session_expiry", l.PersistentSessionExpiry},
	} {
		if f.v < 0 || f.v > maxSessionExpiry {
			bad(f.key, "must be between 0 and %s, got %s", maxSessionExpiry, f.v)
		}
	}
	if l.ConnectTimeout < 0 {
		bad("limits.connect_timeout", "must not be negative, got %s", l.ConnectTimeout)
	}
	if l.FrameTimeout < 0 {
		bad("limits.frame_timeout", "must not be negative, got %s", l.FrameTimeout)
	}
	if l.WriteTimeout < 0 {
		bad("limits.write_timeout", "must not be negative, got %s", l.WriteTimeout)
	}
	if l.RetainedSendRefill < 0 {
		bad("limits.retained_send_refill", "must not be negative, got %s", l.RetainedSendRefill)
	}
	return errors.Join(errs...)
}
