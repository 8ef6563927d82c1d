package mqttd

import (
	"cmp"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"mqttd/packets"
	"mqttd/session"
	"mqttd/topictrie"
)

// Dead letters: a QoS 1/2 message the broker gives up on for a client is
// set aside on $DLQ/<reason>/<its topic> instead of vanishing. The place
// where it is given up on (a full queue, an expiry, a client's Maximum
// Packet Size, too many deliveries) holds the client's lock, or the
// outbox's, so it only hands the letter to the sink (add), which never
// blocks and takes no other lock; the sink's goroutine publishes it,
// retained, as the broker's own message: subscribers of $DLQ/ get it
// live, and it stays for a person to review (the latest per reason and
// topic). The letters kept are bounded by their own count and bytes, the
// oldest cleared past them, and the letters set aside a second by a rate:
// one device whose messages all fail costs a bounded number of retained
// writes, the rest counted as skipped.

// letterReason says why a message was set aside.
type letterReason uint8

const (
	letterExpired       letterReason = iota // 5.0 Message Expiry reached while queued
	letterQueueFull                         // a session's queue, all queues, a bridge's queue full
	letterTooLarge                          // over the client's Maximum Packet Size
	letterDeliveryLimit                     // sent max_deliveries times without an acknowledgement
	letterNoSubscribers                     // published to no subscriber (opt-in)
	numLetterReasons
)

var letterReasonNames = [numLetterReasons]string{
	letterExpired:       "expired",
	letterQueueFull:     "queue_full",
	letterTooLarge:      "too_large",
	letterDeliveryLimit: "delivery_limit",
	letterNoSubscribers: "no_subscribers",
}

func (r letterReason) String() string { return letterReasonNames[r] }

// dlqPrefix is the broker's tree of dead letters: no client publishes
// there (isBrokerTopic), and a filter starting with a wildcard does not
// match it [MQTT-4.7.2-1], so reading it takes a subscription (or an ACL
// rule) naming it.
const dlqPrefix = "$DLQ/"

// maxPendingLetters bounds the letters handed to the sink and not yet
// published; past it (the sink's goroutine behind), letters are skipped.
const maxPendingLetters = 1024

// letter is one message given up on.
type letter struct {
	reason     letterReason
	msg        *session.Message // immutable once routed: shared, not copied
	client     string
	at         time.Time
	deliveries int
}

// deadLetters is the sink. Its lock is a leaf: add runs under a client's
// or an outbox's lock.
type deadLetters struct {
	s   *Server
	cfg DeadLetters // with defaults
	on  [numLetterReasons]bool

	mu      sync.Mutex
	pending []letter
	running bool
	closed  bool
	wg      sync.WaitGroup // the goroutine publishing them
	// tokens is the rate limiter's bucket (a second's worth of letters at
	// most), refilled at cfg.Rate a second since filled.
	tokens float64
	filled time.Time
	kept   keptLetters
	warned throttle
}

// newDeadLetters returns the sink for the options o, or nil when dead
// letters are off.
func newDeadLetters(s *Server, o DeadLetters) *deadLetters {
	if o.Disabled {
		return nil
	}
	d := &deadLetters{s: s, cfg: o.withDefaults()}
	for _, name := range d.cfg.Reasons {
		if r, ok := letterReasonOf(name); ok {
			d.on[r] = true
		}
	}
	d.tokens, d.filled = float64(d.cfg.Rate), time.Now()
	return d
}

// letterReasonOf is the reason named name.
func letterReasonOf(name string) (letterReason, bool) {
	for r, n := range letterReasonNames {
		if n == name {
			return letterReason(r), true
		}
	}
	return 0, false
}

// wants reports whether a delivery at qos given up on for reason makes a
// letter: QoS 0 promises no delivery, and a letter lost is not set aside
// again.
func (d *deadLetters) wants(r letterReason, qos byte, topic string) bool {
	return d != nil && d.on[r] && qos > 0 && !strings.HasPrefix(topic, dlqPrefix)
}

