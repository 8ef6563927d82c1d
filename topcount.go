package mqttd

import (
	"cmp"
	"hash/maphash"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"
)

// The busiest topics (issue 40): messages published to each topic and
// their recent rate, for /api/v1/topics and `mqttd ctl top`. Nothing is
// counted until someone asks (Server.TopicCounts): a publish then pays
// one atomic load. A read switches counting on, and it switches itself
// off after topicIdleDefault without a read, forgetting what it counted.
// While on, topics are counted in a table of at most MaxCountedTopics
// entries split in shards by the topic's hash, each its own lock, so that
// publishers of different topics seldom meet; once the table is full a
// new topic takes the place of its shard's least counted entry and
// inherits its count (Space-Saving: a topic with more messages than its
// shard's least is never lost, and a count is over by at most what it
// inherited). A
// goroutine that runs only while counting is on samples the counts every
// second for the rates and switches counting off.

const (
	topicShards = 16
	// MaxCountedTopics is how many topics the busiest topics' table
	// holds at most.
	MaxCountedTopics = 1024
	// maxTopicsPerShard lets a shard hold more than its share while
	// the table has room: hashing does not share topics out evenly, and
	// a shard replacing its topics while others have room would churn
	// at fewer topics than the table holds.
	maxTopicsPerShard = 2 * MaxCountedTopics / topicShards
	// MaxCountedTopicBytes is how much of a topic the table keeps: a
	// longer topic is counted under its first MaxCountedTopicBytes bytes
	// (cut at a character), shown ending in "…".
	MaxCountedTopicBytes = 256
	// TopicRateWindow is how many samples (a second apart) back the
	// rates are taken over.
	TopicRateWindow = 10
	// topicIdleDefault is how long counting runs after the last read.
	topicIdleDefault = 60 * time.Second
)

// topicCounter counts messages by topic while someone looks.
type topicCounter struct {
	// on is what a publish reads: set while counting runs.
	on   atomic.Bool
	seed maphash.Seed
	st   *stats // topicsCounted, topicsReplaced
	done <-chan struct{}
	log  zerolog.Logger
	// fullLogged is set once a counting run has said its table is full.
	fullLogged atomic.Bool

	// tick is how often the counts are sampled, idle how long counting
	// runs after the last read: variables so that tests can shorten them.
	tick, idle time.Duration
	lastRead   atomic.Int64 // unix nanos of the last read

	// runMu guards running: one sampling goroutine at a time. Taken
	// before sampleMu and the shards' locks.
	runMu   sync.Mutex
	running bool

	// sampleMu orders the samples with the reads: taken before a
	// shard's lock, by the sampler and by a read.
	sampleMu sync.Mutex
	times    [TopicRateWindow]time.Time // when each sample was taken
	samples  int                        // samples taken since counting began

	shards [topicShards]topicShard
}

// topicShard is one shard of the table: its lock is a leaf, held for a
// map lookup and an add by a publisher.
type topicShard struct {
	mu sync.Mutex
	m  map[string]*topicEntry // nil while counting is off
	_  [48]byte               // a cache line of its own
}

// topicEntry is one topic's count and its samples.
type topicEntry struct {
	topic string // the key, copied out of the frame
	cut   bool   // the topic was longer than MaxCountedTopicBytes
	count uint64
	// at holds count at each sample, by sample number modulo its length.
	at [TopicRateWindow]uint64
}

func newTopicCounter(st *stats, done <-chan struct{}, log zerolog.Logger) *topicCounter {
	return &topicCounter{seed: maphash.MakeSeed(), st: st, done: done, log: log,
		tick: time.Second, idle: topicIdleDefault}
}

// count counts one message published to topic; its caller has seen on
// set, so that a publish pays no call while counting is off. topic may be
// in a read buffer: the table keeps a copy.
func (t *topicCounter) count(topic string) {
	key, cut := topic, false
	if len(key) > MaxCountedTopicBytes {
		n := MaxCountedTopicBytes
		for n > 0 && !utf8.RuneStart(key[n]) {
			n--
		}
		key, cut = key[:n], true
	}
	sh := &t.shards[maphash.String(t.seed, key)%topicShards]
	replaced := false
	sh.mu.Lock()
	if e := sh.m[key]; e != nil {
		e.count++
	} else if sh.m != nil {
		replaced = t.addLocked(sh, key, cut)
	}
	sh.mu.Unlock()
	if replaced && !t.fullLogged.Load() && t.fullLogged.CompareAndSwap(false, true) {
		t.log.Info().Int("topics", MaxCountedTopics).Msg("the busiest topics' table is full: a new topic takes the place " +
			"of the least counted one and inherits its count (mqttd_topics_replaced_total); said once while counting runs")
	}
}

// addLocked puts a topic not yet counted in sh, in the place of the
// least counted one when the table is full, which it reports.
func (t *topicCounter) addLocked(sh *topicShard, key string, cut bool) (replaced bool) {
	var e *topicEntry
	var least uint64
	if len(sh.m) < maxTopicsPerShard && t.st.topicsCounted.Add(1) <= MaxCountedTopics {
		e = new(topicEntry)
	} else if len(sh.m) == 0 {
		// So full that this shard has nothing to give up: the table
		// holds at most MaxCountedTopics, so none in practice.
		t.st.topicsCounted.Add(-1)
		return false
	} else {
		if len(sh.m) < maxTopicsPerShard {
			t.st.topicsCounted.Add(-1)
		}
		for _, o := range sh.m {
			if e == nil || o.count < e.count {
				e = o
			}
		}
		delete(sh.m, e.topic)
		least = e.count
		t.st.topicsReplaced.Add(1)
		replaced = true
	}
	*e = topicEntry{topic: strings.Clone(key), cut: cut, count: least + 1}
	// Its rate counts only its own messages: the samples start at the
	// count it inherits.
	for i := range e.at {
		e.at[i] = least
	}
	sh.m[e.topic] = e
	return replaced
}

