// Package bridge describes the bridges of a broker: connections from it to
// remote brokers that carry topics out, in or both ways, with Mosquitto's
// topic rules (pattern, direction, QoS, local and remote prefixes). It
// holds the configuration, its validation and the topic mapping; the
// broker (the root package) runs the connections.
package bridge

import (
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"mqttd/topictrie"
)

// Config is one bridge. The zero value of each optional field means its
// default.
type Config struct {
	// Name names the bridge in logs, metrics, $SYS and the JSON API:
	// letters, digits, '-', '_' and '.'.
	Name string `yaml:"name"`
	// Addresses are the remote broker's addresses, tried in turn:
	// host:port (TCP), or a URL tcp://, tls:// (mqtts://, ssl://), ws://
	// or wss:// (with a path; /mqtt when none is given).
	Addresses []string `yaml:"addresses"`
	// RoundRobin goes on with the next address after a connection ends;
	// otherwise the first address is tried first again, as Mosquitto's
	// round_robin false does, so a bridge comes back to its main broker.
	RoundRobin bool `yaml:"round_robin"`
	// ClientID is the client id on the remote; by default the host name,
	// a dot and the bridge's name, as Mosquitto's.
	ClientID string `yaml:"client_id"`
	// Username and the password (at most one of Password, PasswordFile,
	// PasswordEnv) log in to the remote. The password is never logged.
	Username     string `yaml:"username"`
	Password     Secret `yaml:"password"`
	PasswordFile string `yaml:"password_file"`
	PasswordEnv  string `yaml:"password_env"`
	// Protocol is the MQTT version spoken to the remote: "5" (the
	// default) or "3.1.1".
	Protocol string `yaml:"protocol"`
	// KeepAlive is the keepalive asked of the remote; 0 means 60s.
	KeepAlive time.Duration `yaml:"keepalive"`
	// CleanStart starts a new session on the remote at every connection.
	// By default the remote session is kept (for SessionExpiry with 5.0),
	// so that QoS 2 messages in flight are completed exactly once across
	// reconnections.
	CleanStart bool `yaml:"clean_start"`
	// SessionExpiry is how long the remote keeps the session of a 5.0
	// bridge while it is disconnected; 0 means 1h (none with CleanStart).
	SessionExpiry time.Duration `yaml:"session_expiry"`
	// NoTryPrivate turns off the bridge bit in a 3.1.1 CONNECT (protocol
	// level | 0x80), by which Mosquitto and mqttd know a bridge and send
	// it nothing it published itself. Turn it off for remotes that refuse
	// the CONNECT with it.
	NoTryPrivate bool `yaml:"no_try_private"`
	// TLS is the client side of tls:// and wss:// addresses.
	TLS TLSConfig `yaml:"tls"`
	// ReconnectMin and ReconnectMax bound the wait before connecting
	// again, which doubles from min after each failure, with jitter; 0
	// means 1s and 2m.
	ReconnectMin time.Duration `yaml:"reconnect_min"`
	ReconnectMax time.Duration `yaml:"reconnect_max"`
	// MaxInflight is how many QoS 1/2 messages may be sent to the remote
	// and not yet acknowledged (the remote's Receive Maximum lowers it):
	// at most that many go per round trip, so a remote far away wants
	// more. 0 means limits.max_inflight (100).
	MaxInflight int `yaml:"max_inflight"`
	// MaxQueuedMessages and MaxQueuedBytes bound the messages waiting to
	// go out (in the store) while the remote is away or slow; 0 means
	// 100,000 and 64 MiB.
	MaxQueuedMessages int   `yaml:"max_queued_messages"`
	MaxQueuedBytes    int64 `yaml:"max_queued_bytes"`
	// QueuePolicy says what a full queue does: drop_oldest (the default)
	// makes room by dropping the oldest queued message, drop_new drops the
	// new one, block_publishers refuses QoS 1/2 publishers (PUBACK 0x97
	// for 5.0; 3.1.1 publishers are disconnected) until there is room.
	QueuePolicy string `yaml:"queue_policy"`
	// QueueQoS0 queues QoS 0 messages too while the remote is away;
	// otherwise they are forwarded only while it is connected.
	QueueQoS0 bool `yaml:"queue_qos0"`
	// StateTopic is where the bridge's state is retained: "connected"
	// or "disconnected" ("1"/"0" with StateNumeric), as Mosquitto's
	// notifications. By default $SYS/broker/bridge/<name>/state; "-"
	// publishes none.
	StateTopic   string `yaml:"state_topic"`
	StateNumeric bool   `yaml:"state_numeric"`
	// Topics are the rules: which topics go out, come in, or both.
	Topics []Rule `yaml:"topics"`
}