// add sets m aside for client, given up on for reason after deliveries
// sends. It never blocks: a letter over the rate or the sink's bound is
// counted as skipped.
func (d *deadLetters) add(r letterReason, m *session.Message, qos byte, client string, deliveries int) {
	if !d.wants(r, qos, m.Topic) {
		return
	}
	now := time.Now()
	d.mu.Lock()
	d.tokens = min(d.tokens+now.Sub(d.filled).Seconds()*float64(d.cfg.Rate), float64(d.cfg.Rate))
	d.filled = now
	if d.tokens < 1 || len(d.pending) >= maxPendingLetters || int64(m.Size()) > d.cfg.MaxBytes {
		d.mu.Unlock()
		d.skip(r)
		return
	}
	if d.closed {
		d.mu.Unlock()
		return // the broker is shutting down
	}
	d.tokens--
	d.pending = append(d.pending, letter{reason: r, msg: m, client: client, at: now, deliveries: deliveries})
	start := !d.running
	d.running = true
	if start {
		d.wg.Add(1)
	}
	d.mu.Unlock()
	if start {
		go d.run()
	}
}

// close takes no more letters and waits for those being published: at
// Shutdown, before the writers are waited for, as a letter's delivery may
// start one.
func (d *deadLetters) close() {
	if d == nil {
		return
	}
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.wg.Wait()
}

// skip counts a letter not set aside, and says so in the log now and then.
func (d *deadLetters) skip(r letterReason) {
	d.s.stats.lettersSkipped[r].Add(1)
	if !d.warned.limited() {
		d.s.log.Warn().Str("reason", r.String()).Int("rate", d.cfg.Rate).Int64("max_bytes", d.cfg.MaxBytes).
			Msg("dead letters skipped: more than dead_letters.rate a second, or one larger than dead_letters.max_bytes " +
				"(logged at most every 10 s; mqttd_dead_letters_skipped_total counts them)")
	}
}

// run publishes the pending letters until none is left.
func (d *deadLetters) run() {
	defer d.wg.Done()
	for {
		d.mu.Lock()
		batch := d.pending
		d.pending = nil
		if len(batch) == 0 {
			d.running = false
			d.mu.Unlock()
			return
		}
		d.mu.Unlock()
		for _, l := range batch {
			d.publish(l)
		}
	}
}

// publish sets one letter aside: room is made among the letters kept,
// then it is published retained at QoS 1.
func (d *deadLetters) publish(l letter) {
	topic := dlqPrefix + l.reason.String() + "/" + l.msg.Topic
	payload, props := d.envelope(l)
	size := int64(len(topic) + len(payload))
	d.mu.Lock()
	evict := d.kept.room(topic, size, d.cfg.MaxLetters, d.cfg.MaxBytes)
	d.mu.Unlock()
	for _, t := range evict {
		// An empty retained message clears it, here and on the other
		// nodes of a cluster; its subscribers see it go.
		_ = d.s.Publish(t, nil, 0, true, nil)
	}
	switch err := d.s.Publish(topic, payload, 1, true, props); {
	case errors.Is(err, ErrServerClosed):
	case err != nil: // a topic too long once prefixed
		d.skip(l.reason)
	default:
		d.s.stats.deadLetters[l.reason].Add(1)
	}
}

// envelope is what a letter carries: the message's payload and 5.0
// properties (its expiry left out: an expired message would expire again
// at once) with user properties saying why, for whom, when and after how
// many sends; or, with envelope json, a JSON object holding all of it,
// for 3.1.1 readers.
func (d *deadLetters) envelope(l letter) ([]byte, *packets.Properties) {
	m := l.msg
	at := l.at.UTC().Format(letterTime)
	if d.cfg.Envelope == EnvelopeJSON {
		e := jsonLetter{Reason: l.reason.String(), Topic: m.Topic, ClientID: l.client, Time: at,
			Deliveries: l.deliveries, QoS: m.QoS}
		if utf8.Valid(m.Payload) {
			e.Payload = string(m.Payload)
		} else {
			e.PayloadBase64 = m.Payload
		}
		b, _ := json.Marshal(e)
		return b, nil
	}
	var p packets.Properties
	if m.Properties != nil {
		p = *m.Properties
	}
	p.Present &^= 1<<packets.PropMessageExpiry | 1<<packets.PropTopicAlias | 1<<packets.PropSubscriptionID
	p.MessageExpiry, p.TopicAlias, p.SubscriptionIDs = 0, 0, nil
	p.User = append(p.User[:len(p.User):len(p.User)],
		packets.UserProperty{Key: "dlq-reason", Value: l.reason.String()},
		packets.UserProperty{Key: "dlq-topic", Value: m.Topic},
		packets.UserProperty{Key: "dlq-client-id", Value: l.client},
		packets.UserProperty{Key: "dlq-time", Value: at},
		packets.UserProperty{Key: "dlq-deliveries", Value: strconv.Itoa(l.deliveries)})
	p.Set(packets.PropUserProperty)
	return m.Payload, &p
}

