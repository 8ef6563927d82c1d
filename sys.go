package mqttd

import (
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"mqttd/packets"
)

// $SYS: the broker publishes its state under $SYS/broker/ with Mosquitto's
// topic names and payloads (decimal numbers, "N seconds", loads with two
// decimals), so that dashboards made for Mosquitto work unchanged. Every
// value is read from the stats the metrics read.
//
// One goroutine, started by Serve and stopped by Shutdown, wakes every
// sys_interval. It samples the counters and moves the load averages on,
// which must happen every interval whoever listens, and only then, if
// some filter begins with $SYS (the only filters that can match a $SYS
// topic [MQTT-4.7.2-1]), publishes each value that changed since it last
// published it. Nothing is published while nobody subscribes to $SYS,
// and nothing costs anything per message: the counters are those the
// broker keeps anyway.
//
// The messages are QoS 0, so that an offline persistent session does not
// queue a stream of stale values (unless limits.queue_qos0 asks for it),
// and retained, so that a new subscriber gets the current values at once. They are routed like any message but
// kept apart from the retained store's count, limits and disk: the values
// are rebuilt at every start, and an idle broker's disk is left alone.
// Nor are they counted as received: they were not, and counting them
// would change messages/received at every interval that published. What
// is delivered to clients is counted as sent, as Mosquitto counts it.
//
// A new subscription under $SYS/ wakes the goroutine, so that its client
// gets the values now rather than up to an interval later: the values
// retained so far may be those of the last time anybody listened.

// sysPrefix is the broker's own tree.
const sysPrefix = "$SYS/broker/"

// The load averages: each series is a counter's rate per minute, averaged
// over 1, 5 and 15 minutes with exponentially decaying weights, as
// Mosquitto computes them.
const (
	loadMessagesReceived = iota
	loadMessagesSent
	loadDropped
	loadBytesReceived
	loadBytesSent
	loadConnections
	numLoads
)

// loadNames are the topics of each series under $SYS/broker/load/:
// messages and publish name the same series here, since the broker counts
// PUBLISH packets only (Mosquitto's messages/ counts every packet).
var loadNames = [numLoads][]string{
	loadMessagesReceived: {"messages/received", "publish/received"},
	loadMessagesSent:     {"messages/sent", "publish/sent"},
	loadDropped:          {"publish/dropped"},
	loadBytesReceived:    {"bytes/received"},
	loadBytesSent:        {"bytes/sent"},
	loadConnections:      {"connections"},
}

// loadWindows are the averages' time constants.
var loadWindows = [...]struct {
	name    string
	seconds float64
}{{"1min", 60}, {"5min", 300}, {"15min", 900}}

// sysSample is what one update reads from the stats.
type sysSample struct {
	counters                               [numLoads]uint64 // the loads' counters
	sessions, online, expired              int64
	subscriptions, retained, retainedBytes int64
	queued, queuedBytes, heap              int64
}

// sysValue is one topic's payload.
type sysValue struct{ topic, payload string }

// sysTree publishes $SYS/broker/. The fields after started belong to its
// goroutine (and to start, before the goroutine runs).
type sysTree struct {
	interval time.Duration // negative: off
	wake     chan struct{} // a subscription under $SYS/ was made
	stop     chan struct{}
	done     chan struct{}
	started  atomic.Bool

	begin      time.Time // for the uptime
	at         time.Time // when last was sampled
	last       sysSample
	loads      [numLoads][len(loadWindows)]float64
	loadTopics [numLoads][len(loadWindows)][]string
	maxClients int64
	published  map[string]string // the payload last published, by topic
	values     []sysValue
}

func newSysTree(interval time.Duration) *sysTree {
	t := &sysTree{interval: interval, wake: make(chan struct{}, 1), stop: make(chan struct{}),
		done: make(chan struct{}), published: make(map[string]string)}
	for i, names := range loadNames {
		for w, win := range loadWindows {
			for _, name := range names {
				t.loadTopics[i][w] = append(t.loadTopics[i][w], sysPrefix+"load/"+name+"/"+win.name)
			}
		}
	}
	return t
}