// TLSConfig is the client side of a TLS connection to the remote.
type TLSConfig struct {
	// CAFile verifies the remote's certificate; the system's roots when
	// empty.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are a client certificate, for remotes that
	// want one (AWS IoT, Azure IoT Hub).
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name sent (SNI) and verified; by default the
	// address's host.
	ServerName string `yaml:"server_name"`
	// ALPN are the protocols offered (AWS IoT on port 443 wants
	// x-amzn-mqtt-ca).
	ALPN []string `yaml:"alpn"`
	// Insecure skips verifying the remote's certificate: for tests only,
	// as anyone on the path can then read and change the traffic.
	Insecure bool `yaml:"insecure"`
}

// Rule is one topic rule, as Mosquitto's "topic pattern direction qos
// local_prefix remote_prefix": a message on LocalPrefix+topic here is
// forwarded to RemotePrefix+topic there (out), and the reverse (in), for
// topics matching Pattern.
type Rule struct {
	// Pattern is a topic filter, wildcards allowed; empty means the
	// prefix alone is the topic (Mosquitto's "").
	Pattern string `yaml:"pattern"`
	// Direction is out, in or both.
	Direction string `yaml:"direction"`
	// QoS is the highest QoS messages are carried at: the subscription's
	// QoS on the side they come from. Unset means 1, so that what goes
	// through the bridge is stored and forwarded (Mosquitto's default is
	// 0, which mqttd import writes out).
	QoS *int `yaml:"qos"`
	// LocalPrefix and RemotePrefix replace each other on the topic.
	LocalPrefix  string `yaml:"local_prefix"`
	RemotePrefix string `yaml:"remote_prefix"`
}

// Secret is a password: it is never printed, logged or written out.
type Secret string

const redacted = "[redacted]"

// String hides the secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// MarshalText hides the secret from JSON, YAML and log encoders.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// The values of Config.QueuePolicy.
const (
	DropOldest      = "drop_oldest"
	DropNew         = "drop_new"
	BlockPublishers = "block_publishers"
)

// The values of Rule.Direction.
const (
	Out  = "out"
	In   = "in"
	Both = "both"
)

// Defaults.
const (
	DefaultKeepAlive         = 60 * time.Second
	DefaultSessionExpiry     = time.Hour
	DefaultReconnectMin      = time.Second
	DefaultReconnectMax      = 2 * time.Minute
	DefaultMaxQueuedMessages = 100_000
	DefaultMaxQueuedBytes    = 64 << 20
	DefaultQoS               = 1
)

// validName says whether name is 1 to 64 letters, digits, '-', '_' or
// '.'. A loop rather than a regexp: the regexp's 64 repetitions were
// compiled at init into a program of 860 allocations, 60 KB held all the
// broker's life.
func validName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for _, c := range []byte(name) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// WithDefaults returns c with every unset field at its default; host is
// the host name the default client id starts with.
func (c Config) WithDefaults(host string) Config {
	if c.ClientID == "" {
		c.ClientID = host + "." + c.Name
	}
	if c.Protocol == "" {
		c.Protocol = "5"
	}
	setDefault(&c.KeepAlive, DefaultKeepAlive)
	if !c.CleanStart {
		setDefault(&c.SessionExpiry, DefaultSessionExpiry)
	}
	setDefault(&c.ReconnectMin, DefaultReconnectMin)
	setDefault(&c.ReconnectMax, DefaultReconnectMax)
	setDefault(&c.MaxQueuedMessages, DefaultMaxQueuedMessages)
	setDefault(&c.MaxQueuedBytes, DefaultMaxQueuedBytes)
	if c.QueuePolicy == "" {
		c.QueuePolicy = DropOldest
	}
	if c.StateTopic == "" {
		c.StateTopic = "$SYS/broker/bridge/" + c.Name + "/state"
	}
	rules := make([]Rule, len(c.Topics))
	for i, r := range c.Topics {
		if r.QoS == nil {
			q := DefaultQoS
			r.QoS = &q
		}
		rules[i] = r
	}
	c.Topics = rules
	return c
}

func setDefault[T int | int64 | time.Duration](v *T, def T) {
	if *v == 0 {
		*v = def
	}
}

// Validate returns every problem with the bridges, each naming its key
// (bridges[i].field).
func Validate(bridges []Config) []error {
	var errs []error
	seen := map[string]bool{}
	for i, c := range bridges {
		bad := func(field, format string, args ...any) {
			errs = append(errs, fmt.Errorf("bridges[%d].%s: "+format, append([]any{i, field}, args...)...))
		}
		c.validate(bad)
		if seen[c.Name] {
			bad("name", "%q names two bridges", c.Name)
		}
		seen[c.Name] = true
	}
	return errs
}