// letterTime is RFC 3339 in UTC with every digit of the nanoseconds, so
// that letters' times sort as strings (restoreKept).
const letterTime = "2006-01-02T15:04:05.000000000Z"

// jsonLetter is a letter with envelope json.
type jsonLetter struct {
	Reason        string `json:"reason"`
	Topic         string `json:"topic"`
	ClientID      string `json:"client_id"`
	Time          string `json:"time"`
	Deliveries    int    `json:"deliveries"`
	QoS           byte   `json:"qos"`
	Payload       string `json:"payload,omitempty"`
	PayloadBase64 []byte `json:"payload_base64,omitempty"`
}

// restoreKept learns the letters the retained store holds (kept before a
// restart), oldest first: by the time a letter says it was set aside
// (dlq-time; none with envelope json), then by topic.
func (d *deadLetters) restoreKept() {
	if d == nil {
		return
	}
	items := d.s.retain.Match(dlqPrefix+"#", nil)
	at := func(m *session.Message) string {
		if m.Properties != nil {
			for _, u := range m.Properties.User {
				if u.Key == "dlq-time" {
					return u.Value // letterTime: sorts as the time does
				}
			}
		}
		return ""
	}
	slices.SortFunc(items, func(a, b topictrie.Item[*session.Message]) int {
		return cmp.Or(cmp.Compare(at(a.Value), at(b.Value)), cmp.Compare(a.Topic, b.Topic))
	})
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, it := range items {
		d.kept.room(it.Topic, int64(len(it.Topic)+len(it.Value.Payload)), 0, 0)
	}
}

// keptLetters are the topics of the letters kept, oldest first, with
// their sizes.
type keptLetters struct {
	order []string
	size  map[string]int64
	bytes int64
}

// room records a letter of size bytes on topic (replacing the one there)
// and returns the topics of the oldest letters to clear for the rest to
// stay within maxLetters and maxBytes (0: unbounded).
func (k *keptLetters) room(topic string, size int64, maxLetters int, maxBytes int64) (evict []string) {
	if k.size == nil {
		k.size = make(map[string]int64)
	}
	if old, ok := k.size[topic]; ok {
		k.bytes -= old
		for i, t := range k.order {
			if t == topic {
				k.order = append(k.order[:i], k.order[i+1:]...)
				break
			}
		}
	}
	k.order = append(k.order, topic)
	k.size[topic] = size
	k.bytes += size
	for len(k.order) > 1 && (maxLetters > 0 && len(k.order) > maxLetters || maxBytes > 0 && k.bytes > maxBytes) {
		t := k.order[0]
		k.order = k.order[1:]
		k.bytes -= k.size[t]
		delete(k.size, t)
		evict = append(evict, t)
	}
	return evict
}