// read notes a read at now and switches counting on if it was off.
func (t *topicCounter) read(now time.Time) {
	t.lastRead.Store(now.UnixNano())
	if t.on.Load() {
		return
	}
	t.runMu.Lock()
	defer t.runMu.Unlock()
	if t.running {
		return
	}
	t.running = true
	t.fullLogged.Store(false)
	t.sampleMu.Lock()
	t.samples = 0
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		sh.m = make(map[string]*topicEntry)
		sh.mu.Unlock()
	}
	t.sampleLocked(now)
	t.sampleMu.Unlock()
	t.on.Store(true)
	go t.run()
}

// run samples the counts every tick until counting has been idle for
// t.idle, or the server shuts down, then switches counting off.
func (t *topicCounter) run() {
	tick := time.NewTicker(t.tick)
	defer tick.Stop()
	for {
		select {
		case <-t.done:
			t.stop(time.Time{})
			return
		case now := <-tick.C:
			if t.idleAt(now) && t.stop(now) {
				return
			}
			t.sampleMu.Lock()
			t.sampleLocked(now)
			t.sampleMu.Unlock()
		}
	}
}

// idleAt says whether no read came for t.idle before now.
func (t *topicCounter) idleAt(now time.Time) bool {
	return now.UnixNano()-t.lastRead.Load() > int64(t.idle)
}

// stop switches counting off and forgets the counts, unless a read came
// since idleAt said it was idle at now (zero: stop whatever came). A read
// stores its time before it looks at on, and stop clears on before it
// looks at that time again, so one of them sees the other.
func (t *topicCounter) stop(now time.Time) (stopped bool) {
	t.runMu.Lock()
	defer t.runMu.Unlock()
	t.on.Store(false)
	if !now.IsZero() && !t.idleAt(now) {
		t.on.Store(true)
		return false
	}
	t.running = false
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		sh.m = nil
		sh.mu.Unlock()
	}
	t.st.topicsCounted.Store(0)
	return true
}

// sampleLocked records every count at now. sampleMu is held.
func (t *topicCounter) sampleLocked(now time.Time) {
	slot := t.samples % len(t.times)
	t.times[slot] = now
	t.samples++
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		for _, e := range sh.m {
			e.at[slot] = e.count
		}
		sh.mu.Unlock()
	}
}

// TopicCount is one topic's messages, as Server.TopicCounts reports them.
type TopicCount struct {
	// Topic is the topic; one longer than MaxCountedTopicBytes is cut,
	// ending in "…", and counts every topic it begins.
	Topic string `json:"topic"`
	// Messages counts the messages published to it since counting
	// began; past MaxCountedTopics topics, a topic that took the place
	// of the least counted one counts that one's messages too.
	Messages uint64 `json:"messages"`
	// Rate is its messages a second over the last WindowSeconds (those
	// of a topic that took another's place since it did).
	Rate float64 `json:"rate"`
}

// TopicCounts are the busiest topics.
type TopicCounts struct {
	Topics []TopicCount `json:"topics"`
	// WindowSeconds is how many seconds the rates are taken over: up to
	// TopicRateWindow, fewer in the first seconds after counting began
	// (0: no rates yet).
	WindowSeconds float64 `json:"window_seconds"`
}

// minRateWindow is the shortest window a rate is given for: just after
// counting began, a few messages over a few milliseconds say nothing.
const minRateWindow = 100 * time.Millisecond

// snapshot returns the limit busiest topics at now, by rate then
// messages. A rate is over the time since the oldest of the last
// TopicRateWindow samples (a second apart: up to TopicRateWindow
// seconds), so that a read a second after counting began has rates.
func (t *topicCounter) snapshot(limit int, now time.Time) TopicCounts {
	t.sampleMu.Lock()
	defer t.sampleMu.Unlock()
	out := TopicCounts{Topics: []TopicCount{}}
	if t.samples == 0 {
		return out
	}
	first := max(t.samples-TopicRateWindow, 0) % len(t.times)
	window := now.Sub(t.times[first])
	seconds := 0.0
	if window >= minRateWindow {
		seconds = window.Seconds()
	}
	out.WindowSeconds = math.Round(seconds*1000) / 1000
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		for _, e := range sh.m {
			c := TopicCount{Topic: e.topic, Messages: e.count}
			if e.cut {
				c.Topic += "…"
			}
			if seconds > 0 {
				c.Rate = float64(e.count-e.at[first]) / seconds
			}
			out.Topics = append(out.Topics, c)
		}
		sh.mu.Unlock()
	}
	slices.SortFunc(out.Topics, func(a, b TopicCount) int {
		return cmp.Or(cmp.Compare(b.Rate, a.Rate), cmp.Compare(b.Messages, a.Messages), strings.Compare(a.Topic, b.Topic))
	})
	if len(out.Topics) > limit {
		out.Topics = out.Topics[:limit]
	}
	return out
}

// TopicCounts returns the limit (at most MaxCountedTopics) busiest
// topics this node's clients (and wills, and Publish) published to: by
// their rate over the last TopicRateWindow seconds, then by messages.
// Counting starts with the first call, so that one finds none, and stops
// when no call has come for a minute, forgetting what it counted.
func (s *Server) TopicCounts(limit int) TopicCounts {
	now := time.Now()
	s.busy.read(now)
	return s.busy.snapshot(limit, now)
}