func (c Config) validate(bad func(field, format string, args ...any)) {
	if !validName(c.Name) {
		bad("name", "%q: want 1 to 64 letters, digits, '-', '_' or '.'", c.Name)
	}
	if len(c.Addresses) == 0 {
		bad("addresses", "no address: want host:port or a tcp://, tls://, ws:// or wss:// URL")
	}
	for j, a := range c.Addresses {
		if _, err := ParseAddress(a); err != nil {
			bad(fmt.Sprintf("addresses[%d]", j), "%v", err)
		}
	}
	switch c.Protocol {
	case "", "5", "5.0", "3.1.1":
	default:
		bad("protocol", "%q: want 5 or 3.1.1", c.Protocol)
	}
	secrets := 0
	for _, s := range []string{string(c.Password), c.PasswordFile, c.PasswordEnv} {
		if s != "" {
			secrets++
		}
	}
	if secrets > 1 {
		bad("password", "give at most one of password, password_file and password_env")
	}
	if c.KeepAlive < 0 || c.KeepAlive > 65535*time.Second || c.KeepAlive%time.Second != 0 {
		bad("keepalive", "%s: want whole seconds up to 65535s", c.KeepAlive)
	}
	if c.SessionExpiry < 0 || c.SessionExpiry > 0xFFFFFFFF*time.Second {
		bad("session_expiry", "%s: want 0 to 4294967295s", c.SessionExpiry)
	}
	if c.ReconnectMin < 0 || c.ReconnectMax < 0 || (c.ReconnectMax > 0 && c.ReconnectMin > c.ReconnectMax) {
		bad("reconnect_min", "%s is more than reconnect_max %s", c.ReconnectMin, c.ReconnectMax)
	}
	if c.MaxInflight < 0 || c.MaxInflight > 65535 {
		bad("max_inflight", "must be between 0 and 65535, got %d", c.MaxInflight)
	}
	if c.MaxQueuedMessages < 0 {
		bad("max_queued_messages", "must not be negative, got %d", c.MaxQueuedMessages)
	}
	if c.MaxQueuedBytes < 0 {
		bad("max_queued_bytes", "must not be negative, got %d", c.MaxQueuedBytes)
	}
	switch c.QueuePolicy {
	case "", DropOldest, DropNew, BlockPublishers:
	default:
		bad("queue_policy", "%q: want drop_oldest, drop_new or block_publishers", c.QueuePolicy)
	}
	if c.StateTopic != "" && c.StateTopic != "-" {
		if err := topictrie.ValidTopicName(c.StateTopic); err != nil {
			bad("state_topic", "%v", err)
		}
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		bad("tls.cert_file", "a client certificate needs both cert_file and key_file")
	}
	if len(c.Topics) == 0 {
		bad("topics", "no topic rule: the bridge would carry nothing")
	}
	for j, r := range c.Topics {
		r.validate(func(field, format string, args ...any) {
			bad(fmt.Sprintf("topics[%d].%s", j, field), format, args...)
		})
	}
}

func (r Rule) validate(bad func(field, format string, args ...any)) {
	switch r.Direction {
	case Out, In, Both:
	case "":
		bad("direction", "missing: want out, in or both")
	default:
		bad("direction", "%q: want out, in or both", r.Direction)
	}
	if r.QoS != nil && (*r.QoS < 0 || *r.QoS > 2) {
		bad("qos", "%d: want 0, 1 or 2", *r.QoS)
	}
	for _, p := range []struct{ key, v string }{{"local_prefix", r.LocalPrefix}, {"remote_prefix", r.RemotePrefix}} {
		if strings.ContainsAny(p.v, "+#") {
			bad(p.key, "%q: a prefix cannot hold a wildcard", p.v)
		}
	}
	if r.Pattern == "" && r.LocalPrefix == "" && r.RemotePrefix == "" {
		bad("pattern", "empty, and no prefix to stand for the topic")
		return
	}
	for _, f := range []struct{ key, v string }{{"pattern", r.LocalFilter()}, {"pattern", r.RemoteFilter()}} {
		if err := topictrie.ValidFilter(f.v); err != nil {
			bad(f.key, "%q: %v", f.v, err)
			return
		}
	}
	if strings.HasPrefix(r.LocalFilter(), "$share/") || strings.HasPrefix(r.RemoteFilter(), "$share/") {
		bad("pattern", "a shared subscription cannot be bridged")
	}
}