// on reports whether the tree is published (sys_interval not negative).
func (t *sysTree) on() bool { return t.interval > 0 }

// start runs the goroutine until close, if the tree is on. Serve calls
// it once, under the registry lock, and only before Shutdown.
func (t *sysTree) start(s *Server) {
	if !t.on() {
		return
	}
	t.started.Store(true)
	t.begin = time.Now()
	t.at, t.last = t.begin, t.sample(s)
	go func() {
		defer close(t.done)
		tick := time.NewTicker(t.interval)
		defer tick.Stop()
		for {
			select {
			case <-t.stop:
				return
			case <-tick.C:
			case <-t.wake:
			}
			t.update(s, time.Now())
		}
	}()
}

// close stops the goroutine, if it was started, and waits for it.
func (t *sysTree) close() {
	close(t.stop)
	if t.started.Load() {
		<-t.done
	}
}

// wakesSys reports whether a new subscription to filter (without
// $share/group/) has the values published now: one under $SYS/.
func wakesSys(filter string) bool { return strings.HasPrefix(filter, "$SYS/") }

// wakeUp has the values published now, rather than at the next interval.
func (t *sysTree) wakeUp() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// sample reads the stats.
func (t *sysTree) sample(s *Server) sysSample {
	st := &s.stats
	var c sysSample
	c.counters[loadMessagesReceived] = st.messagesReceived.Load()
	c.counters[loadMessagesSent] = st.messagesSent.Load()
	for r := range st.dropped {
		c.counters[loadDropped] += st.dropped[r].Load()
	}
	c.counters[loadBytesReceived] = st.bytesReceived.Load()
	c.counters[loadBytesSent] = st.bytesSent.Load()
	c.counters[loadConnections] = st.connects.Load() + st.connectsRefused.Load()
	c.online = st.sessionsOnline.Load() // before sessions: a session counts there before it goes online
	c.sessions = st.sessions.Load()
	c.expired = int64(st.sessionsExpired.Load())
	c.subscriptions = st.subscriptions.Load()
	c.retained, c.retainedBytes = st.retained.Load(), st.retainedBytes.Load()
	c.queued, c.queuedBytes = st.queued.Load(), s.queueBudget.Bytes()
	c.heap = st.heapLive.Load()
	return c
}

// update samples the stats at now, moves the loads on and, when anybody
// subscribes to $SYS, publishes what changed.
func (t *sysTree) update(s *Server, now time.Time) {
	c := t.sample(s)
	t.maxClients = max(t.maxClients, c.sessions)
	if dt := now.Sub(t.at).Seconds(); dt > 0 {
		for i := range numLoads {
			perMinute := float64(c.counters[i]-t.last.counters[i]) * 60 / dt
			for w, win := range loadWindows {
				keep := math.Exp(-dt / win.seconds)
				t.loads[i][w] = perMinute + keep*(t.loads[i][w]-perMinute)
			}
		}
		t.at, t.last = now, c
	}
	if !s.subs.SubscribedUnder("$SYS") {
		return
	}
	t.values = t.appendValues(t.values[:0], s, &c, now)
	for _, v := range t.values {
		if old, ok := t.published[v.topic]; ok && old == v.payload {
			continue
		} else if !ok {
			// A retained message another publisher left here (read back
			// from the store, say) goes: the broker's values replace it,
			// and are not counted or stored as it was.
			s.deleteRetained(v.topic, nil, nil)
		}
		t.published[v.topic] = v.payload
		s.publishSys(v.topic, v.payload)
	}
	clear(t.values)
}