// DeadLetters configures the letters set aside on $DLQ/ (see the package
// documentation of dead letters in README.md). The zero value is on, for
// every reason but no_subscribers, at the defaults below.
type DeadLetters struct {
	// Disabled sets nothing aside: a message given up on is only counted
	// (mqttd_messages_dropped_total), and no message is given up on for
	// its deliveries.
	Disabled bool `yaml:"disabled"`
	// Reasons are the reasons that set a message aside: expired,
	// queue_full, too_large, delivery_limit, no_subscribers. Empty means
	// DefaultDeadLetterReasons.
	Reasons []string `yaml:"reasons"`
	// MaxDeliveries is how many times a QoS 1/2 message is sent to a
	// client (across its reconnects) without an acknowledgement before it
	// is given up on (delivery_limit): the message that crashes a device
	// each time it arrives then stops blocking the messages behind it.
	// 0 means DefaultMaxDeliveries. It applies only while delivery_limit
	// is one of Reasons.
	MaxDeliveries int `yaml:"max_deliveries"`
	// MaxLetters and MaxBytes bound the letters kept (the latest of each
	// reason and topic, retained under $DLQ/): past either the oldest are
	// cleared. A letter larger than MaxBytes is not set aside. 0 means
	// DefaultMaxLetters, DefaultMaxLetterBytes.
	MaxLetters int   `yaml:"max_letters"`
	MaxBytes   int64 `yaml:"max_bytes"`
	// Rate is the most letters set aside a second (and at once); more are
	// counted in mqttd_dead_letters_skipped_total. 0 means
	// DefaultDeadLetterRate.
	Rate int `yaml:"rate"`
	// Envelope is how a letter says why it was set aside: "properties"
	// (the default), the message's payload and properties with 5.0 user
	// properties dlq-reason, dlq-topic, dlq-client-id, dlq-time and
	// dlq-deliveries; or "json", a JSON object with those and the payload,
	// which 3.1.1 readers can read.
	Envelope string `yaml:"envelope"`
}

// Defaults of DeadLetters.
const (
	DefaultMaxDeliveries  = 10
	DefaultMaxLetters     = 1000
	DefaultMaxLetterBytes = 4 << 20
	DefaultDeadLetterRate = 100
	EnvelopeProperties    = "properties"
	EnvelopeJSON          = "json"
)

// DefaultDeadLetterReasons are the reasons set aside unless configured.
var DefaultDeadLetterReasons = []string{"expired", "queue_full", "too_large", "delivery_limit"}

func (o DeadLetters) withDefaults() DeadLetters {
	if len(o.Reasons) == 0 {
		o.Reasons = DefaultDeadLetterReasons
	}
	if o.MaxDeliveries == 0 {
		o.MaxDeliveries = DefaultMaxDeliveries
	}
	if o.MaxLetters == 0 {
		o.MaxLetters = DefaultMaxLetters
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultMaxLetterBytes
	}
	if o.Rate == 0 {
		o.Rate = DefaultDeadLetterRate
	}
	if o.Envelope == "" {
		o.Envelope = EnvelopeProperties
	}
	return o
}

// validate names the settings of o that are wrong.
func (o DeadLetters) validate(bad func(key, format string, args ...any)) {
	for _, name := range o.Reasons {
		if _, ok := letterReasonOf(name); !ok {
			bad("dead_letters.reasons", "unknown reason %q (want %s)", name, strings.Join(letterReasonNames[:], ", "))
		}
	}
	if o.MaxDeliveries < 0 || o.MaxDeliveries > 255 {
		bad("dead_letters.max_deliveries", "must be between 0 and 255, got %d", o.MaxDeliveries)
	}
	if o.MaxLetters < 0 {
		bad("dead_letters.max_letters", "must not be negative, got %d", o.MaxLetters)
	}
	if o.MaxBytes < 0 {
		bad("dead_letters.max_bytes", "must not be negative, got %d", o.MaxBytes)
	}
	if o.Rate < 0 {
		bad("dead_letters.rate", "must not be negative, got %d", o.Rate)
	}
	if o.Envelope != "" && o.Envelope != EnvelopeProperties && o.Envelope != EnvelopeJSON {
		bad("dead_letters.envelope", "unknown envelope %q (want properties or json)", o.Envelope)
	}
}

// maxSends is how many times a message is sent to c's client before it
// is given up on: never for a bridge's session, whose remote fails as a
// link does, not as a device crashing on one message.
func (s *Server) maxSends(c *conn) uint8 {
	d := s.dlq
	if d == nil || !d.on[letterDeliveryLimit] || c.info.Listener == bridgeListener {
		return 0
	}
	return uint8(d.cfg.MaxDeliveries)
}

// giveUpLocked sets aside a message of cl's window given up on for its
// deliveries (Session.Resume completed it) and takes it out of the store.
// The caller holds cl.mu.
func (s *Server) giveUpLocked(cl *client, o session.Outbound, owner *conn) {
	s.stats.dropped[dropDeliveryLimit].Add(1)
	s.dlq.add(letterDeliveryLimit, o.Msg, o.QoS, cl.id, int(o.Sends))
	if cl.stored {
		s.dur.removedLocked(cl, o.Seq, owner)
	}
}