// LocalFilter is what the rule takes on this side: the local prefix and
// the pattern.
func (r Rule) LocalFilter() string { return r.LocalPrefix + r.Pattern }

// RemoteFilter is what the rule takes on the remote side.
func (r Rule) RemoteFilter() string { return r.RemotePrefix + r.Pattern }

// Goes reports whether the rule carries messages out to the remote.
func (r Rule) Goes() bool { return r.Direction == Out || r.Direction == Both }

// Comes reports whether the rule carries messages in from the remote.
func (r Rule) Comes() bool { return r.Direction == In || r.Direction == Both }

// QoSOrDefault is the rule's QoS.
func (r Rule) QoSOrDefault() byte {
	if r.QoS == nil {
		return DefaultQoS
	}
	return byte(*r.QoS)
}

// ToRemote is the remote topic of a local message the bridge's out rules
// take, with the QoS it goes at, at most; ok is false when no out rule
// takes the topic.
func (c *Config) ToRemote(topic string) (remote string, qos byte, ok bool) {
	for _, r := range c.Topics {
		if r.Goes() && topictrie.Matches(r.LocalFilter(), topic) && strings.HasPrefix(topic, r.LocalPrefix) {
			return r.RemotePrefix + topic[len(r.LocalPrefix):], r.QoSOrDefault(), true
		}
	}
	return "", 0, false
}

// ToLocal is the local topic of a remote message the bridge's in rules
// take; ok is false when no in rule takes it (a remote sending what the
// bridge did not ask for).
func (c *Config) ToLocal(topic string) (local string, qos byte, ok bool) {
	for _, r := range c.Topics {
		if r.Comes() && topictrie.Matches(r.RemoteFilter(), topic) && strings.HasPrefix(topic, r.RemotePrefix) {
			return r.LocalPrefix + topic[len(r.RemotePrefix):], r.QoSOrDefault(), true
		}
	}
	return "", 0, false
}

// PasswordValue reads the password from where the config says it is.
func (c *Config) PasswordValue() (string, error) {
	switch {
	case c.PasswordFile != "":
		b, err := os.ReadFile(c.PasswordFile)
		if err != nil {
			return "", fmt.Errorf("bridge %s: password_file: %w", c.Name, err)
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	case c.PasswordEnv != "":
		v, ok := os.LookupEnv(c.PasswordEnv)
		if !ok {
			return "", fmt.Errorf("bridge %s: password_env: $%s is not set", c.Name, c.PasswordEnv)
		}
		return v, nil
	}
	return string(c.Password), nil
}

// Address is a parsed remote address.
type Address struct {
	// Scheme is tcp, tls, ws or wss.
	Scheme string
	// Host is host:port.
	Host string
	// Path is the WebSocket path.
	Path string
}

// String is the address as a URL.
func (a Address) String() string { return a.Scheme + "://" + a.Host + a.Path }

// ParseAddress reads host:port or a tcp://, mqtt://, tls://, mqtts://,
// ssl://, ws:// or wss:// URL; a URL without a port gets its scheme's
// (1883, 8883, 80, 443).
func ParseAddress(s string) (Address, error) {
	if !strings.Contains(s, "://") {
		s = "tcp://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return Address{}, err
	}
	var a Address
	port := ""
	switch u.Scheme {
	case "tcp", "mqtt":
		a.Scheme, port = "tcp", "1883"
	case "tls", "mqtts", "ssl":
		a.Scheme, port = "tls", "8883"
	case "ws":
		a.Scheme, port = "ws", "80"
	case "wss":
		a.Scheme, port = "wss", "443"
	default:
		return Address{}, fmt.Errorf("%q: unknown scheme %s (want tcp, tls, ws or wss)", s, u.Scheme)
	}
	if u.Hostname() == "" {
		return Address{}, fmt.Errorf("%q: no host", s)
	}
	if u.User != nil {
		return Address{}, fmt.Errorf("%q: give the username and password as their own settings, not in the address", s)
	}
	a.Host = u.Host
	if u.Port() == "" {
		a.Host = u.Hostname() + ":" + port
		if strings.Contains(u.Hostname(), ":") {
			a.Host = "[" + u.Hostname() + "]:" + port
		}
	}
	if a.Scheme == "ws" || a.Scheme == "wss" {
		a.Path = u.EscapedPath()
		if a.Path == "" {
			a.Path = "/mqtt"
		}
	} else if u.Path != "" && u.Path != "/" {
		return Address{}, fmt.Errorf("%q: a path means nothing for %s", s, a.Scheme)
	}
	return a, nil
}