// appendValues appends every topic's payload, as of c and now.
func (t *sysTree) appendValues(into []sysValue, s *Server, c *sysSample, now time.Time) []sysValue {
	num := func(topic string, v int64) { into = append(into, sysValue{topic, strconv.FormatInt(v, 10)}) }
	unsigned := func(topic string, v uint64) { into = append(into, sysValue{topic, strconv.FormatUint(v, 10)}) }
	into = append(into, sysValue{sysPrefix + "version", "mqttd version " + s.opts.Version},
		sysValue{sysPrefix + "uptime", strconv.FormatInt(int64(now.Sub(t.begin)/time.Second), 10) + " seconds"})
	num(sysPrefix+"clients/connected", c.online)
	num(sysPrefix+"clients/disconnected", max(c.sessions-c.online, 0))
	num(sysPrefix+"clients/total", c.sessions)
	num(sysPrefix+"clients/maximum", t.maxClients)
	num(sysPrefix+"clients/expired", c.expired)
	// PUBLISH packets under both names: see loadNames.
	unsigned(sysPrefix+"messages/received", c.counters[loadMessagesReceived])
	unsigned(sysPrefix+"messages/sent", c.counters[loadMessagesSent])
	unsigned(sysPrefix+"publish/messages/received", c.counters[loadMessagesReceived])
	unsigned(sysPrefix+"publish/messages/sent", c.counters[loadMessagesSent])
	unsigned(sysPrefix+"publish/messages/dropped", c.counters[loadDropped])
	unsigned(sysPrefix+"bytes/received", c.counters[loadBytesReceived])
	unsigned(sysPrefix+"bytes/sent", c.counters[loadBytesSent])
	num(sysPrefix+"subscriptions/count", c.subscriptions)
	num(sysPrefix+"retained messages/count", c.retained)
	// What the broker keeps for later, as Mosquitto's message store
	// counts it: queued for sessions, and retained.
	num(sysPrefix+"store/messages/count", c.queued+c.retained)
	num(sysPrefix+"store/messages/bytes", c.queuedBytes+c.retainedBytes)
	num(sysPrefix+"heap/current", c.heap)
	if s.dlq != nil {
		for r := range numLetterReasons {
			unsigned(sysPrefix+"dead_letters/"+r.String(), s.stats.deadLetters[r].Load())
		}
	}
	if st, ok := s.Cluster(); ok {
		connected := int64(0)
		if st.Connected {
			connected = 1
		}
		into = append(into, sysValue{sysPrefix + "cluster/node", st.Node})
		num(sysPrefix+"cluster/connected", connected)
		num(sysPrefix+"cluster/filters", int64(st.Filters))
		num(sysPrefix+"cluster/routes", int64(st.Routes))
		unsigned(sysPrefix+"cluster/messages/received", st.MessagesIn)
		unsigned(sysPrefix+"cluster/messages/sent", st.MessagesOut)
		unsigned(sysPrefix+"cluster/messages/dropped", st.Dropped)
		num(sysPrefix+"cluster/nodes", int64(st.Nodes))
		unsigned(sysPrefix+"cluster/takeovers/in", st.TakeoversIn)
		unsigned(sysPrefix+"cluster/takeovers/out", st.TakeoversOut)
	}
	for i := range numLoads {
		for w := range loadWindows {
			payload := strconv.FormatFloat(t.loads[i][w], 'f', 2, 64)
			for _, topic := range t.loadTopics[i][w] {
				into = append(into, sysValue{topic, payload})
			}
		}
	}
	return into
}

// publishSys routes one of the broker's values, retained at QoS 0, and
// keeps it as the topic's retained message outside the retained store's
// accounting and the disk. It is not counted as received. A topic deeper
// than limits.max_topic_levels is not kept, only routed.
func (s *Server) publishSys(topic, payload string) {
	m := newMessage(topic, []byte(payload), 0, true, &packets.Properties{}, inlineOrigin)
	_, _, _ = s.retain.Swap(topic, m)
	s.route(m, nil)
}
